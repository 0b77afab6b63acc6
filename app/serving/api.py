"""The typed API: one `decode` endpoint with named parameters, for gradio_client and scripts.

    from gradio_client import Client
    result = Client("http://localhost:7860/").predict(prompt="Tom has 23 apples. ...", k=4, api_name="/decode")
    result["answer"], result["metrics"]["tpf_useful"], result["trace"]      # trace: the lopa-trace format

The UI's own endpoints (`/run`, `/step`, ...) stream HTML and plots for the page; this one returns
plain JSON. `model` names the model: empty for the default bundled model, a bundled model's name
(`sure-gsm-dllm`), or a folder this server may load (LOPA_MODEL_DIRS, app/serving/models.py); it comes from
the same cache as the page's models and is independent of any visitor's pick.
"""

from __future__ import annotations

import inspect
import json
from contextlib import closing

import gradio as gr

from lopa.cost import run_curve
from lopa.order import budget_warning
from lopa.resolution import resolve
from lopa.settings import SETTINGS, check_settings

from .boundary import stream_jobs
from .model_cache import MODELS
from .session import APP_DEFAULTS, LiveRun

# A prompt longer than this is refused before it is tokenized (the model's context is checked after).
MAX_PROMPT_CHARS = 100_000
# The endpoint's parameters: the prompt, the model's name, then every registry setting, unset (None)
# by default: an unset setting takes the model's own value (its config: attention, block size, ...),
# else the app's default (APP_DEFAULTS), else the engine's, through the one resolution.
SIGNATURE = inspect.Signature(
    [inspect.Parameter("prompt", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
     inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="", annotation=str),
     *[inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=spec.type | None, default=None)
       for name, spec in SETTINGS.items()]],
    return_annotation=dict)


def _check_prompt(prompt) -> str:
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be text (a string of at most {MAX_PROMPT_CHARS} characters), "
                         f"got {type(prompt).__name__} {str(prompt)[:40]!r}")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"prompt must be at most {MAX_PROMPT_CHARS} characters, got {len(prompt)}")
    return prompt


def decode(*args, **kwargs) -> dict:
    """Decode one prompt with LoPA (k lookahead branches; k = 0 is D2F vanilla). Parameters: prompt,
    model, then every decode setting by name (lopa.settings.SETTINGS: its range and meaning).

    `model`: "" (the default bundled model), a bundled model's name or a folder this server may load.
    Returns {"answer": text, "model": name, "settings": {...}, "metrics": {...}, "trace": {...},
    "warnings": [text]} (e.g. order "adaptive" whose budget can never branch decodes as vanilla D2F); the
    trace is the lopa-trace/2 JSON that `lopa.RunResult.from_json` reads. A setting left unset (None,
    or "") takes the model's own value (its config: attention, block size, ...), else the app's
    default (k = 4, 64 new tokens). attention "full" with cache_schedule "authors" and mask_argmax
    "authors" is the authors' loop (docs/method.md). Every value is read by the registry: a wrong
    type or a value out of range comes back as one message naming the parameter, its range and the
    value given.
    """
    try:
        bound = SIGNATURE.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        prompt, model = _check_prompt(values.pop("prompt")), values.pop("model")
        # None (or "", what a form sends for an empty box) is unset; every other value is read by the registry.
        chosen = check_settings({n: v for n, v in values.items() if v is not None and v != ""})
        folder = MODELS.servable(MODELS.folder(model))         # ValueError: not a model this server may load
        loaded = MODELS.get(folder)
        settings = resolve(chosen, loaded.spec, defaults=APP_DEFAULTS)    # the one resolution: unset -> the model's
        live = LiveRun({"model": str(folder), "prompt": prompt, "settings": settings.to_dict(), "workers": 1,
                        "rounds": None, "resume": None})
        with closing(stream_jobs([live.job])) as passes:       # through the GPU boundary (app/serving/boundary.py)
            for (chunk,) in passes:
                live.apply(chunk)
        run = live.run
        if run is None:
            raise ValueError("the decode produced no round")
    except (ValueError, TypeError, RuntimeError) as err:    # RuntimeError: a decode that cannot go on
        raise gr.Error(str(err), print_exception=False) from None
    # "warnings": what the caller should know of the run, e.g. an adaptive budget that can never branch
    # (it decoded as vanilla D2F): lopa.order.budget_warning, as lopa generate and the page say it.
    return {"answer": run.text, "model": loaded.spec.name, "settings": settings.to_dict(), "metrics": run.metrics(),
            "trace": json.loads(run.to_json()), "warnings": [w for w in (run_warning(run, settings),) if w]}


def run_warning(run, settings) -> str | None:
    """budget_warning under the cost curve the run priced its branches by (lopa.cost.run_curve)."""
    curve = run_curve(settings, run.order)
    return budget_warning(settings, *curve) if curve else None


decode.__signature__ = SIGNATURE
decode.__annotations__ = {p.name: p.annotation for p in SIGNATURE.parameters.values()} | {"return": dict}
