"""A crowd in real browsers (Playwright + Debian's Chromium) on one served app: an idle page sends nothing
whatever other visitors do, and every Stop is clickable while its job runs and ends it.

The jobs are paced here (a sleep between the chunks a decode or a search streams) so that each is still
running when the test looks at its Stop, however fast the machine. Skips when /usr/bin/chromium is absent.
Every wait has a timeout; none is a speed assertion."""

import time

import pytest
from servers import SERVED, needs_chromium, open_browser, paced, serve_app

pytestmark = [needs_chromium, pytest.mark.browser, pytest.mark.timeout(900)]          # a hang guard

WAIT_MS = 180_000           # hang guards only
QUIET_S = 3                 # an opened page has settled once it sent nothing for this long
ROUNDS_JS = "Number(document.querySelector('#counters .lopa-counters')?.dataset.rounds ?? -1)"
PROMPT = "Tom has 23 apples. He gives 7 to Ann. Then he buys 12 more and eats 3. How many apples does Tom have now?"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    # Cold, as a Space just started: the model panel's text changes when the first page's warm-up loads the
    # model, which is what set Gradio's page firing its change again and again (app/wiring.follow_model).
    yield from serve_app(tmp_path_factory, cold=True)


@pytest.fixture(scope="module")
def browser():
    yield from open_browser(WAIT_MS)


class Requests:
    """Every request a page sends to the app's API, with the time it was sent."""

    def __init__(self, page):
        self.sent: list[tuple[float, str]] = []
        page.on("request", self.record)

    def record(self, request):
        if "/gradio_api/" in request.url:
            self.sent.append((time.monotonic(), request.method + " " + request.url.split("/gradio_api/")[-1][:40]))

    def since(self, t: float) -> list[str]:
        return [what for when, what in self.sent if when >= t]


def open_page(browser, url: str, init_script: str | None = None):
    """A new visitor (a browser context of its own: its own Gradio session) on a ready page: its page-load
    events have answered (the tokens chart they end with is drawn), not only been sent."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    requests = Requests(page)
    page.goto(url, timeout=WAIT_MS)
    page.wait_for_function("document.querySelector('#model-info')?.innerText.includes('loaded from')")
    page.wait_for_selector("#tokens-chart .js-plotly-plot")
    return page, requests


def settle(page, requests: Requests, bound_s: float = 60) -> None:
    """Wait until the page has sent nothing for QUIET_S (its page-load events are done), at most bound_s: a page
    that never settles is counted from then on, and the test says what it kept sending."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        page.wait_for_timeout(500)             # pumps Playwright's events: the requests are recorded meanwhile
        last = requests.sent[-1][0] if requests.sent else 0.0
        if time.monotonic() - last >= QUIET_S:
            return


def run_to_the_end(page, prompt: str = PROMPT) -> None:
    page.locator("#prompt textarea").fill(prompt)
    page.click("#run")
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")


def enabled_while_running(page, selector: str, running_js: str) -> bool:
    """Whether the Stop `selector` is enabled while its job still runs (`running_js`): waits for the first of
    the two, Stop enabled or the job over (no clock: the paced job runs for seconds either way)."""
    stop_enabled = f"!document.querySelector('{selector}').disabled"
    page.wait_for_function(f"{stop_enabled} || !({running_js})")
    return page.evaluate(f"({stop_enabled}) && ({running_js})")


def test_an_idle_page_sends_nothing_while_other_visitors_work(browser, url):
    """Gradio 6.31 fired the model panel's change again whenever the page re-rendered it, and four jobs
    hung on that change (app/wiring.follow_model): idle pages looped, some from their own page load, some
    after another visitor's Runs, each loop a queued model-slot job every visitor waited behind."""
    idle = [open_page(browser, url) for _ in range(2)]
    for page, requests in idle:
        settle(page, requests)
    start = time.monotonic()
    active, _ = open_page(browser, url)
    for _ in range(2):
        run_to_the_end(active)
    active.click("#step")
    active.wait_for_function("document.querySelector('#status')?.innerText.length > 0")
    idle[0][0].wait_for_timeout(10_000)        # the watch after the work (the crowd benchmark watches 60 s)
    for page, requests in idle:
        page.wait_for_timeout(100)
        sent = requests.since(start)
        assert sent == [], f"an idle page sent {len(sent)} requests after another visitor's work: {sent[:12]}"
        assert not page.errors
    active.context.close()
    for page, _ in idle:
        page.context.close()


# Counts, from before any of the page's scripts run, the animation frames the page asks for, by caller.
COUNT_FRAMES = """(() => { const frame = window.requestAnimationFrame.bind(window); window.__frames = 0;
  window.__callers = {};
  window.requestAnimationFrame = (callback) => { window.__frames += 1;
    const at = (new Error().stack || "").split("\\n").slice(2, 5).map(l => l.trim()).join(" < ").slice(-200);
    window.__callers[at] = (window.__callers[at] || 0) + 1;
    return frame(callback); }; })();"""


def test_an_idle_page_asks_for_almost_no_frames(browser, url):
    """Gradio 6.31's app-level status tracker is unmounted while its timer loop runs, and the loop then asks
    for a frame 60 times a second for as long as the page is open (app/serving/frames.py); with the guard, about one."""
    page, requests = open_page(browser, url, init_script=COUNT_FRAMES)
    settle(page, requests)
    before = page.evaluate("window.__callers = {}, window.__frames")
    page.wait_for_timeout(5_000)
    frames = page.evaluate("window.__frames") - before
    callers = page.evaluate("window.__callers")
    assert frames <= 25, f"an idle page asked for {frames} animation frames in 5 s, by caller: {callers}"
    run_to_the_end(page)                     # the page still works: its own trackers are not held back
    page.context.close()


def test_the_round_views_stop_is_clickable_while_a_run_streams_and_ends_it(browser, url, monkeypatch):
    from app.panels.round_view import callbacks
    monkeypatch.setattr(callbacks, "stream_jobs", paced(callbacks.stream_jobs, 1.0))
    page, _ = open_page(browser, url)
    assert page.locator("#stop").is_disabled()                  # nothing to stop yet
    page.locator("#prompt textarea").fill(PROMPT)
    page.click("#run")
    running = "document.querySelector('#counters .lopa-counters')?.dataset.status !== 'done'"
    assert enabled_while_running(page, "#stop", running), "Stop was enabled only once the Run had ended"
    page.wait_for_function(f"{ROUNDS_JS} >= 1")
    assert "running" == page.locator("#counters .lopa-counters").get_attribute("data-status")
    page.click("#stop")
    page.wait_for_function("document.querySelector('#status')?.innerText.includes('stopped')")
    assert page.locator("#counters .lopa-counters").get_attribute("data-status") != "done"
    page.wait_for_function("document.querySelector('#stop')?.disabled")       # nothing left to stop
    assert not page.errors
    page.context.close()


def test_the_best_order_searchs_stop_is_clickable_while_it_searches_and_ends_it(browser, url, monkeypatch):
    from app.serving import boundary
    page, _ = open_page(browser, url)
    run_to_the_end(page)
    monkeypatch.setattr(boundary, "best_order_steps_on_gpu", paced(boundary.best_order_steps_on_gpu, 0.5))
    assert page.locator("#best-order-stop").is_disabled()
    page.click("#best-order")
    searching = "!['Best order found', \"LoPA's order is the best found\", 'Stopped'].some(t => " \
                "document.querySelector('#best-order-status').innerText.includes(t))"
    assert enabled_while_running(page, "#best-order-stop", searching), "the search's Stop was enabled only once it had ended"
    page.wait_for_function("document.querySelector('#best-order-status')?.innerText.includes('rollout')")
    page.click("#best-order-stop")
    stopped = "['Stopped before the first round', '(stopped'].some(t => document.querySelector('#best-order-status')" \
              ".innerText.includes(t))"
    page.wait_for_function(stopped)
    page.wait_for_function("document.querySelector('#best-order-stop')?.disabled")
    assert not page.errors
    page.context.close()


def test_the_comparisons_stop_is_clickable_while_it_streams_and_ends_it(browser, url, monkeypatch):
    from app.panels import compare
    monkeypatch.setattr(compare, "stream_jobs", paced(compare.stream_jobs, 1.0))
    page, _ = open_page(browser, url)
    page.locator("#prompt textarea").fill(PROMPT)
    assert page.locator("#compare-stop").is_disabled()
    page.click("#compare")
    comparing = "!document.querySelector('#compare-status').innerText.startsWith('Done')"
    assert enabled_while_running(page, "#compare-stop", comparing), "the comparison's Stop was enabled only once it had ended"
    page.wait_for_function("document.querySelector('#lopa-counters .lopa-counters')?.dataset.status === 'running'")
    page.click("#compare-stop")
    page.wait_for_function("document.querySelector('#compare-status')?.innerText.includes('stopped early') || "
                           "document.querySelector('#compare-status').innerText.includes('Stopped before')")
    page.wait_for_function("document.querySelector('#compare-stop')?.disabled")
    assert not page.errors
    page.context.close()


def queue_state(url) -> dict:
    """What the served app's queue holds: per concurrency group, the jobs running and waiting, and the running
    jobs' functions (a diagnostic for a test whose job never started)."""
    queue = SERVED[url]._queue
    running = [getattr(events[0].fn.fn, "__name__", "?") for events in queue.active_jobs if events]
    return {"running": running, **{cid: (q.current_concurrency, len(q.queue))
                                   for cid, q in queue.event_queue_per_concurrency_id.items()}}


def sessions_with_runs(url) -> set:
    from app.serving.session import Session
    holder = SERVED[url].state_holder
    return {id(v): v for state in list(holder.session_data.values()) for _, v, _ in state.state_components
            if isinstance(v, Session) and v.runs.entries}


def test_a_closed_page_gives_its_runs_back_at_once(browser, url):
    """Gradio would keep a closed page's session an hour (app.serving.closed_pages.end_page)."""
    before = sessions_with_runs(url)
    page, _ = open_page(browser, url)
    run_to_the_end(page)
    mine = [s for key, s in sessions_with_runs(url).items() if key not in before]
    assert len(mine) == 1 and mine[0].run is not None
    holder = SERVED[url].state_holder                      # Gradio's record of each page (its last outputs)
    (key,) = [k for k, state in list(holder.session_data.items()) if any(s is mine[0] for _, s, _ in state.state_components)]
    page.context.close()
    deadline = time.monotonic() + 60                       # the server sees the page's heartbeat end
    while (mine[0].runs.entries or key in holder.session_data) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not mine[0].runs.entries and mine[0].run is None, "the closed page's runs were still held after 60 s"
    assert key not in holder.session_data, "Gradio still held the closed page's record after 60 s"


def test_a_run_does_not_wait_for_another_visitors_search(browser, url, monkeypatch):
    """The search and the studies run beside the model slot (app/panels/events.py LONG): a Run pressed while another
    visitor's search runs ends while that search is still running (in the model slot it waited for the end)."""
    from app.serving import boundary
    searcher, _ = open_page(browser, url)
    run_to_the_end(searcher)
    monkeypatch.setattr(boundary, "best_order_steps_on_gpu", paced(boundary.best_order_steps_on_gpu, 1.0))
    searcher.click("#best-order")
    status = "document.querySelector('#best-order-status').innerText"
    try:
        searcher.wait_for_function(f"{status}.includes('rollout') || {status}.includes('Error')")
    except Exception as err:          # a hang guard ran out: say what the queue held
        raise AssertionError(f"the search never started: {queue_state(url)}") from err
    assert "rollout" in searcher.locator("#best-order-status").inner_text(), searcher.locator("#best-order-status").inner_text()
    runner, _ = open_page(browser, url)
    run_to_the_end(runner)
    assert "Done" in runner.locator("#status").inner_text()
    searching = searcher.locator("#best-order-status").inner_text()
    assert "Searching" in searching or "Searched round" in searching, searching
    searcher.click("#best-order-stop")
    searcher.wait_for_function("document.querySelector('#best-order-stop')?.disabled")
    assert not searcher.errors and not runner.errors
    searcher.context.close()
    runner.context.close()
