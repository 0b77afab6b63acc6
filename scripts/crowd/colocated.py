"""The co-located pages: a crowd of real Chromium pages on this machine, beside the server on the same cores
(scripts/bench_crowd.py's docstring, steps 1-4): N idle pages while M visitors work, each Run timed alone and
in the crowd, the idle pages' requests counted, the server's RSS before and after."""

from __future__ import annotations

import asyncio
import statistics
import time

from .pages import ARGS, CHROMIUM, open_page, settle, timed_run
from .procs import cpu_by_side, lower_browsers
from .report import fmt_run, log
from .server import Server
from .visitors import visitor

# The goals (docs/deployment.md, "Crowd"): each figure at most this.
GOALS = {"idle_requests": 0, "run_final_ratio": 1.5, "rss_after_close_mb": 50.0}


def section() -> dict:
    """The section's result before it runs: what phases() fills in."""
    return {"alone": [], "crowd": [], "idle": [], "server": {"cpu_s": {}, "rss_mb": {}}}


async def phases(server: Server, args, result: dict) -> None:
    """Warm-up, alone, crowd, close (scripts/bench_crowd.py, steps 1-4) on `server`, into `result` (section())."""
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


def goals(result: dict) -> dict:
    """Each goal's figure from the section's result (None where it was not measured)."""
    idle = result.get("idle") or []
    runs = [run for r in result.get("crowd", []) for run in r.get("runs", [])]
    alone = [r["final_s"] for r in result.get("alone", [])]
    rss = result["server"]["rss_mb"]
    ratio = (statistics.median(r["final_s"] for r in runs) / statistics.median(alone)) if runs and alone else None
    values = {"idle_requests": max((r["total"] for r in idle if "total" in r), default=None),
              "run_final_ratio": round(ratio, 2) if ratio is not None else None,
              "rss_after_close_mb": round(rss["end"] - rss["start"], 1) if "end" in rss and "start" in rss else None}
    return {k: {"value": v, "goal": GOALS[k], "op": "<=", "pass": None if v is None else v <= GOALS[k]} for k, v in values.items()}

