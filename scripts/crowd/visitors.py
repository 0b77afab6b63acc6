"""An active visitor's work on a page: timed Runs, then a best-order search, a fork, Steps and a live study."""

from __future__ import annotations

import asyncio
import time

from .pages import settle, shown, timed_run, until

STUDY = "1. LoPA's orders against random orders"
BEST_DONE = ("['Best order found', \"LoPA's order is the best found\", 'Stopped'].some("
             "t => document.querySelector('#best-order-status').innerText.includes(t))")
STUDY_DONE = "/(^|\\n)(Done|Stopped)/.test(document.querySelector('#study-status').innerText)"


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

