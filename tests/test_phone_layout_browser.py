"""Every panel readable on a phone (390x844, a touch screen) and a laptop (1366x768), measured in the browser
(issue 58, point 2; Playwright + Debian's Chromium): one page per width driven through a Run, a tapped cell, a
Compare, the share box and the tour, checking at each state where things are and how wide they are. No timing
assertions, no screenshots' pixels.
"""

import pytest
from servers import WIDTHS, PlaywrightTimeout, needs_chromium, open_accordion, type_value

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.timeout(900)]

WAIT_MS = 180_000          # hang guards only: on a busy machine a wait may take minutes, never fails a test
MIN_DATA_PX = 240          # the heatmap's data area on a phone
BOX = """s => { const e = document.querySelector(s); if (!e) return null; const b = e.getBoundingClientRect();
  return {top: b.top, bottom: b.bottom, left: b.left, right: b.right, width: b.width, height: b.height}; }"""
# Whatever sticks out of its panel: visible elements whose right edge passes the window's, or a table's cell passing
# its table's panel, unless a box between them scrolls sideways and is marked (a border, or a cue before it).
OVERFLOW_JS = """(root) => {
  const marked = (e) => { const s = getComputedStyle(e); const before = getComputedStyle(e, '::before').content;
    return ['auto', 'scroll'].includes(s.overflowX) && (parseFloat(s.borderLeftWidth) > 0 || /sideways/.test(before)); };
  const scrolls = (e) => { for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
    if (marked(a) && a.getBoundingClientRect().right <= innerWidth + 1) return true; return false; };
  const panel = (e) => e.closest('.block, .form, .column') || document.body;
  return [...document.querySelectorAll(root + ' *')].filter((e) => e.getClientRects().length && !(e instanceof SVGElement)
      && getComputedStyle(e).visibility !== 'hidden')
    .filter((e) => { const b = e.getBoundingClientRect(); if (b.width === 0) return false;
      const limit = e.matches('td, th') ? Math.min(innerWidth, panel(e.closest('table')).getBoundingClientRect().right) : innerWidth;
      return b.right > limit + 1 && !scrolls(e); })
    .slice(0, 10).map((e) => `${e.tagName}#${e.id}.${e.className} in #${e.closest('[id]')?.id}: ${Math.round(e.getBoundingClientRect().right)}`);
}"""


@pytest.fixture(scope="module", params=list(WIDTHS))
def page(request, browser, url):
    """One page a width for the module, the phone's a touch screen (no hover)."""
    phone = request.param == "phone"
    context = browser.new_context(viewport=WIDTHS[request.param], has_touch=phone, is_mobile=phone)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_selector("#tokens-chart .js-plotly-plot")
    page.phone = phone
    yield page
    assert not page.errors
    context.close()


def box(page, selector: str) -> dict:
    return page.evaluate(BOX, selector)


def in_view(page, selector: str) -> bool:
    b = box(page, selector)
    return b is not None and b["top"] >= -1 and b["bottom"] <= page.viewport_size["height"] + 1


def test_after_a_run_the_slider_sits_with_the_canvas_and_no_empty_state_shows(page):
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    slider, canvas = box(page, "#round-slider"), box(page, "#canvas")
    top, bottom = min(slider["top"], canvas["top"]), max(slider["bottom"], canvas["bottom"])
    assert bottom - top <= page.viewport_size["height"], (slider, canvas)                    # one screen holds both
    empty = page.evaluate("""() => [...document.querySelectorAll('#round-view *')].filter((e) => !e.children.length
        && /No rounds yet/.test(e.textContent) && e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
        .map((e) => e.closest('[id]')?.id)""")
    assert not empty, empty
    page.locator("#heatmap").scroll_into_view_if_needed()
    page.wait_for_selector("#counters .lopa-counters[data-figures='drawn']")
    page.wait_for_selector("#heatmap .nsewdrag")
    widths = page.evaluate("[...document.querySelectorAll('#heatmap .nsewdrag')].map((e) => e.getBoundingClientRect().width)")
    assert min(widths) >= MIN_DATA_PX, widths
    assert not page.evaluate(OVERFLOW_JS, "#round-view")


def test_the_branches_table_shows_the_columns_the_words_point_at_or_scrolls_in_a_marked_box(page):
    table = page.evaluate("""() => { const b = document.querySelector('#branches .lopa-branches');
      const s = getComputedStyle(b);
      return {right: b.getBoundingClientRect().right, scrolls: b.scrollWidth > b.clientWidth + 1, overflow: s.overflowX,
              border: parseFloat(s.borderLeftWidth), cue: getComputedStyle(b, '::before').content,
              heads: [...b.querySelectorAll('th')].map((h) => [h.innerText, h.getBoundingClientRect().right])}; }""")
    heads = dict(table["heads"])
    score = next(right for text, right in heads.items() if text.startswith("score"))
    if not page.phone:                                        # the score the tour names, and masked left, in view
        assert score <= table["right"] and heads["masked left"] <= table["right"], table
    if table["scrolls"]:
        assert table["overflow"] == "auto" and table["border"] >= 1, table
    if page.phone:
        assert table["scrolls"] and "sideways" in table["cue"], table


def show_round(page, r: int) -> None:
    """The canvas at round r, scrubbed to with the keys; again where a Run's replay of its rounds, asked for by the
    page after the scrub, took the canvas on (a scrub only ends a replay already running)."""
    for attempt in range(4):
        page.locator("#round-slider input[type=range]").focus()
        page.keyboard.press("Home")
        for _ in range(r):
            page.keyboard.press("ArrowRight")
        try:
            page.wait_for_function(f"document.querySelector('#canvas .lopa-canvas')?.dataset.round === '{r}' && "
                                   "!document.querySelector('#canvas .lopa-canvas.lopa-empty')", timeout=15_000)
            page.wait_for_timeout(300)
            if page.locator("#canvas .lopa-canvas").get_attribute("data-round") == str(r):
                return
        except PlaywrightTimeout:
            if attempt == 3:
                raise


def test_the_canvas_legend_swatches_look_like_its_cells(page):
    show_round(page, 1)                                      # a round with anchor, committed and masked cells
    looks = page.evaluate("""() => { const look = (e) => { const s = getComputedStyle(e);
        return [s.borderTopStyle, s.borderTopWidth, s.borderTopColor, s.fontFamily, s.fontStyle,
                e.querySelector('.lopa-tag')?.textContent || '']; };
      return [...document.querySelectorAll('#canvas [data-swatch]')].map((w) => {
        const cell = document.querySelector(`#canvas .lopa-cell[data-state='${w.dataset.swatch}']:not(.lopa-chain)`);
        return [w.dataset.swatch, look(w), cell && look(cell)]; }); }""")
    assert len([c for _, _, c in looks if c]) >= 3, looks
    for state, swatch, cell in looks:
        if cell:
            assert swatch[:5] == cell[:5] and swatch[5] == cell[5].rstrip("0123456789"), (state, swatch, cell)


def test_a_tap_shows_what_a_hover_would_and_the_words_say_tap_on_a_touch_screen(page):
    words = page.locator("#canvas .lopa-canvas > div").first.inner_text()
    assert ("Tap a cell" in words and "Hover" not in words) if page.phone else "Hover a cell" in words, words
    page.locator("#all-controls").scroll_into_view_if_needed()
    cell = page.locator("#canvas .lopa-cell[data-state='anchor']").first
    cell.scroll_into_view_if_needed()
    # the cell's words as the tap finds them (a Run's rounds may still be arriving, redrawing the canvas)
    page.evaluate("document.addEventListener('click', (e) => { window.tapped = e.target.closest('[title]')?.title; }, true)")
    cell.tap() if page.phone else cell.click()
    note = page.locator("#lopa-tap-note")
    note.wait_for(state="visible")
    assert note.inner_text().split() == page.evaluate("window.tapped").split()
    assert in_view(page, "#lopa-tap-note")


def test_a_tapped_cell_brings_its_what_if_panel_into_view(page):
    show_round(page, 0)
    cell = page.locator("#canvas .lopa-cell[data-state='masked']").first
    cell.scroll_into_view_if_needed()
    cell.tap() if page.phone else cell.click()
    page.wait_for_selector("#fill-first")
    page.wait_for_function("""() => [document.querySelector('#fill-first'), document.querySelector('#hold-back')]
      .every((e) => { const b = e?.getBoundingClientRect(); return b && b.height > 0 && b.top >= 0 && b.bottom <= innerHeight; })""",
                           timeout=60_000)


def test_compare_reads_on_the_width_its_cells_and_the_filling_order_numbers_fit(page):
    page.click("#compare")
    page.wait_for_selector("#lopa-counters .lopa-counters[data-status='done']")
    page.wait_for_selector("#compare-summary table")
    cells = page.evaluate("""() => { const t = document.querySelector('#compare-summary table');
      const row = [...t.querySelectorAll('tbody tr')][0];
      return {table: t.getBoundingClientRect().toJSON(), label: row.children[0].getBoundingClientRect().toJSON(),
              right: Math.max(...[...t.querySelectorAll('td, th')].map((c) => c.getBoundingClientRect().right))}; }""")
    panel = box(page, "#compare-summary")
    assert cells["right"] <= panel["right"] + 1, cells                            # Δ in view
    if page.phone:                         # stacked: a measure's label on a line of its own, the table not miles tall
        assert cells["label"]["width"] >= 0.8 * cells["table"]["width"] and cells["table"]["height"] < 2000, cells
    for side in ("#base-tfo", "#lopa-tfo"):
        page.locator(side).scroll_into_view_if_needed()
        page.wait_for_selector(f"{side} .textpoint")
        fit = page.evaluate("""(side) => { const data = document.querySelector(`${side} .nsewdrag`).getBoundingClientRect();
          const xs = new Set([...document.querySelectorAll(`${side} .textpoint`)].map((t) => t.getAttribute('transform')
            ?.match(/translate\\(([\\d.]+)/)?.[1]));
          return {cell: data.width / 16, widest: Math.max(...[...document.querySelectorAll(`${side} .textpoint text`)]
            .map((t) => t.getBBox().width)), columns: xs.size}; }""", side)
        assert fit["columns"] <= 16 and fit["widest"] <= fit["cell"] - 2, (side, fit)   # two-digit rounds in their cells
    assert not page.evaluate(OVERFLOW_JS, "body"), page.evaluate(OVERFLOW_JS, "body")
    assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")


def test_the_command_box_wraps_and_no_setting_is_wider_than_its_panel(page):
    open_accordion(page, "#settings", "#k")
    open_accordion(page, "#share", "#command")
    page.wait_for_function("document.querySelector('#command .cm-content')?.innerText.includes('lopa')")
    clip = page.evaluate("""() => { const s = document.querySelector('#command .cm-scroller');
      return [s.scrollWidth, s.clientWidth, s.getBoundingClientRect().right]; }""")
    assert clip[0] <= clip[1] + 1 and clip[2] <= page.viewport_size["width"], clip
    assert not page.evaluate(OVERFLOW_JS, "#all-controls"), page.evaluate(OVERFLOW_JS, "#all-controls")


def test_the_tours_buttons_stay_in_its_dock_and_escape_returns_to_the_top(page):
    page.click("#tour-start")
    for step in range(6):
        page.wait_for_selector(f"#tour-card .lopa-tour-card[data-step='{step}']")
        dock = box(page, "#tour-dock")
        for button in ("#tour-prev", "#tour-next", "#tour-end"):
            b = box(page, button)
            assert dock["top"] <= b["top"] and b["bottom"] <= dock["bottom"] + 1 and b["height"] >= 20, (step, button, b, dock)
            assert b["bottom"] <= page.viewport_size["height"] and b["right"] <= page.viewport_size["width"]
        if step == 2:                          # the branches: the score its words name in view, by the branch's name
            page.wait_for_function("document.querySelector('#branches')?.classList.contains('lopa-tour-focus')")
            page.wait_for_function("""() => { const box = document.querySelector('#branches .lopa-branches')
                ?.getBoundingClientRect(); const th = [...document.querySelectorAll('#branches th')]
                .find((h) => /^score/i.test(h.innerText.trim()))?.getBoundingClientRect();
              return box && th && th.left >= box.left - 1 && th.right <= box.right + 1; }""", timeout=30_000)
        if step < 5:
            page.click("#tour-next")
    page.keyboard.press("Escape")
    page.wait_for_selector("#tour-dock", state="hidden")
    page.wait_for_function("scrollY === 0")
    assert in_view(page, "#tour-start")                                          # the arrival view's first screen


def test_at_depth_3_the_chain_column_leaves_masked_left_and_the_score_in_view(page):
    if page.phone:
        pytest.skip("the phone's table scrolls in its marked box (above)")
    open_accordion(page, "#settings", "#lookahead-depth")
    type_value(page, "#lookahead-depth", "3")
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    rounds = int(page.locator("#counters .lopa-counters").get_attribute("data-rounds"))
    show_round(page, rounds - 1)               # the final round's table stands for the last round with branches
    # that round's table, not an earlier round's still on the page (the table follows the canvas)
    page.wait_for_selector(f"#branches .lopa-branches[data-round='{rounds - 1}'] table")
    heads = page.evaluate("""() => [...document.querySelectorAll('#branches th')].map((h) => [h.innerText,
        h.getBoundingClientRect().right])""")
    right = box(page, "#branches .lopa-branches")["right"]
    assert len(heads) == 8, heads                                              # the chain's column is there
    for name, edge in heads:
        if name.startswith(("masked left", "score")):
            assert edge <= right, (name, edge, right)
