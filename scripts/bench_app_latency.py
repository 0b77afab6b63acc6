"""How fast the page answers, in a real browser (Playwright + Debian's Chromium) on the app served
in-process with the default bundled model:

- arrival: seconds from opening a cold page (a fresh browser context) until the recorded D2F and LoPA
  runs are drawn side by side (goal: at most 5 s);
- the first example's Run: seconds from the click until the page shows the first round (goal: under
  2 s), and how long after the server finished the page shows the final state (goal: under 1 s).

    python scripts/bench_app_latency.py [--repeats 3]

Prints each repeat and the median, and asserts nothing: the tests check what the page shows
(tests/test_tour_browser.py, tests/test_app_browser.py), this script how fast. Run it on an idle
machine; on a shared one, say so beside the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
WAIT_MS = 300_000                    # a hang guard only: the figures are measured, not bounded
ROUNDS_JS = "Number(document.querySelector('#counters .lopa-counters')?.dataset.rounds ?? -1)"
GOALS = {"arrival_s": 5.0, "first_round_s": 2.0, "final_state_lag_s": 1.0}


def serve() -> tuple[str, object]:
    """The app on a free local port, the bundled default model loaded before the first page opens."""
    import socket

    from app import LAUNCH_KWARGS, build_demo
    from app.serving.model_cache import MODELS
    MODELS.get()
    demo = build_demo()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    return f"http://127.0.0.1:{port}/", demo


def arrival_s(browser, url: str) -> float:
    context = browser.new_context(viewport={"width": 1366, "height": 768})      # nothing cached
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    start = time.monotonic()
    page.goto(url)
    page.wait_for_selector("#arrival .lopa-story-side[data-run='lopa'] .lopa-tok")
    shown = time.monotonic() - start
    context.close()
    return shown


def first_example_run(browser, url: str) -> dict:
    from app.serving.models import example_prompts
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url)
    page.wait_for_selector("#run")
    page.wait_for_function("document.querySelector('#model-info').innerText.includes('loaded from')")
    page.wait_for_selector("#tokens-chart .js-plotly-plot")
    example = example_prompts()[0][:24]
    page.locator("#prompt textarea").fill("")
    page.locator("#all-controls").get_by_text(example, exact=False).first.click()
    page.wait_for_function("e => document.querySelector('#prompt textarea').value.startsWith(e)", arg=example)
    start = time.monotonic()
    page.click("#run")
    page.wait_for_function(f"{ROUNDS_JS} >= 1", polling=10)
    first = time.monotonic() - start
    page.wait_for_selector("#counters .lopa-counters[data-status='done']")
    finished = time.monotonic() - start
    server = float(page.locator("#counters [data-counter='elapsed']").get_attribute("data-value").split()[0])
    context.close()
    return {"first_round_s": first, "final_state_lag_s": finished - server, "server_s": server}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"needs Debian's chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    from lopa.tasks.hardware import hardware
    print(hardware("cpu", note=f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start"))
    url, demo = serve()
    figures: dict[str, list[float]] = {key: [] for key in GOALS}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, timeout=WAIT_MS)
            for i in range(args.repeats):
                figures["arrival_s"].append(arrival_s(browser, url))
                run = first_example_run(browser, url)
                figures["first_round_s"].append(run["first_round_s"])
                figures["final_state_lag_s"].append(run["final_state_lag_s"])
                print(f"repeat {i + 1}: arrival {figures['arrival_s'][-1]:.2f} s, first round "
                      f"{run['first_round_s']:.2f} s after Run, final state {run['final_state_lag_s']:.2f} s after "
                      f"the server's {run['server_s']:.2f} s", flush=True)
            browser.close()
    finally:
        demo.close()
    for key, goal in GOALS.items():
        median = statistics.median(figures[key])
        print(f"{key:18s} median {median:6.2f} s  (goal <= {goal:.0f} s: {'met' if median <= goal else 'missed'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
