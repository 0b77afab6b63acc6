"""What the browser tests of readability measure in the page (tests/test_readability_browser.py): the WCAG contrast
of every visible text against what it is drawn on, and the boxes of the plotly figures."""

# Every visible text node: its colour (an SVG text's fill) against its effective background, as the WCAG 2 ratio.
# HTML: the element's and its ancestors' backgrounds composited (a hard-stop bottom-up gradient, the canvas's
# confidence stripe, gives the band under the text's middle; any other gradient, its worst colour). Plotly: the
# heatmap cell under the text's centre, read from the image plotly drew, else the subplot's background, else the
# paper. Skipped: disabled controls (WCAG 1.4.3 exempts an inactive component) and hidden elements.
# Argument: {label: CSS selector}; `found[label]` is the lowest ratio among the checked texts inside it (null: none).
# Returns {checked, bad: [{text, where, ratio, need, fg, bg, size}], found}.
CONTRAST_JS = r"""
async (probes) => {
  const parse = (s) => { const m = (s || "").match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const hex = (s) => { const h = s.replace("#", ""); const f = h.length === 3 ? [...h].map((c) => c + c).join("") : h;
    return [0, 2, 4].map((i) => parseInt(f.slice(i, i + 2), 16)).concat([1]); };
  const norm = document.createElement("canvas").getContext("2d");
  const colour = (s) => { if (!s || s === "none") return null; if (/^(rgba?|#)/.test(s.trim())) return s.trim().startsWith("#") ? hex(s.trim()) : parse(s);
    norm.fillStyle = "#010203"; norm.fillStyle = s; return norm.fillStyle === "#010203" ? null : colour(norm.fillStyle); };
  const over = (top, under) => { const a = top[3]; return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat([1]); };
  const lum = (c) => { const ch = c.slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]; };
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };
  // The colours of a gradient background at height y (px from the element's top): a hard-stop 0deg gradient
  // (a stripe at the bottom) gives the band under y; any other gradient, every colour in it (worst case).
  const gradientAt = (image, rect, y) => {
    const stops = [...image.matchAll(/(rgba?\([^)]*\)|#[0-9a-fA-F]{3,6})\s*([\d.]+px)?\s*([\d.]+px)?/g)];
    const bottomUp = /linear-gradient\(0deg/.test(image);
    if (bottomUp && stops.every((s) => s[2] !== undefined)) {
      const fromBottom = rect.height - y;
      let hit = stops[stops.length - 1];
      for (const s of stops) { const end = parseFloat(s[3] ?? s[2]); if (fromBottom <= end) { hit = s; break; } }
      return [colour(hit[1])];
    }
    return stops.map((s) => colour(s[1]));
  };
  const backgrounds = (el, y) => {       // the element's effective backgrounds (several for a gradient)
    const layers = [];
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.backgroundImage && cs.backgroundImage.includes("gradient")) {
        const r = e.getBoundingClientRect();
        const under = backgrounds(e.parentElement, y);
        const cols = gradientAt(cs.backgroundImage, r, y - r.top);
        const base = colour(cs.backgroundColor);
        return cols.flatMap((c) => under.map((u) => over(c, base && base[3] ? over(base, u) : u)));
      }
      const c = colour(cs.backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let out = [255, 255, 255, 1];
    for (const c of layers.reverse()) out = over(c, out);
    return [out];
  };
  const visible = (el) => { for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const cs = getComputedStyle(e); if (cs.display === "none" || cs.visibility === "hidden" || +cs.opacity === 0) return false; }
    return true; };
  // Plotly: text over a heatmap reads against the cell under its centre (sampled from the drawn image),
  // text inside a subplot against the plot background, any other against the paper.
  const imageCache = new Map();
  const pixel = async (img, x, y) => {
    const href = img.getAttribute("href") || img.getAttribute("xlink:href");
    if (!imageCache.has(href)) imageCache.set(href, await new Promise((done) => {
      const im = new Image(); im.onload = () => { const c = document.createElement("canvas"); c.width = im.width; c.height = im.height;
        const ctx = c.getContext("2d"); ctx.drawImage(im, 0, 0); done({ctx, w: im.width, h: im.height}); };
      im.onerror = () => done(null); im.src = href; }));
    if (!imageCache.get(href)) return [0, 0, 0, 0];
    const {ctx, w, h} = imageCache.get(href); const r = img.getBoundingClientRect();
    const d = ctx.getImageData(Math.min(w - 1, Math.floor((x - r.left) / r.width * w)), Math.min(h - 1, Math.floor((y - r.top) / r.height * h)), 1, 1).data;
    return [d[0], d[1], d[2], d[3] / 255];
  };
  const inside = (r, x, y) => x >= r.left && x <= r.right && y >= r.top && y <= r.bottom;
  const svgBackground = async (t, x, y) => {
    const gd = t.closest(".js-plotly-plot");
    if (!gd) return backgrounds(t.closest("svg").parentElement, y)[0];        // an icon's text: the HTML under it
    const paper = colour(gd._fullLayout?.paper_bgcolor || "#fff");
    for (const img of gd.querySelectorAll("image")) {
      if (inside(img.getBoundingClientRect(), x, y)) { const p = await pixel(img, x, y); if (p[3] > 0) return over(p, paper); }
    }
    for (const bg of gd.querySelectorAll(".bglayer rect.bg")) {
      if (inside(bg.getBoundingClientRect(), x, y)) return over(colour(getComputedStyle(bg).fill), paper);
    }
    return paper;
  };
  const bad = [], found = Object.fromEntries(Object.keys(probes).map((k) => [k, null]));
  let checked = 0;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    const el = n.parentElement;
    // A disabled control is exempt (WCAG 1.4.3: "part of an inactive user interface component").
    if (!text || !el || el.closest("script, style, noscript, textarea, .lopa-hidden, button:disabled, [aria-disabled=true]")) continue;
    const range = document.createRange(); range.selectNodeContents(n);
    const box = range.getBoundingClientRect();
    if (box.width < 1 || box.height < 1 || !visible(el)) continue;
    const cs = getComputedStyle(el);
    const size = parseFloat(cs.fontSize), bold = +cs.fontWeight >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    const x = box.left + box.width / 2, y = box.top + box.height / 2;
    let fg, bgs;
    if (el.closest("svg")) {
      fg = colour(cs.fill);
      if (!fg || fg[3] === 0) { if (!fg) bad.push({text: text.slice(0, 30), where: "unparsed fill " + cs.fill}); continue; }
      bgs = [await svgBackground(el, x, y)];
    } else {
      fg = colour(cs.color);
      bgs = backgrounds(el, y);
      if (!fg) { bad.push({text: text.slice(0, 30), where: "unparsed colour " + cs.color}); continue; }
    }
    if (bgs.some((b) => !b)) { bad.push({text: text.slice(0, 30), where: "no background " + el.tagName + " " + el.className}); continue; }
    // An ancestor's opacity fades the text and the backgrounds drawn inside it alike over what lies outside it.
    let faded = 1, group = null;
    for (let e = el; e && e.nodeType === 1; e = e.parentElement) {
      const o = +getComputedStyle(e).opacity; if (o < 1) { faded *= o; group = e; } }
    const outside = group ? backgrounds(group.parentElement, y)[0] : null;
    const fade = (c) => (group ? over([c[0], c[1], c[2], faded], outside) : c);
    const fgAlpha = fg[3] * (el.closest("svg") ? +(cs.fillOpacity || 1) : 1);
    const worst = Math.min(...bgs.map((b) => ratio(fade(over([fg[0], fg[1], fg[2], fgAlpha], b)), fade(b))));
    checked += 1;
    for (const [label, selector] of Object.entries(probes)) {
      if (el.closest(selector)) found[label] = Math.min(found[label] ?? Infinity, +worst.toFixed(2));
    }
    if (worst < need) {
      const where = el.id ? "#" + el.id : (el.closest("[id]") ? "#" + el.closest("[id]").id + " " : "") + el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ? "." + el.className.split(" ")[0] : "");
      bad.push({text: text.slice(0, 30), where, ratio: +worst.toFixed(2), need, fg: cs.color || cs.fill, bg: bgs.map((b) => b.map(Math.round).join(",")).join(" | "), size});
    }
  }
  return {checked, bad, found};
}
"""

# Each plotly figure: its box, its title's box and the svg's (page coordinates), its toolbar's box when displayed.
PLOTS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter((gd) => gd.offsetParent !== null).map((gd) => {
  const box = (e) => { const b = e.getBoundingClientRect(); return {top: b.top, bottom: b.bottom, left: b.left, right: b.right,
                                                                     height: b.height, width: b.width}; };
  const title = gd.querySelector('.gtitle'), bar = gd.querySelector('.modebar');
  // the box the figure scrolls sideways in, where it is wider than the screen (a phone): marked by a border
  const panel = gd.closest('[id]:not(.js-plotly-plot)'), style = panel && getComputedStyle(panel);
  const scroller = style && ['auto', 'scroll'].includes(style.overflowX) && parseFloat(style.borderLeftWidth) > 0
    ? box(panel) : null;
  return {id: panel?.id, plot: box(gd), svg: box(gd.querySelector('.main-svg')), scroller,
          title: title && title.textContent ? box(title) : null,
          modebar: bar && bar.offsetParent !== null && getComputedStyle(bar).opacity !== '0' ? box(bar) : null};
})"""
