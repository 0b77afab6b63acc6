"""A crowd on one server: N real Chromium pages left idle while M visitors run Runs, Steps, forks, a live
study and a best-order search through the page (Playwright + Debian's Chromium, one browser, a context
per visitor). The app is served by a child process on 127.0.0.1, so its CPU and RSS are the server's alone
(its decode workers included: app/decode_pool.py).

    python scripts/bench_crowd.py [--idle 6] [--active 2] [--runs 3] [--watch-s 60] [--deadline-s 1200]
                                  [--model NAME] [--actions best_order,fork,steps,study] [--json out.json] [--strict]

In order, on one server process:
1. warm-up: one page loads, does a visitor's whole work (below) and closes; the server's RSS after that
   (the minimum over `--settle-s` seconds of samples, as at the end) is the baseline, and its peak counter (VmHWM) starts afresh;
2. alone: the first example's Run, `--runs` times on each of `--alone` fresh pages, one after the other, no
   other page open, each Run once the page has settled after the one before: seconds from the click to the first round shown and to the final state (the page's own
   clock, read by a MutationObserver on the counters), and the CPU seconds the server, its workers and the
   browsers spent on it;
3. crowd: N idle pages open and settle (no request for a few seconds after their load events); from then
   on every request each sends under /gradio_api/ is counted, by path (a queue join by the event that
   sent it); the M active visitors then run the same Run `--runs` times, all pressing Run together each
   time (timed as alone), then `--actions`: a best-order search, a fork (Fill first on a masked cell at
   round 1), three Steps and Stop, and a live study (one problem, one random order); the idle pages are
   watched for `--watch-s` seconds more after the last visitor ends;
4. every page closes; RSS is sampled for `--settle-s` seconds and the minimum kept. (Gradio 6.31 keeps a
   closed page's session state for an hour, and glibc keeps freed heap until something trims it: both show
   here.)

Prints the figures, PASS / FAIL for each goal and, last, one JSON line (also written to `--json`).
The goals (docs/deployment.md, "Crowd"): 0 requests from every idle page from the visitors' start to the
end of the watch; the crowd's median final-state latency at most 1.5x the median alone; RSS after every
page closed within 50 MB of the baseline. The model's events have a queue slot per decode worker
(app/wiring.py), so visitors pressing Run together decode at once, each in a worker of its own (each Run's
`server_s`, the server's own time for it, is printed beside it). Exit code 0 unless --strict and a goal
fails, or the benchmark itself could not run (2). Every wait has a timeout and the whole run a hard deadline;
the server is killed at the end whatever happens. A figure, not a test: on a shared machine, say so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
GOALS = {"idle_requests": 0, "run_final_ratio": 1.5, "rss_after_close_mb": 50.0}
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
    // leaves them until they are in view: app/callbacks.py draw_figures)
    if (el.dataset.status !== 'done' || t.done !== null) return;
    const shown = () => ['#heatmap', '#rank-lanes', '#tokens-chart'].some((id) => {
      const r = document.querySelector(id).getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });
    if (el.dataset.figures !== 'stale' || !shown()) t.done = performance.now();
  }).observe(box, {subtree: true, childList: true, attributes: true});
}"""
STUDY = "1. LoPA's orders against random orders"
BEST_DONE = ("['Best order found', \"LoPA's order is the best found\", 'Stopped'].some("
             "t => document.querySelector('#best-order-status').innerText.includes(t))")
STUDY_DONE = "/(^|\\n)(Done|Stopped)/.test(document.querySelector('#study-status').innerText)"


# -- the pages' share of the CPU ------------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:                       # ended while listed
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found.update(kids)
        todo += kids
    return sorted(found)


def lower_browsers(server_pid: int, nice: int) -> int:
    """Give the benchmark's own processes (Playwright's driver, Chromium and its zygotes; renderers opened
    later inherit it) the niceness `nice`, the server and its children left as they are: on a Space the
    visitors' browsers run on their own machines, here they share the server's two cores. Returns how many."""
    spare = {server_pid, *descendants(server_pid)}
    lowered = 0
    for pid in [p for p in descendants(os.getpid()) if p not in spare]:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
            lowered += 1
        except OSError:                       # ended meanwhile
            pass
    return lowered


# -- the server: a child process ----------------------------------------------------------------------
def serve_child(port: int, model: str) -> None:
    """What the child runs: the app on 127.0.0.1:`port`, `model` (a bundled name or a folder; "" the
    default) as every session's model, loaded before the first page opens."""
    sys.path.insert(0, str(ROOT))
    from app import build_demo, serve
    from app.serving.model_cache import MODELS
    try:
        MODELS.default = MODELS.folder(model)
    except ValueError as err:
        raise SystemExit(f"--model: {err}") from None
    MODELS.get()
    serve("127.0.0.1", port, build_demo())


class Server:
    """The app in a child process (its own process group, killed with it) and its /proc figures."""

    def __init__(self, model: str, log: Path, cpus: set[int] | None = None):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = log
        # The child also dies if this process is killed outright (PR_SET_PDEATHSIG); loopback only, so
        # no analytics call leaves it.
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-port", str(self.port),
                                      "--model", model], stdout=log.open("w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"},
                                     start_new_session=True, preexec_fn=lambda: _die_with_parent(cpus), cwd=ROOT)

    def wait_ready(self, bound_s: float) -> None:
        end = time.monotonic() + bound_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}): {self.log_tail(300).strip()}")
            try:
                with urllib.request.urlopen(self.url + "config", timeout=5) as answer:
                    self.config = json.load(answer)
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the server did not answer within {bound_s:.0f} s: {self.log_tail()}")

    def settle_cpu(self, bound_s: float = 180.0, window_s: float = 2.0) -> float:
        """Wait until the server and its children (decode workers starting, a model warming up) spend under 10%
        of a core for `window_s` seconds, at most bound_s; returns the seconds waited."""
        start = time.monotonic()
        while time.monotonic() - start < bound_s:
            before = self.cpu_s()
            time.sleep(window_s)
            if self.cpu_s() - before < 0.1 * window_s:
                break
        return time.monotonic() - start

    def log_tail(self, n: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.is_file() else ""

    def cpu_s(self) -> float:
        """CPU seconds of the server and its children (the decode workers), utime + stime."""
        return sum(map(process_cpu_s, [self.proc.pid, *descendants(self.proc.pid)]))

    def status_mb(self, field: str) -> float:
        """A /proc status figure in MB: VmRSS summed over the server and its children (the decode workers,
        app/decode_pool.py; any branch-parallel ranks), anything else the server process's own (VmHWM)."""
        pids = [self.proc.pid] + (descendants(self.proc.pid) if field == "VmRSS" else [])
        total = 0.0
        for pid in pids:
            try:
                lines = Path(f"/proc/{pid}/status").read_text().splitlines()
            except OSError:                   # a child that ended meanwhile
                if pid == self.proc.pid:
                    return float("nan")
                continue
            total += next((int(line.split()[1]) / 1024 for line in lines if line.startswith(field + ":")), 0.0)
        return total

    def reset_peak(self) -> bool:
        """Start the kernel's peak-RSS counter (VmHWM) afresh: it then sees transients between samples."""
        try:
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
            return True
        except OSError:
            return False

    def min_rss_mb(self, seconds: float, every: float = 1.0) -> float:
        """The least RSS over `seconds` of samples: what the process holds once freed memory is returned."""
        samples, end = [], time.monotonic() + seconds
        while True:
            samples.append(self.status_mb("VmRSS"))
            if time.monotonic() + every > end:
                return min(samples)
            time.sleep(every)

    def stop(self) -> None:
        if self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(wait)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)                    # anything it started
        except ProcessLookupError:
            pass

    def event_names(self) -> dict[int, str]:
        """fn_index -> the handler a request runs: its name and what triggers it (`#elem.event`, or the
        handler it follows), so a request from an idle page names the event chain that sent it."""
        ids = {c["id"]: (c.get("props") or {}).get("elem_id") or c.get("type", c["id"])
               for c in self.config.get("components", [])}
        deps = {d.get("id", i): d for i, d in enumerate(self.config.get("dependencies", []))}
        names = {}
        for fn, dep in deps.items():
            after = deps.get(dep.get("trigger_after"), {}).get("api_name")
            triggers = [f"after {after}" if event == "then" else f"#{ids.get(target, target)}.{event}"
                        for target, event in dep.get("targets", [])]
            names[fn] = f"{dep.get('api_name') or fn} ({', '.join(triggers[:2])}{', ...' if len(triggers) > 2 else ''})"
        return names

    def first_prompt(self) -> str:
        """The text the page's prompt box opens with (the first example)."""
        return next(((c.get("props") or {}).get("value") or "" for c in self.config.get("components", [])
                     if (c.get("props") or {}).get("elem_id") == "prompt"), "")


# -- the server alone: API callers, no browser -------------------------------------------------------------
def api_runs(url: str, prompt: str, callers: int, runs: int, bound_s: float) -> dict:
    """Run through `/run` (gradio_client, a session per caller, no browser): `runs` times by one caller alone, then
    `runs` times by all `callers` together; seconds from the call to the final state, as the server sends it.
    What the server does for a crowd whose pages run on other machines (a Space's visitors)."""
    from gradio_client import Client
    clients = [Client(url, verbose=False) for _ in range(callers)]

    def run(client) -> float:
        start = time.perf_counter()
        client.submit(prompt=prompt, api_name="/run").result(timeout=bound_s)
        return round(time.perf_counter() - start, 3)

    run(clients[0])                                   # the API path's first call (its imports, its session)
    alone = [run(clients[0]) for _ in range(runs)]
    together, gate = [], threading.Barrier(callers, timeout=bound_s)

    def caller(client) -> None:
        for _ in range(runs):
            gate.wait()
            together.append(run(client))
    threads = [threading.Thread(target=caller, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(bound_s * (runs + 1))
    return {"alone": alone, "together": sorted(together),
            "ratio": round(statistics.median(together) / statistics.median(alone), 2) if together else None}


def _die_with_parent(cpus: set[int] | None = None) -> None:
    """In the server child before it runs: it dies with this process (PR_SET_PDEATHSIG), on `cpus` if given."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    if cpus:
        os.sched_setaffinity(0, cpus)


# -- pages ------------------------------------------------------------------------------------------------
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


def process_cpu_s(pid: int) -> float:
    """CPU seconds (utime + stime) of process `pid` so far; 0 if it has ended."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_side(server_pid: int) -> dict:
    """CPU seconds so far of the server process, of its children (the decode workers, any branch-parallel
    ranks) and of this benchmark's browsers (every other process under this one), from /proc: what a Run
    costs each side (processes that ended meanwhile are not counted)."""
    children = descendants(server_pid)
    browsers = [p for p in descendants(os.getpid()) if p != server_pid and p not in children]
    return {"server": process_cpu_s(server_pid), "workers": sum(map(process_cpu_s, children)),
            "browsers": sum(map(process_cpu_s, browsers))}


async def until_or_stop(page, done_js: str, stop: str, bound_s: float) -> str:
    """Wait for `done_js` up to `bound_s`; past that, press `stop` and wait for it again."""
    try:
        await until(page, done_js, timeout=bound_s * 1000)
        return "ended"
    except Exception:
        await page.locator(stop).click(timeout=30_000)
        await until(page, done_js, timeout=120_000)
        return f"stopped after {bound_s:.0f} s"


async def best_order(page, bound_s: float) -> str:
    await page.locator("#best-order").scroll_into_view_if_needed()
    await page.click("#best-order")
    return await until_or_stop(page, BEST_DONE, "#best-order-stop", bound_s)


async def fork(page, bound_s: float) -> str:
    """Fill first, with the model's second choice, the last masked cell at round 1 of the shown run."""
    await page.locator("#round-view").scroll_into_view_if_needed()
    slider = page.locator("#round-slider input[type=range]")
    await slider.focus()
    await page.keyboard.press("Home")
    await page.keyboard.press("ArrowRight")
    # The cell clicked is the one whose position is read: the canvas may be drawn again in between (the run
    # list's last change after a search lands late), and a locator would find the new canvas's last cell.
    for attempt in range(3):
        await shown(page, "#canvas .lopa-canvas[data-round='1']")
        cell = await page.locator("#canvas .lopa-canvas[data-round='1'] .lopa-cell[data-state='masked']").last.element_handle()
        position = await cell.get_attribute("data-position")
        try:
            await cell.click(timeout=5_000)
            break
        except Exception:                       # drawn again meanwhile: read the new canvas
            if attempt == 2:
                raise
    try:
        step = f"the what-if panel for position {position}"
        await until(page, f"document.querySelector('#whatif-info')?.innerText.includes('position {position}')")
        await page.locator("#whatif-token label").nth(1).click()
        await page.click("#fill-first")
        step = "the fork's status"
        await until(page, "document.querySelector('#status').innerText.includes('Fork of run') || "
                                     "document.querySelector('#status').innerText.startsWith('Done')")
    except Exception as err:                    # which wait, and what the page said meanwhile
        said = (await page.inner_text("#status"))[:120].replace("\n", " ")
        panel = await page.evaluate("document.querySelector('#whatif-info')?.innerText.slice(0, 160) ?? 'no panel'")
        raise RuntimeError(f"waiting for {step}: {type(err).__name__}; status: {said!r}; what-if: {panel!r}") from err
    await shown(page, "#counters .lopa-counters[data-status='done']", timeout=bound_s * 1000)
    return f"forked at position {position}"


async def steps(page, n: int = 3) -> str:
    await page.click("#reset")
    await shown(page, "#counters .lopa-counters[data-rounds='0']")
    for expected in range(1, n + 1):
        await page.click("#step")
        await shown(page, f"#counters .lopa-counters[data-rounds='{expected}']")
    await until(page, "!document.querySelector('#stop').disabled", timeout=30_000)
    await page.click("#stop")
    await shown(page, "#counters .lopa-counters[data-status='stopped']")
    return f"{n} steps, stopped"


async def study(page, bound_s: float) -> str:
    await page.locator("#studies-view").scroll_into_view_if_needed()
    await page.locator("#study input").click()
    await page.get_by_role("option", name=STUDY).click()
    await until(page, "document.querySelector('#study-summary').innerText.includes('random orders')")
    await page.locator("#study-problems input").fill("1")
    await page.locator("#study-random input").fill("1")
    await page.click("#study-run")
    end = await until_or_stop(page, STUDY_DONE, "#study-stop", bound_s)
    bar = page.locator("#study-progress progress")
    return f"{end}, {await bar.get_attribute('value')} of {await bar.get_attribute('max')} decodes"


ACTIONS = {"best_order": lambda page, args: best_order(page, args.action_s),
           "fork": lambda page, args: fork(page, args.action_s),
           "steps": lambda page, args: steps(page),
           "study": lambda page, args: study(page, args.action_s)}


async def visitor(page, args, delay_s: float = 0.0, together: asyncio.Barrier | None = None) -> dict:
    """One active visitor's work: `args.runs` timed Runs, each `delay_s` after every visitor is ready for it
    (`together`), then `args.actions` in order, each timed; an action that fails is noted and the next goes on."""
    out = {"runs": [], "actions": {}}
    for i in range(args.runs):
        try:
            if i:
                await settle(page)            # the page's last Run ended (its replay of a fast first Run included)
            if together is not None:
                async with asyncio.timeout(args.wait_s):
                    await together.wait()
            await asyncio.sleep(delay_s)
            out["runs"].append(await timed_run(page, args.prompt))
        except BaseException:
            if together is not None:
                await together.abort()        # the other visitors stop waiting for this one
            raise
    for name in args.actions:
        start = time.monotonic()
        try:
            note, ok = await ACTIONS[name](page, args), True
        except Exception as err:                # a page that stops answering is a finding, not a crash
            note, ok = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}", False
        out["actions"][name] = {"s": round(time.monotonic() - start, 2), "ok": ok, "note": note}
    return out


# -- the phases -------------------------------------------------------------------------------------------
async def phases(server: Server, args, result: dict) -> None:
    from playwright.async_api import async_playwright
    wait_ms = int(args.wait_s * 1000)
    names = server.event_names()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, timeout=wait_ms)
        if args.browser_nice:
            log(f"{lower_browsers(server.proc.pid, args.browser_nice)} browser processes at nice {args.browser_nice}")
        try:
            # The warm-up does a visitor's whole work, so what loads once per process (modules, problem
            # sets) is in the baseline and RSS after the crowd shows what the pages themselves leave.
            log(f"warm-up page: load, Run, {', '.join(args.actions) or 'nothing else'}, close")
            page = await open_page(browser, server.url, wait_ms, names)
            result["warmup"] = await visitor(page, args)
            await page.context.close()
            rss = result["server"]["rss_mb"]
            rss["start"] = round(server.min_rss_mb(args.settle_s), 1)          # sampled as the end is
            result["server"]["peak_is_vmhwm"] = server.reset_peak()
            log(f"RSS baseline {rss['start']:.0f} MB")

            cpu = server.cpu_s()
            for i in range(args.alone):
                page = await open_page(browser, server.url, wait_ms, names)
                await settle(page)
                for j in range(args.runs):
                    if j:
                        await settle(page)
                    result["alone"].append(await timed_run(page, args.prompt, lambda: cpu_by_side(server.proc.pid)))
                    log(f"alone {i + 1}: {fmt_run(result['alone'][-1])}")
                await page.context.close()
            result["server"]["cpu_s"]["alone"] = round(server.cpu_s() - cpu, 2)

            log(f"opening {args.idle} idle and {args.active} active pages")
            idle = [await open_page(browser, server.url, wait_ms, names) for _ in range(args.idle)]
            active = [await open_page(browser, server.url, wait_ms, names) for _ in range(args.active)]
            settled = await asyncio.gather(*(settle(pg) for pg in idle + active))
            result["idle"] = [{"page": i + 1, "settled": s, "load_requests": len(pg.requests.times)}
                              for i, (pg, s) in enumerate(zip(idle, settled))]
            rss["open"] = round(server.status_mb("VmRSS"), 1)

            start, cpu = time.monotonic(), server.cpu_s()
            log("active visitors start")
            together = asyncio.Barrier(len(active))
            result["crowd"] = list(await asyncio.gather(*(visitor(pg, args, i * args.stagger_s, together)
                                                          for i, pg in enumerate(active)), return_exceptions=True))
            result["crowd"] = [r if isinstance(r, dict) else {"error": f"{type(r).__name__}: {str(r)[:200]}"}
                               for r in result["crowd"]]
            ended = time.monotonic()
            rss["visitors_done"] = round(server.status_mb("VmRSS"), 1)
            result["server"]["cpu_s"]["crowd"] = round(server.cpu_s() - cpu, 2)
            result["crowd_s"] = round(ended - start, 1)
            log(f"active visitors done after {ended - start:.0f} s; watching the idle pages {args.watch_s:.0f} s")
            cpu = server.cpu_s()
            await asyncio.sleep(args.watch_s)
            result["server"]["cpu_s"]["watch"] = round(server.cpu_s() - cpu, 2)
            for row, pg in zip(result["idle"], idle):
                row["during_active"] = dict(pg.requests.counted(start, ended))
                row["during_watch"] = dict(pg.requests.counted(ended))
                row["total"] = sum(row["during_active"].values()) + sum(row["during_watch"].values())
                row["page_errors"] = pg.errors[:3]
            for pg in idle + active:
                await pg.context.close()
        finally:
            await browser.close()
    log(f"every page closed; RSS settles for {args.settle_s:.0f} s")
    rss["peak"] = round(server.status_mb("VmHWM"), 1)
    rss["end"] = round(server.min_rss_mb(args.settle_s), 1)


def fmt_run(run: dict) -> str:
    cpu = run.get("cpu_s")
    return (f"first round {run['first_round_s']:.2f} s, final state {run['final_s']:.2f} s "
            f"(server decode {run['server_s']:.2f} s)"
            + (f"; CPU s: server {cpu['server']:.2f}, workers {cpu['workers']:.2f}, browsers {cpu['browsers']:.2f}"
               if cpu else ""))


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def goals(result: dict) -> dict:
    idle = result.get("idle") or []
    runs = [run for r in result.get("crowd", []) for run in r.get("runs", [])]
    alone = [r["final_s"] for r in result.get("alone", [])]
    rss = result["server"]["rss_mb"]
    ratio = (statistics.median(r["final_s"] for r in runs) / statistics.median(alone)) if runs and alone else None
    values = {"idle_requests": max((r["total"] for r in idle if "total" in r), default=None),
              "run_final_ratio": round(ratio, 2) if ratio is not None else None,
              "rss_after_close_mb": round(rss["end"] - rss["start"], 1) if "end" in rss and "start" in rss else None}
    return {k: {"value": v, "goal": GOALS[k], "pass": None if v is None else v <= GOALS[k]} for k, v in values.items()}


def report(result: dict) -> None:
    print("\nidle page  settled  load reqs  during visitors  during watch  by path")
    for r in result.get("idle", []):
        paths = Counter(r.get("during_active", {})) + Counter(r.get("during_watch", {}))
        print(f"{r['page']:9d}  {'yes' if r['settled'] else 'NO':7s}  {r['load_requests']:9d}  "
              f"{sum(r.get('during_active', {}).values()):15d}  {sum(r.get('during_watch', {}).values()):12d}  "
              + ("; ".join(f"{n} x {p}" for p, n in paths.most_common()) or "-"))
    if "warmup" in result:
        w = result["warmup"]
        print(f"warm-up:     {fmt_run(w['runs'][0])}; " + ", ".join(f"{n} {a['s']:.1f} s {'ok' if a['ok'] else 'FAILED'}"
                                                       for n, a in w["actions"].items()))
    for i, r in enumerate(result.get("alone", []), 1):
        print(f"alone {i}:     {fmt_run(r)}")
    for i, v in enumerate(result.get("crowd", []), 1):
        if "runs" not in v:
            print(f"visitor {i}:   {v.get('error')}")
            continue
        for run in v["runs"]:
            stop = run["stop_enabled_while_running"]
            print(f"visitor {i}:   {fmt_run(run)}; Stop enabled while running: "
                  f"{'not seen running' if stop is None else 'yes' if stop else 'NO'}")
        for name, a in v["actions"].items():
            print(f"             {name:10s} {a['s']:7.1f} s  {'ok' if a['ok'] else 'FAILED'}  {a['note']}")
    if result.get("api"):
        a = result["api"]
        print(f"API /run alone: {', '.join(f'{x:.2f}' for x in a['alone'])} s; {len(a['together']) // max(len(a['alone']), 1)}"
              f" callers at once: {', '.join(f'{x:.2f}' for x in a['together'])} s; median ratio {a['ratio']}x")
    s = result["server"]
    print(f"server CPU s: {s['cpu_s']}; RSS MB: {s['rss_mb']} (peak: {'VmHWM since the baseline' if s.get('peak_is_vmhwm') else 'VmHWM since start'})")
    for name, g in result["goals"].items():
        print(f"goal {name:20s} {g['value']!s:>8s}  (<= {g['goal']})  {'not measured' if g['pass'] is None else 'PASS' if g['pass'] else 'FAIL'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=int, default=6, help="pages left idle (default 6)")
    ap.add_argument("--active", type=int, default=2, help="visitors at work (default 2)")
    ap.add_argument("--watch-s", type=float, default=60.0, help="seconds the idle pages are watched after the visitors end")
    ap.add_argument("--deadline-s", type=float, default=1200.0, help="hard bound on the whole run; the server is killed at it")
    ap.add_argument("--model", default="", help="a bundled model's name or a folder (default: the app's default model)")
    ap.add_argument("--prompt", default="", help="type this prompt (default: Run the first example the page opens with)")
    ap.add_argument("--stagger-s", type=float, default=0.0,
                    help="visitor i starts i times this many seconds after the first (default 0: all press Run at "
                         "once; a few seconds: a visitor's Run meets the one before it at its search)")
    ap.add_argument("--alone", type=int, default=3, help="fresh pages, one at a time, timing Run alone (median)")
    ap.add_argument("--runs", type=int, default=3,
                    help="timed Runs on each alone page and by each active visitor (the visitors' Runs start together)")
    ap.add_argument("--actions", type=lambda text: [a for a in text.split(",") if a], default=list(ACTIONS),
                    help=f"what each visitor does after its Run, in order (default {','.join(ACTIONS)})")
    ap.add_argument("--action-s", type=float, default=180.0, help="a study or best-order search longer than this is stopped")
    ap.add_argument("--wait-s", type=float, default=180.0, help="bound on any one wait in a page")
    ap.add_argument("--settle-s", type=float, default=20.0, help="seconds of RSS samples after every page closed")
    ap.add_argument("--browser-nice", type=int, default=0, choices=range(0, 20), metavar="0..19",
                    help="niceness of the benchmark's browsers and driver (default 0: the server and the pages share "
                         "the cores as they come; 19: the server first, as on a Space whose visitors' browsers run elsewhere)")
    ap.add_argument("--split-cores", action="store_true",
                    help="the server on the first half of this machine's cores, the browsers on the rest: neither "
                         "slows the other, as on a Space whose visitors' browsers run on their own machines")
    ap.add_argument("--api-callers", type=int, default=2,
                    help="before the pages: /run by this many API callers at once against one alone, no browser (0: skip)")
    ap.add_argument("--json", type=Path, help="also write the JSON result here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal fails")
    ap.add_argument("--serve-port", type=int, help=argparse.SUPPRESS)          # the child's own mode
    args = ap.parse_args(argv)
    if unknown := [a for a in args.actions if a not in ACTIONS]:
        ap.error(f"--actions: {', '.join(unknown)} unknown; choose from {', '.join(ACTIONS)}")
    if args.serve_port:
        serve_child(args.serve_port, args.model)
        return 0
    if not CHROMIUM.exists():
        print(f"needs Debian's chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    began = time.monotonic()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    result = {"config": {k: getattr(args, k) for k in ("idle", "active", "watch_s", "model", "prompt", "alone", "actions",
                                                       "browser_nice", "split_cores", "stagger_s")},
              "machine": f"{os.cpu_count()} cores, load average {load} at the start", "alone": [], "crowd": [],
              "idle": [], "server": {"cpu_s": {}, "rss_mb": {}}, "complete": False, "error": None}
    print(result["machine"], flush=True)
    log_dir = Path(tempfile.mkdtemp(prefix="lopa-crowd-"))
    cores = sorted(os.sched_getaffinity(0))
    split = (set(cores[:len(cores) // 2]), set(cores[len(cores) // 2:])) if args.split_cores and len(cores) > 1 else None
    server = Server(args.model, log_dir / "server.log", cpus=split[0] if split else None)
    if split:                 # this process, and the Playwright driver and Chromium it starts, on the other cores
        os.sched_setaffinity(0, split[1])
        print(f"server on cores {sorted(split[0])}, browsers on {sorted(split[1])}", flush=True)
    # Past the deadline (plus time to clean up), whatever hangs: kill the server and leave.
    guard = threading.Timer(args.deadline_s + 30, lambda: (server.stop(), print("hard deadline: killed", flush=True),
                                                           os._exit(3)))
    guard.daemon = True
    guard.start()
    try:
        server.wait_ready(min(180.0, args.deadline_s))
        log(f"server pid {server.proc.pid} on {server.url}; quiet after {server.settle_cpu():.0f} s more "
            "(its decode workers started)")
        if args.api_callers:
            log(f"the server alone: /run by 1 API caller, then by {args.api_callers} at once, {args.runs} times each")
            result["api"] = api_runs(server.url, args.prompt or server.first_prompt(), args.api_callers, args.runs,
                                     args.wait_s)
        remaining = args.deadline_s - (time.monotonic() - began) - args.settle_s - 15
        asyncio.run(asyncio.wait_for(phases(server, args, result), timeout=max(remaining, 1)))
        result["complete"] = True
    except (asyncio.TimeoutError, TimeoutError):
        result["error"] = f"deadline: {args.deadline_s:.0f} s passed before the end"
    except Exception as err:
        result["error"] = f"{type(err).__name__}: {str(err)[:300]}"
    finally:
        server.stop()
        guard.cancel()
    log_text = server.log.read_text(errors="replace") if server.log.is_file() else ""
    result["server"]["tracebacks_in_log"] = len(re.findall(r"^Traceback", log_text, flags=re.M))
    result["server"]["log"], result["server"]["pid"] = str(server.log), server.proc.pid
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    result["goals"] = goals(result)
    report(result)
    if result["error"]:
        print(f"incomplete: {result['error']}")
    line = json.dumps(result, sort_keys=True)
    if args.json:
        args.json.write_text(line + "\n")
    print(line, flush=True)
    if not result["complete"] and not result["alone"]:
        return 2
    return 1 if args.strict and not all(g["pass"] is True for g in result["goals"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
