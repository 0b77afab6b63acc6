"""A page of the app in Chromium (Playwright): what it sends under /gradio_api/, when it has loaded and settled,
and a Run timed on the page's own clock."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
QUIET_S = 3.0                 # an idle page has settled when it sent nothing for this long...
SETTLE_BOUND_S = 60.0         # ...or this long has passed since it was ready (it then counts as not settled)
READY = ["#run", "#tokens-chart .js-plotly-plot"]
LOADED = "document.querySelector('#model-info')?.innerText.includes('loaded from')"
# Stamps, on the page's own clock, the click on Run, the first round shown and the final state (the figures
# on the screen included); notes whether the round view's Stop was ever enabled while the counters said
# "running". Installed once per page, and each call starts a new record (a page times several Runs): the
# counters belong to this Run from its first "running" message on.
OBSERVE_RUN = """() => {
  window.__run = {click: null, first: null, done: null, sawRunning: false, stopEnabled: false};
  if (window.__observing) return;
  window.__observing = true;
  document.querySelector('#run').addEventListener('click', () => { window.__run.click ??= performance.now(); }, true);
  const box = document.querySelector('#counters');
  new MutationObserver(() => {
    const t = window.__run, el = box.querySelector('.lopa-counters');
    if (!el || t.click === null) return;
    if (el.dataset.status === 'running') {
      t.sawRunning = true;
      t.stopEnabled ||= !document.querySelector('#stop').disabled;
    }
    if (!t.sawRunning) return;            // still the previous Run's counters
    if (Number(el.dataset.rounds) >= 1) t.first ??= performance.now();
    // the final state: the run done and, where a figure is on the screen, the figures drawn (a page's Run
    // leaves them until they are in view: app/panels/round_view/views.py draw_figures)
    if (el.dataset.status !== 'done' || t.done !== null) return;
    const shown = () => ['#heatmap', '#rank-lanes', '#tokens-chart'].some((id) => {
      const r = document.querySelector(id).getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });
    if (el.dataset.figures !== 'stale' || !shown()) t.done = performance.now();
  }).observe(box, {subtree: true, childList: true, attributes: true});
}"""


class Requests:
    """What one page sends under /gradio_api/, with times, by path: a queue join or a direct call named by
    the handler it runs (`names`: fn_index -> name), the session hash left out."""

    def __init__(self, page, names: dict[int, str]):
        self.names, self.times, self.paths = names, [], []
        page.on("request", self.seen)

    def seen(self, request) -> None:
        path = urlparse(request.url).path
        if "/gradio_api/" not in path:
            return
        parts = path.split("/gradio_api/", 1)[1].split("/")
        parts = parts[:1] if parts[0] == "heartbeat" else parts[:2]          # drop the session hash
        name = "/".join(p.split("=")[0] + ("=" if "=" in p else "") for p in parts)
        if name in ("queue/join", "run/predict"):
            try:
                fn = json.loads(request.post_data or "{}").get("fn_index")
                name += f" {self.names.get(fn, fn)}"
            except ValueError:
                pass
        self.times.append(time.monotonic())
        self.paths.append(name)

    def counted(self, since: float, until: float = float("inf")) -> Counter:
        return Counter(p for t, p in zip(self.times, self.paths) if since <= t < until)


async def until(page, js: str, timeout=None):
    """Wait until `js` is true in `page`, looked at every 100 ms: Playwright's default looks at every animation
    frame, and the pages' polling then takes CPU from the server it measures (the times are stamped in the
    page by a MutationObserver, so the interval costs them no accuracy)."""
    await page.wait_for_function(js, polling=100, **({"timeout": timeout} if timeout is not None else {}))


async def shown(page, selector: str, timeout=None):
    """Wait until an element matches `selector` (as `until`)."""
    await until(page, f"document.querySelector({json.dumps(selector)}) !== null", timeout)


async def open_page(browser, url: str, wait_ms: int, names: dict[int, str]):
    context = await browser.new_context(viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(wait_ms)
    page = await context.new_page()
    page.requests = Requests(page, names)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)[:200]))
    await page.goto(url, timeout=wait_ms)
    for selector in READY:
        await shown(page, selector)
    await until(page, LOADED)
    return page


async def settle(page) -> bool:
    """Wait until the page sent nothing for QUIET_S seconds (True), at most SETTLE_BOUND_S (False)."""
    end = time.monotonic() + SETTLE_BOUND_S
    while time.monotonic() < end:
        last = page.requests.times[-1] if page.requests.times else 0.0
        if time.monotonic() - last >= QUIET_S:
            return True
        await asyncio.sleep(0.25)
    return False


async def timed_run(page, prompt: str | None, cpu=None) -> dict:
    """The Run of the page's prompt (the first example, or `prompt`): seconds from the click to the first
    round shown and to the final state, on the page's clock; the server's own decode seconds; with `cpu`
    (cpu_by_side of this run's processes), the CPU seconds each side spent from the click to the final state."""
    if prompt:
        await page.locator("#prompt textarea").fill(prompt)
    await page.evaluate(OBSERVE_RUN)
    before = cpu() if cpu else None
    await page.click("#run")
    await until(page, "window.__run.done !== null")
    spent = {k: round(v - before[k], 2) for k, v in cpu().items()} if cpu else None
    t = await page.evaluate("window.__run")
    server = await page.locator("#counters [data-counter='elapsed']").get_attribute("data-value")
    out = {"first_round_s": round((t["first"] - t["click"]) / 1000, 3), "final_s": round((t["done"] - t["click"]) / 1000, 3),
           "server_s": float(server.split()[0]), "stop_enabled_while_running": t["stopEnabled"] if t["sawRunning"] else None}
    return out | ({"cpu_s": spent} if spent else {})

