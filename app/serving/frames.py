"""An idle page draws no frames: a guard against one of Gradio 6.31's status trackers.

Gradio's frontend shows an app-level status tracker ("Loading...") while the page loads. A status
tracker that turns "pending" starts a timer loop, one requestAnimationFrame after another, which stops
only when the tracker sees its status leave "pending". The app-level tracker is unmounted in the same
update that makes the app ready, so it never sees that: its loop goes on for as long as the page stays
open, 60 frames a second on a page where nothing happens (about 5% of a core per idle headless tab
here; on a phone, battery). Measured in Chromium: every frame requested by an idle page of this app came
from that loop (`statustracker-*.js`, `ze`).

The guard wraps requestAnimationFrame before Gradio's modules load (they take the function when they
load), so it cannot travel in gr.Blocks(head=...): Gradio adds that to the page from its own scripts,
once the app's config has come, after the status tracker's module took the function. FirstScript puts
it first in the page's HTML instead. While no status tracker on the page is shown (`.wrap.full` or `.wrap.minimal` without `.hide`:
the trackers of events with show_progress "full" or "minimal"), a frame a status tracker asks for is
given one second later instead: the orphaned loop then costs one wake-up a second, and a tracker that
becomes visible gets its frames at once again.

A page that loaded slowly (a busy server, a slow link) also mounted the tracker's "Loading..." logo, whose
springs animate for as long as the logo lives, orphaned with its tracker. A spring asks for its first
frame from the tracker's code (while the logo is shown: at full rate) and for the rest from Svelte's
animation loop, one function that is the callback of every such frame: so every callback a status tracker
ever asked a frame for, that loop included, gets its frames one second apart while no tracker is shown
(without this: 70-115 frames in 5 s of an idle page loaded on a busy machine, every one from that loop).
Svelte's loop drives only springs, tweens and transitions with a tick function; this page's other
animations (CSS, plotly) do not use it.
tests/test_app_browser_crowd.py counts an idle page's frames.
"""

from __future__ import annotations

PAGE_PATHS = ("/", "")       # the app's page (a Space and a local server both serve it at the root)

# The frames of status trackers nobody can see, one a second (see the module docstring).
IDLE_FRAMES_JS = """<script>
(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const shown = () => document.querySelector(".wrap.full:not(.hide), .wrap.minimal:not(.hide)") !== null;
  const trackers = new WeakSet();     // callbacks a status tracker asked a frame for, its loops and Svelte's
  window.requestAnimationFrame = function (callback) {
    if ((new Error().stack || "").includes("/statustracker-")) trackers.add(callback);
    if (trackers.has(callback) && !shown()) {
      return setTimeout(() => frame(callback), 1000);
    }
    return frame(callback);
  };
})();
</script>
"""


class FirstScript:
    """ASGI middleware: the app's page (GET /, HTML) with IDLE_FRAMES_JS first in its <head>, ahead of
    Gradio's module scripts. Any other response passes as it is."""

    def __init__(self, app, script: str = IDLE_FRAMES_JS):
        self.app, self.script = app, script.encode()

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "GET" or scope.get("path") not in PAGE_PATHS:
            return await self.app(scope, receive, send)
        start, body = None, []

        async def first_in_head(message):
            nonlocal start
            if message["type"] == "http.response.start":
                start = message                       # sent with the body, whose length changes
                return
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            kinds = {k.lower(): v for k, v in headers}
            page = b"".join(body)
            if kinds.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in kinds:
                page = page.replace(b"<head>", b"<head>" + self.script, 1)
            await send({**start, "headers": headers + [(b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, first_in_head)
