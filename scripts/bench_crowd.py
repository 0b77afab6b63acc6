"""A crowd on one server, in two sections, each with a server of its own (a child process on 127.0.0.1, so its
CPU and RSS are the server's alone, its decode workers included: app/serving/decode_pool.py):

1. The server alone (the headline; scripts/crowd/callers.py): the page's Run called through the API
   (gradio_client, a session per caller, no browser), with the decode workers a CPU Space gets (`--workers
   space`: the app decides, as on a Space; or a number). A Space's visitors' pages run on their own machines:
   this is what its server does for them. One caller `--api-runs` times alone, then each count of
   `--api-callers` calling at once, `--api-runs` rounds each, every round after one more call alone; CPU
   seconds per Run of the server process, its workers and the callers (this process; elsewhere on a Space:
   `--server-cores N` keeps them off the server's N cores where this machine has more, `--caller-nice 19`
   puts the server first where it has not).
2. Co-located pages (scripts/crowd/colocated.py): N real Chromium pages left idle while M visitors run Runs,
   Steps, forks, a live study and a best-order search through the page (Playwright + Debian's Chromium, one
   browser, a context per visitor), on the server's own cores, the server as the app starts here (decode
   workers as LOPA_DECODE_WORKERS says; off by default off a Space):
   1. warm-up: one page loads, does a visitor's whole work and closes; the server's RSS after that (the
      minimum over `--settle-s` seconds of samples, as at the end) is the baseline;
   2. alone: the first example's Run, `--runs` times on each of `--alone` fresh pages, one after the other,
      each once the page has settled: seconds from the click to the first round shown and to the final state
      (the page's own clock), and the CPU seconds the server, its workers and the browsers spent on it;
   3. crowd: N idle pages open and settle; every request each sends under /gradio_api/ is counted, by path;
      the M active visitors run the same Run `--runs` times, all pressing Run together, then `--actions`;
      the idle pages are watched for `--watch-s` seconds more after the last visitor ends;
   4. every page closes; RSS is sampled for `--settle-s` seconds and the minimum kept.

    python scripts/bench_crowd.py [--mode both|server|pages] [--api-callers 2,8] [--api-runs 5] [--workers space]
                                  [--server-cores N] [--caller-nice 0..19]
                                  [--idle 6] [--active 2] [--runs 3] [--watch-s 60] [--deadline-s 1200]
                                  [--model NAME] [--actions best_order,fork,steps,study] [--json out.json] [--strict]

Prints each section's figures, PASS / FAIL for each goal and, last, one JSON line (also written to `--json`).
The goals (docs/deployment.md, "Crowd"). The server alone: of 2 callers at once, the later ends within 1.3x
of the median Run alone; 8 callers at once complete at least 1.8x the Runs per second of one caller. The
co-located pages: 0 requests from every idle page from the visitors' start to the end of the watch; the
crowd's median final-state latency at most 1.5x the median alone; RSS after every page closed within 50 MB
of the baseline. Exit code 0 unless --strict and a goal fails, or the benchmark itself could not run (2).
Every wait has a timeout and the whole run a hard deadline; each server is killed at its section's end
whatever happens. A figure, not a test: on a shared machine, say so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crowd import callers, colocated  # noqa: E402 (scripts/crowd/, beside this file)
from crowd.pages import CHROMIUM  # noqa: E402
from crowd.report import log, report_goals, report_pages, report_server_alone  # noqa: E402
from crowd.server import Server, serve_child  # noqa: E402
from crowd.visitors import ACTIONS  # noqa: E402

SPACE_ID = "lopa-bench/crowd"     # the server alone decides its workers as on a CPU Space (app/serving/decode_pool.py)


def counts(text: str) -> list[int]:
    found = [int(n) for n in text.split(",") if n.strip()]
    if any(n < 0 for n in found):
        raise argparse.ArgumentTypeError(f"callers must be whole numbers, got {text!r}")
    return [n for n in found if n > 0]


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("both", "server", "pages"), default="both",
                    help="both sections (default), the server alone through the API, or the co-located pages")
    ap.add_argument("--api-callers", type=counts, default=[2, 8],
                    help="the server alone: these many API callers at once, each in turn (default 2,8; 0: skip it)")
    ap.add_argument("--api-runs", type=int, default=5, help="the server alone: calls alone, and rounds per crowd (default 5)")
    ap.add_argument("--api-endpoint", choices=("/run", "/decode"), default="/run",
                    help="the server alone: the page's Run (default) or the typed JSON decode")
    ap.add_argument("--workers", default="space", help="the server alone's decode workers: 'space' (default: as the app "
                    "decides on a CPU Space, one per core up to 4) or a number (LOPA_DECODE_WORKERS)")
    ap.add_argument("--server-cores", type=int, default=0, help="the server alone on this machine's first N cores, its "
                    "callers on the rest (default 0: all cores, shared with the callers)")
    ap.add_argument("--caller-nice", type=int, default=0, choices=range(0, 20), metavar="0..19",
                    help="the server alone: the API callers' niceness (default 0; 19: the server first, as on a Space "
                         "whose callers run elsewhere, where no --server-cores can keep them apart)")
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
    ap.add_argument("--wait-s", type=float, default=180.0, help="bound on any one wait in a page, or any one API call")
    ap.add_argument("--settle-s", type=float, default=20.0, help="seconds of RSS samples after every page closed")
    ap.add_argument("--browser-nice", type=int, default=0, choices=range(0, 20), metavar="0..19",
                    help="niceness of the benchmark's browsers and driver (default 0: the server and the pages share "
                         "the cores as they come; 19: the server first, as on a Space whose visitors' browsers run elsewhere)")
    ap.add_argument("--split-cores", action="store_true",
                    help="the pages' server on the first half of this machine's cores, the browsers on the rest: neither "
                         "slows the other, as on a Space whose visitors' browsers run on their own machines")
    ap.add_argument("--json", type=Path, help="also write the JSON result here")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal fails")
    ap.add_argument("--serve-port", type=int, help=argparse.SUPPRESS)          # the child's own mode
    args = ap.parse_args(argv)
    if unknown := [a for a in args.actions if a not in ACTIONS]:
        ap.error(f"--actions: {', '.join(unknown)} unknown; choose from {', '.join(ACTIONS)}")
    if args.workers != "space" and not args.workers.isdigit():
        ap.error(f"--workers: 'space' or a number, got {args.workers!r}")
    if args.mode == "server" and not args.api_callers:
        ap.error("--mode server needs callers (--api-callers)")
    return args


class Sections:
    """Runs each section on a server of its own, killing it at the section's end, or at the hard deadline."""

    def __init__(self, args, result: dict):
        self.args, self.result, self.began = args, result, time.monotonic()
        self.log_dir = Path(tempfile.mkdtemp(prefix="lopa-crowd-"))
        self.server: Server | None = None
        # Past the deadline (plus time to clean up), whatever hangs: kill the server and leave.
        self.guard = threading.Timer(args.deadline_s + 30, self.killed)
        self.guard.daemon = True
        self.guard.start()

    def killed(self) -> None:
        if self.server is not None:
            self.server.stop()
        print("hard deadline: killed", flush=True)
        os._exit(3)

    def left_s(self) -> float:
        return self.args.deadline_s - (time.monotonic() - self.began)

    def run(self, name: str, body, env: dict | None = None, cpus: set[int] | None = None) -> dict:
        """`body(server, out)` on a fresh server into result[name] (out); an error ends the section, noted."""
        out = self.result.setdefault(name, {})
        self.server = server = Server(self.args.model, self.log_dir / f"{name}.log", cpus=cpus, env=env)
        try:
            server.wait_ready(max(1.0, min(180.0, self.left_s())))
            log(f"{name}: server pid {server.proc.pid} on {server.url}; quiet after {server.settle_cpu():.0f} s more "
                f"({len(server.workers())} decode workers started)")
            body(server, out)
            out["complete"] = True
        except (asyncio.TimeoutError, TimeoutError):
            self.result["error"] = f"deadline: {self.args.deadline_s:.0f} s passed before the end"
        except Exception as err:
            self.result["error"] = f"{name}: {type(err).__name__}: {str(err)[:300]}"
        finally:
            server.stop()
        text = server.log.read_text(errors="replace") if server.log.is_file() else ""
        out.setdefault("server", {}).update(tracebacks_in_log=len(re.findall(r"^Traceback", text, flags=re.M)),
                                            log=str(server.log), pid=server.proc.pid)
        return out

    def server_alone(self) -> None:
        a = self.args
        env = ({"SPACE_ID": SPACE_ID, "LOPA_DECODE_WORKERS": None} if a.workers == "space"
               else {"LOPA_DECODE_WORKERS": a.workers})
        cores = sorted(os.sched_getaffinity(0))
        mine = set(cores[:a.server_cores]) if 0 < a.server_cores < len(cores) else None
        if mine:
            log(f"the server alone on cores {sorted(mine)}, its callers on {cores[a.server_cores:]}")

        def body(server: Server, out: dict) -> None:
            log(f"the server alone: {a.api_endpoint} by 1 API caller, then by {', '.join(map(str, a.api_callers))} "
                f"at once, {a.api_runs} rounds each; callers at nice {a.caller_nice}")
            out.update(callers.apart(lambda: callers.server_alone(
                server, a.prompt or server.first_prompt(), a.api_callers, a.api_runs, a.api_endpoint, a.wait_s, log=log),
                nice=a.caller_nice, cpus=set(cores) - mine if mine else None))
        self.run("server_alone", body, env=env, cpus=mine)
        self.result["server_alone"]["config"] = {"workers": a.workers, "server_cores": sorted(mine or cores),
                                                 "caller_nice": a.caller_nice}

    def pages(self) -> None:
        a = self.args
        cores = sorted(os.sched_getaffinity(0))
        split = (set(cores[:len(cores) // 2]), set(cores[len(cores) // 2:])) if a.split_cores and len(cores) > 1 else None

        def body(server: Server, out: dict) -> None:
            if split:         # this process, and the Playwright driver and Chromium it starts, on the other cores
                os.sched_setaffinity(0, split[1])
                log(f"server on cores {sorted(split[0])}, browsers on {sorted(split[1])}")
            try:
                remaining = self.left_s() - a.settle_s - 15
                asyncio.run(asyncio.wait_for(colocated.phases(server, a, out), timeout=max(remaining, 1)))
            finally:
                os.sched_setaffinity(0, set(cores))
        self.run("pages", body, cpus=split[0] if split else None)


def main(argv=None) -> int:
    args = parse(argv)
    if args.serve_port:
        serve_child(args.serve_port, args.model)
        return 0
    server_alone = args.mode in ("both", "server") and bool(args.api_callers)
    pages = args.mode in ("both", "pages")
    if pages and not CHROMIUM.exists():
        print(f"needs Debian's chromium at {CHROMIUM} (--mode server needs none)", file=sys.stderr)
        return 2
    began = time.monotonic()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    result = {"config": {k: getattr(args, k) for k in ("mode", "api_callers", "api_runs", "api_endpoint", "workers", "caller_nice",
                                                       "idle", "active", "watch_s", "model", "prompt", "alone", "runs",
                                                       "actions", "browser_nice", "split_cores", "stagger_s")},
              "machine": f"{os.cpu_count()} cores, load average {load} at the start", "complete": False, "error": None}
    print(result["machine"], flush=True)
    if pages:
        result["pages"] = colocated.section()
    sections = Sections(args, result)
    if server_alone:
        sections.server_alone()
    if pages and not result["error"]:
        sections.pages()
    sections.guard.cancel()
    result["complete"] = not result["error"] and all(result[s].get("complete") for s in ("server_alone", "pages")
                                                     if s in result)
    result["goals"] = {}
    if server_alone:
        result["goals"].update({k: g | {"section": "server_alone"} for k, g in callers.goals(result["server_alone"]).items()})
    if pages:
        result["goals"].update({k: g | {"section": "pages"} for k, g in colocated.goals(result["pages"]).items()})
    result["elapsed_s"] = round(time.monotonic() - began, 1)
    if result.get("server_alone", {}).get("crowds"):
        report_server_alone(result["server_alone"])
    if pages:
        report_pages(result["pages"])
    report_goals(result["goals"])
    if result["error"]:
        print(f"incomplete: {result['error']}")
    line = json.dumps(result, sort_keys=True)
    if args.json:
        args.json.write_text(line + "\n")
    print(line, flush=True)
    if not result["complete"] and not result.get("pages", {}).get("alone") and not result.get("server_alone", {}).get("alone"):
        return 2
    return 1 if args.strict and not all(g["pass"] is True for g in result["goals"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
