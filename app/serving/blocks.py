"""The page's gr.Blocks (Explorer), with two answers of Gradio 6.31's own that it corrects: an upload that is
not a file of this page fails in Gradio's preprocessing with a bare server error, before any callback could
name the input (preprocess_data: a message naming it instead); and "Use via API" lists, as a parameter's
default, the input's initial value on the page, where the endpoint's function says None (unset: the picked
model's own value) (get_api_info: None)."""

from __future__ import annotations

import gradio as gr
from gradio import utils as gr_utils

from .inputs import shown


class Explorer(gr.Blocks):
    """gr.Blocks whose reading of an upload answers a bad value with a message naming the input. Every
    other input reaches its callback raw (preprocess=False: app.panels.events.Wiring.on); an upload cannot, since
    Gradio checks where its file lives before any callback runs (a path outside its uploads, text, a
    number or a list), and those checks fail with a bare server error and no message."""

    async def preprocess_data(self, block_fn, inputs, state, explicit_call=False):
        try:
            return await super().preprocess_data(block_fn, inputs, state, explicit_call)
        except gr.Error:
            raise
        except Exception:           # pydantic's ValidationError, Gradio's InvalidPathError, OSError
            files = [i for i, block in enumerate(block_fn.inputs) if isinstance(block, gr.File)]
            if not files:
                raise
            given = inputs[files[0]] if files[0] < len(inputs) else None
            given = given.get("path") if isinstance(given, dict) else given
            raise gr.Error(f"the trace file must be a .json or .parquet file uploaded to this page, got {shown(given)}",
                           print_exception=False) from None

    def get_api_info(self, all_endpoints: bool = False, page: str | None = None):
        """Gradio's API description, where a parameter the endpoint's function declares with default None
        is listed with that default (None: unset, the picked model's own value; app.panels.events.named) instead of
        the input's initial value on the page (the bundled model's, which a caller would send back as its own
        choice). What "Use via API" and gradio_client read."""
        info = super().get_api_info(all_endpoints=all_endpoints, page=page)
        for fn in self.fns.values():
            endpoint = info["named_endpoints"].get(f"/{fn.api_name}")
            if endpoint is None or fn.fn is None:
                continue
            unset = {name for name, has_default, default, _ in gr_utils.get_function_params(fn.fn)
                     if has_default and default is None}
            for parameter in endpoint["parameters"]:
                if parameter["parameter_name"] in unset:
                    parameter.update(parameter_has_default=True, parameter_default=None)
                    kind = parameter["python_type"]
                    kind["type"] += "" if "None" in kind["type"] else " | None"
        return info
