"""What every panel's wiring speaks: the Wiring each panel's wire(w) gets (the components by name, `on` and
`then` to connect an event), the groups its events take a slot in, and the wrappers of the callbacks (the
session's turn, the API's parameter names). The one wiring site, app/wiring.py, walks the panels with it.

Model events share one concurrency group (MODEL) with a slot per decode worker (app/serving/decode_pool.py;
one slot without them), each session's own model events one at a time (in_turn); the long jobs (a search,
a study) run in a group beside it (LONG), and view-only events beside both."""

from __future__ import annotations

import functools
import inspect

import gradio as gr

from ..serving.decode_pool import POOL
from ..serving.session import BACKEND_NAMES, SETTING_NAMES, SINGLE, WORKER_RANGE, take_turn
from ..serving.updates import as_updates

# Every event that runs the model: one slot per decode worker (app/serving/decode_pool.py; one without workers), each
# session's own events one at a time (in_turn).
MODEL = dict(concurrency_id="model", concurrency_limit=max(1, POOL.size))
# The jobs that run for many decodes (the best-order search, a live study) take a slot of their own beside
# MODEL: in MODEL one visitor's minutes-long study held every other visitor's Run until it ended. Beside it,
# the long job waits between two of its decodes while a visitor's decode runs (app/serving/give_way.py), so
# a Run has the CPU to itself. One at a time among themselves.
LONG = dict(concurrency_id="long", concurrency_limit=1)
VIEW = dict(concurrency_id="view", concurrency_limit=4)     # figures from a recorded trace only
STUDY_VIEW = dict(concurrency_id="study_view", concurrency_limit=1)   # shipped study results, first asked first shown
# Private, outside the queue, without progress: what only touches the page (a Stop enabled or disabled, a
# chained follow-up).
QUIET = dict(api_visibility="private", queue=False, show_progress="hidden")
# What "Use via API" says of the page's own decode endpoints: they answer with the page's HTML and plots.
UNSET = ("Every setting left out (None) takes the picked model's own value (its attention, block size, ...), "
         "as the page shows it.")


def in_turn(fn, at: int):
    """`fn` run in its session's turn (app.serving.session.take_turn): the session is its argument `at`. A stream holds
    the turn until it ends or is closed."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            turn = take_turn(args[at] if len(args) > at else None)
            try:
                yield from fn(*args, **kwargs)
            finally:
                if turn is not None:
                    turn.release()
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        turn = take_turn(args[at] if len(args) > at else None)
        try:
            return fn(*args, **kwargs)
        finally:
            if turn is not None:
                turn.release()
    return call


def named(fn, *leading: str):
    """`fn(session, *leading, *settings, *backend)` with the signature Gradio names an endpoint's API
    parameters from (else `param_2` ... for its *values): the settings by name, each None by default (unset:
    the picked model's own value, app.serving.request.read_request; the API lists it so,
    app.serving.blocks.Explorer), the backend at the page's initial values."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(name, kind) for name in ("session", *leading)]
    params += [inspect.Parameter(name, kind, default=None) for name in SETTING_NAMES]
    params += [inspect.Parameter(name, kind, default=default)
               for name, default in zip(BACKEND_NAMES, (SINGLE, WORKER_RANGE[0]))]

    if inspect.isgeneratorfunction(fn):         # a stream stays one (Gradio and as_updates ask)
        @functools.wraps(fn)
        def call(*args, **kwargs):
            yield from fn(*args, **kwargs)
    else:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            return fn(*args, **kwargs)
    call.__signature__ = inspect.Signature(params)
    return call


class Wiring:
    """What each panel's wiring gets: the components by name (`c`, as in the callbacks' output constants),
    the page (`demo`), `on` to connect an event, and `deps`, the events one panel chains after another's
    (the page's warm-up, a model picked, a link's DiffusionGemma folder)."""

    def __init__(self, demo: gr.Blocks, c: dict):
        self.demo, self.c, self.deps = demo, c, {}
        self.events = c["__events__"] = {}      # each component's events, by its name: stop_buttons() follows them
        session = c["session"]
        self.session, self.settings = session, self.pick(*SETTING_NAMES)
        # A decode's inputs: the session, the prompt, the settings and the backend (app.serving.request.read_request).
        self.decode_inputs = [session, c["prompt"], *self.settings, *self.pick(*BACKEND_NAMES)]

    def pick(self, *names) -> list:
        return [self.c[n] for n in names]

    def on(self, event, fn, inputs, outputs, **kwargs):
        """Connect `event` to `fn` through as_updates (why: its docstring). Raw values reach the callbacks
        (preprocess=False), which read every input themselves (the registry, app/serving/inputs.py): Gradio's own
        checks answer a string in a number box with a traceback and echo a 100 KB value outside a
        dropdown's choices in full. Uploads keep theirs."""
        kwargs.setdefault("preprocess", False)
        dep = event(as_updates(self.turns(fn, inputs, kwargs), outputs), inputs, outputs, **kwargs)
        owner = getattr(event, "__self__", None)
        for name in [n for n, x in self.c.items() if x is owner]:
            self.events.setdefault(name, []).append(dep)
        return dep

    def then(self, dep, fn, inputs, outputs, **kwargs):
        """`fn` chained after `dep` (through as_updates, raw values), private and without progress unless
        `kwargs` say otherwise; queued unless queue=False."""
        quiet = dict(api_visibility="private", show_progress="hidden")
        return dep.then(as_updates(self.turns(fn, inputs, kwargs), outputs), inputs, outputs, preprocess=False,
                        **{**quiet, **kwargs})

    def turns(self, fn, inputs, kwargs):
        """A model event's callback in its session's turn (in_turn), where the session is one of its inputs."""
        if kwargs.get("concurrency_id") != MODEL["concurrency_id"] or self.session not in inputs:
            return fn
        return in_turn(fn, inputs.index(self.session))
