"""Every value a panel's callback returns for a component goes out as gr.update(value=...): a workaround
for Gradio 6.31's per-session copies of the page's components (Blocks.postprocess_data), which grew by a
component each time an output got a skip and then a plain value (issue #18). The panels' events are
connected through it (app.panels.events.Wiring.on); why in detail: as_updates' docstring."""

from __future__ import annotations

import functools
import inspect

import gradio as gr


def as_updates(fn, outputs):
    """`fn` with every plain value it returns for a component turned into gr.update(value=...).

    Why: Gradio 6.31 keeps, per session, the component an output was last updated to. When an
    output that got a prop update (gr.skip() counts: the view skips heavy outputs between
    refreshes) next gets a plain value, `Blocks.postprocess_data` stores the replacement component
    under the replacement's own new id (`block = state[block._id]` ... `state[block._id] = block`),
    so each skip-then-value adds a component to the session for good: 6 per Run here, the
    growth issue #18 measured. Outputs that only ever get updates are replaced in place. The
    callbacks stay plain functions returning values (their tests read values); gr.State outputs
    and components returned as updates pass through unchanged. API clients of these UI endpoints
    see Gradio's update dict ({"__type__": "update", "value": ...}) for a value; the typed endpoint
    /decode (app/serving/api.py) is not wrapped."""
    plain = [not getattr(o, "stateful", False) for o in outputs]

    def convert(out):
        if len(outputs) == 1:
            out = (out,)
        out = tuple(gr.update(value=v) if keep and not (isinstance(v, dict) and "__type__" in v)
                    and not isinstance(v, gr.blocks.Block) else v for v, keep in zip(out, plain))
        return out[0] if len(outputs) == 1 else out

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            for out in fn(*args, **kwargs):
                yield convert(out)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return convert(fn(*args, **kwargs))
    return call
