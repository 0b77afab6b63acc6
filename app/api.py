"""The typed API: one `decode` endpoint with named parameters, for gradio_client and scripts.

    from gradio_client import Client
    result = Client("http://localhost:7860/").predict(prompt="Tom has 23 apples. ...", k=4, api_name="/decode")
    result["answer"], result["metrics"]["tpf_useful"], result["trace"]      # trace: the lopa-trace format

The UI's own endpoints (`/run`, `/step`, ...) stream HTML and plots for the page; this one returns
plain JSON. It decodes with the app's shared model (the bundled one unless a visitor loaded
another), so `model` names that model or is left empty: an API call never loads a model.
"""

from __future__ import annotations

import json
from contextlib import closing

import gradio as gr

from lopa.settings import settings_for_model

from .boundary import stream_jobs
from .models import MODELS
from .session import LiveRun


def decode(prompt: str, model: str = "", k: int = 4, order: str = "confidence", order_seed: int = 0,
           tau_conf: float = 0.9, tau_add: float = 0.1, tau_act: float = 0.95, block_size: int = 32,
           max_new_tokens: int = 64, attention: str = "", confidence: str = "neg_entropy",
           temperature: float = 0.0, seed: int = 0, cache_schedule: str = "eager",
           mask_argmax: str = "next_best", lookahead_min_prob: float = 0.0) -> dict:
    """Decode one prompt with LoPA (k lookahead branches; k = 0 is D2F vanilla).

    Returns {"answer": text, "model": name, "settings": {...}, "metrics": {...}, "trace": {...}}; the
    trace is the lopa-trace/2 JSON that `lopa.RunResult.from_json` reads. attention "" follows the
    model's own (its config); attention "full" with cache_schedule "authors" and mask_argmax
    "authors" is the authors' loop (docs/method.md). Errors come back as messages naming what to fix.
    """
    try:
        loaded = MODELS.get()
        if model and model != loaded.spec.name:
            raise ValueError(f"the app serves {loaded.spec.name!r}; pass model='' or that name "
                             "(an API call never loads another model)")
        chosen = dict(k=k, order=order, order_seed=order_seed, tau_conf=tau_conf, tau_add=tau_add, tau_act=tau_act,
                      block_size=block_size, max_new_tokens=max_new_tokens, confidence=confidence,
                      temperature=temperature, seed=seed, cache_schedule=cache_schedule, mask_argmax=mask_argmax,
                      lookahead_min_prob=lookahead_min_prob)
        if attention:
            chosen["attention"] = attention
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
