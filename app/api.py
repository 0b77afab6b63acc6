"""The typed API: one `decode` endpoint with named parameters, for gradio_client and scripts.

    from gradio_client import Client
    result = Client("http://localhost:7860/").predict(prompt="Tom has 23 apples. ...", k=4, api_name="/decode")
    result["answer"], result["metrics"]["tpf_useful"], result["trace"]      # trace: the lopa-trace format

The UI's own endpoints (`/run`, `/step`, ...) stream HTML and plots for the page; this one returns
plain JSON. It decodes with the app's shared model (the bundled one unless a visitor loaded
another), so `model` names that model or is left empty: an API call never loads a model.
"""

from __future__ import annotations

import inspect
import json
from contextlib import closing

import gradio as gr

from lopa.settings import SETTINGS, check_settings, settings_for_model

from .boundary import stream_jobs
from .models import MODELS
from .session import APP_DEFAULTS, LiveRun

# A prompt longer than this is refused before it is tokenized (the model's context is checked after).
MAX_PROMPT_CHARS = 100_000
# The endpoint's parameters: the prompt, the model's name, then every registry setting with the app's
# default; attention "" follows the model's own (its config).
SIGNATURE = inspect.Signature(
    [inspect.Parameter("prompt", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
     inspect.Parameter("model", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="", annotation=str),
     *[inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=spec.type,
                         default="" if name == "attention" else APP_DEFAULTS.get(name, spec.default))
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

    Returns {"answer": text, "model": name, "settings": {...}, "metrics": {...}, "trace": {...}}; the
    trace is the lopa-trace/2 JSON that `lopa.RunResult.from_json` reads. attention "" follows the
    model's own (its config); attention "full" with cache_schedule "authors" and mask_argmax
    "authors" is the authors' loop (docs/method.md). Every value is read by the registry: a wrong
    type or a value out of range comes back as one message naming the parameter, its range and the
    value given.
    """
    try:
        bound = SIGNATURE.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        prompt, model = _check_prompt(values.pop("prompt")), values.pop("model")
        if values["attention"] == "":
            del values["attention"]
        chosen = check_settings(values)                        # every value, before any model is touched
        loaded = MODELS.get()
        if model and model != loaded.spec.name:
            raise ValueError(f"the app serves {loaded.spec.name!r}; pass model='' or that name "
                             "(an API call never loads another model)")
        settings = settings_for_model(loaded.spec, **chosen)    # the one place unset settings are filled
        live = LiveRun({"model": loaded.spec.name, "prompt": prompt, "settings": settings.to_dict(), "workers": 1,
                        "rounds": None, "resume": None})
        with closing(stream_jobs([live.job])) as passes:       # through the GPU boundary (app/boundary.py)
            for (chunk,) in passes:
                live.apply(chunk)
        run = live.run
        if run is None:
            raise ValueError("the decode produced no round")
    except (ValueError, TypeError, RuntimeError) as err:    # RuntimeError: a decode that cannot go on
        raise gr.Error(str(err), print_exception=False) from None
    return {"answer": run.text, "model": loaded.spec.name, "settings": settings.to_dict(), "metrics": run.metrics(),
            "trace": json.loads(run.to_json())}


decode.__signature__ = SIGNATURE
decode.__annotations__ = {p.name: p.annotation for p in SIGNATURE.parameters.values()} | {"return": dict}
