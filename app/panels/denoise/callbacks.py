"""DiffusionGemma on its own sampler, step by step: the panel's callbacks and how its model is held.

DiffusionGemma is not a masked diffusion LM, so the LoPA engine (and every control of the round view)
does not decode it (docs/checkpoints.md, "DiffusionGemma on its own sampler"). When a visitor picks a
DiffusionGemma folder in the model box, the session keeps its LoPA model and this panel takes the folder
(`Session.canvas_model`, set by app.panels.model.pick_model, or by a share link: app/panels/settings/share.py);
Decode runs lopa.models.diffusion_gemma.decode on the page's prompt and shows the lopa-canvas-trace/1 it
records (the panel's own gr.State, `CanvasView`): each step's canvas (kept / accepted / re-noised), the
entropy of every position at every step, the step each final token settled, counters. A saved canvas
trace can be opened too, and the trace shown saved for download (app/panels/denoise/traces.py).

A decode is bounded three ways: the wiring runs it in the model events' slot (one model event at a
time, like Run), its canvases x steps are at most MAX_FORWARDS, and a forward that starts after
DECODE_SECONDS (LOPA_CANVAS_DECODE_S) ends it with a message. The DiffusionGemma models live in the app's
one models' cache (app/serving/model_cache.py, `load=load_canvas_model`): counted in its byte bound beside the LoPA
models, least recently used first out, never while a decode holds one (a lease). On ZeroGPU the panel
decodes nothing (a GPU worker only sees the models loaded before it forks: app/serving/gpu.py), and replays saved
traces only.
"""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from lopa.models.canvas_trace import CanvasRun
from lopa.models.diffusion_gemma import check_diffusion_gemma
from lopa.models.families import checkpoint_family
from lopa.settings import CANVAS_SETTINGS

from ...serving.budget import HOLD_BYTES, LEDGER, held_bytes, mb
from ...serving.gpu import zero_gpu
from ...serving.inputs import text, whole
from ...serving.model_cache import MODELS
from ...serving.models import token_names
from ..viz import denoise, esc

# The panel's settings in the order of its inputs (declared in lopa.settings.CanvasSettings, read by the registry,
# named so in share links). All but the seed are 0 when unset: the checkpoint's own generation config.
PANEL_SETTINGS = tuple(CANVAS_SETTINGS)
PANEL_INPUTS = ("denoise_max_new_tokens", "denoise_steps", "denoise_bound", "denoise_seed")   # their components
DENOISE_OUTPUTS = ("denoise_status", "denoise_counters", "denoise_slider", "denoise_step", "denoise_settled",
                   "denoise_heatmap")
# Denoising forwards one decode may take (canvases x max denoising steps): DiffusionGemma's own defaults
# (one canvas of 256 tokens, 48 steps) take 48; the bound keeps a decode from holding the model slot,
# which every session's Run shares, for more than a few hundred forwards. A length left unset is fitted
# under it (fitted): a checkpoint with short canvases decodes fewer new tokens than its own 256.
MAX_FORWARDS = 512
# What DiffusionGemma's generate takes when the checkpoint's generation config names neither length.
OWN_TOKENS, OWN_STEPS = 256, 48
MAX_PROMPT_TOKENS = 4096
# Wall clock a decode may take before its next forward is refused (seconds).
DECODE_SECONDS = float(os.environ.get("LOPA_CANVAS_DECODE_S", "300"))
# Token strings are looked up for at most this many distinct ids of a trace (the rest show as #id).
MAX_NAMED = 20_000
NOT_LOPA = ("DiffusionGemma decodes on its own entropy-bound sampler, not by masked diffusion, so the LoPA "
            "controls (k, orders, thresholds, branch-parallel, forks, studies) do not apply to it: LoPA's lookahead "
            "is not defined on a sampler that re-noises every position it did not accept (docs/checkpoints.md, "
            "\"DiffusionGemma on its own sampler\").")
STEP_CAPTION = ("This step's canvas: the token drawn at each position (hover: the token the forward saw, the "
                "entropy); boxed draws were accepted and kept, faded ones re-noised for the next step.")
SETTLED_CAPTION = "The answer: each token with the step of its canvas from which the sampler kept accepting it."
NO_FOLDER = ("No DiffusionGemma checkpoint picked: type its folder in the model box above (a Hugging Face folder "
             "whose config says `diffusion_gemma`), or open a saved canvas trace. To try one in seconds, "
             "`python -m lopa.models.tiny checkpoints/diffusiongemma-tiny` writes a tiny random one "
             "(docs/checkpoints.md).")


# -- the model: in the app's models' cache, under its own loader -------------------------------------
@dataclass(frozen=True)
class CanvasModel:
    """A loaded DiffusionGemma checkpoint as the models' cache holds it (app/serving/model_cache.py counts `model`'s bytes
    and finds `tokenizer` for a saved trace whose model is called like `path`'s folder)."""
    model: object
    tokenizer: object
    path: Path


def load_canvas_model(folder: Path) -> CanvasModel:
    """The cache's loader of a DiffusionGemma folder (`MODELS.lease(folder, load=load_canvas_model)`); ValueError
    when it does not load."""
    from lopa.models.diffusion_gemma import load_diffusion_gemma
    try:
        model, tokenizer = load_diffusion_gemma(folder)
    except (OSError, RuntimeError, KeyError) as err:        # a missing tokenizer, a half-written file
        raise ValueError(f"could not load DiffusionGemma from {Path(folder).name}: {err}") from None
    return CanvasModel(model, tokenizer, Path(folder))


def canvas_folder(choice) -> Path | None:
    """The folder a model box value names when it holds a DiffusionGemma checkpoint, else None (another kind
    of model, or no value). ValueError naming the problem when the value names no folder the server may load
    (MODELS.folder: LOPA_MODEL_DIRS, a folder a loader may read) or a config that says DiffusionGemma over
    another model's weights (lopa.models.diffusion_gemma.check_diffusion_gemma): the kind is decided here,
    once, and a folder the panel takes is one its Decode loads. Reads headers only: nothing here blocks."""
    if not isinstance(choice, (str, Path)) or not str(choice).strip():
        return None
    folder = MODELS.folder(choice)
    if checkpoint_family(folder) != "diffusion_gemma":
        return None
    check_diffusion_gemma(folder)
    return folder


def picked_message(folder: Path, kept: str) -> str:
    """The status line when the model box names a DiffusionGemma folder: where it decodes instead."""
    return (f"`{esc(Path(folder).name)}` is a DiffusionGemma checkpoint: it decodes on its own sampler in the "
            f"**DiffusionGemma** panel below (Decode there). Run, Step, forks and studies keep using `{esc(kept)}`.")


# -- what one session shows --------------------------------------------------------------------------
@dataclass
class CanvasView:
    """One visitor's panel: the trace shown (plain data, charged to the app's trace budget while held),
    its counters and its token strings."""
    run: dict | None = None
    summary: dict = field(default_factory=dict)
    names: dict = field(default_factory=dict)
    charge: object = None          # weakref.finalize giving the trace's bytes back to the ledger

    def hold(self, run: CanvasRun, names: dict, read=None) -> None:
        """Show `run` in place of the trace shown; ValueError (nothing changed) over the memory budget."""
        data = run.to_dict()
        nbytes = held_bytes(data) + held_bytes(names)
        if nbytes > HOLD_BYTES:
            raise ValueError(f"this trace takes {mb(nbytes)} in memory; a session may hold {mb(HOLD_BYTES)}")
        LEDGER.charge(nbytes, freed_first=self._held(), read=read)
        self.release()                              # the trace shown until now gives its bytes back
        valid = [t for t in run.tokens if run.pad_token_id is None or t != run.pad_token_id]
        self.run, self.names = data, names
        self.summary = {"canvases": len({r.canvas for r in run.records}), "forwards": run.forwards,
                        "steps": max((r.step + 1 for r in run.records), default=0), "tokens": len(valid),
                        "tpf": run.tokens_per_forward()}
        self.charge = weakref.finalize(self, LEDGER.release, nbytes)    # also when the session is dropped

    def release(self) -> None:
        if self.charge is not None:
            self.charge()
        self.charge = None

    def _held(self) -> int:
        if self.charge is None or not self.charge.alive:
            return 0
        return self.charge.peek()[2][0]


def new_canvas_view() -> CanvasView:
    return CanvasView()


def end_canvas_view(view: CanvasView) -> None:
    """Gradio's delete callback for an expired or closed session: its trace gives its bytes back."""
    if isinstance(view, CanvasView):
        view.release()
        view.run, view.names, view.summary = None, {}, {}


# -- callbacks ----------------------------------------------------------------------------------------
def folder_line(session) -> str:
    """The panel's line on the DiffusionGemma folder the session picked (after each pick in the model box)."""
    folder = getattr(session, "canvas_model", None)
    if not folder:
        return NO_FOLDER
    return (f"**DiffusionGemma checkpoint:** `{esc(Path(folder).name)}`, decoded on its own sampler by Decode. Left at "
            f"0, the lengths are the checkpoint's own, with fewer new tokens where they would take more than "
            f"{MAX_FORWARDS} forwards.")


def decode_canvas(session, view: CanvasView, prompt, max_new_tokens=None, max_denoising_steps=None, entropy_bound=None,
                  seed=0) -> tuple:
    """DENOISE_OUTPUTS after decoding the prompt with the picked DiffusionGemma checkpoint. The numbers
    are raw input values; unset (0 or empty) means the checkpoint's own generation config."""
    try:
        prompt = text("prompt", prompt).strip()
        if not prompt:
            raise ValueError("the prompt is empty: type one above")
        settings = panel_settings(max_new_tokens, max_denoising_steps, entropy_bound, seed)
        generation, seed = _generation(settings), settings["seed"]
        folder = getattr(session, "canvas_model", None)
        if not folder:
            raise ValueError(NO_FOLDER)
        if zero_gpu():
            raise ValueError("this ZeroGPU Space does not decode DiffusionGemma (its GPU workers only see the models "
                             "loaded at startup); run the app locally, or open a saved canvas trace")
        folder = Path(folder)
        with MODELS.lease(folder, load=load_canvas_model) as held:     # never evicted mid-decode
            run = _decode(held.model, held.tokenizer, folder.name, prompt, seed, generation)
            names = trace_names(held.tokenizer, run)
        view.hold(run, names)
    except (ValueError, OSError) as err:
        return (error_status(err),) + unchanged()
    lengths = run.settings
    status = (f"Decoded on DiffusionGemma's sampler (seed {seed}), {lengths['max_new_tokens']} new tokens at up to "
              f"{lengths['max_denoising_steps']} denoising steps a canvas: {run.forwards} denoising forwards over "
              f"{view.summary['canvases']} canvas(es). Drag the step slider to see each step's canvas.")
    return (status,) + render(view, 0)


def panel_settings(*values) -> dict:
    """{PANEL_SETTINGS name: value} from the panel's raw input values in that order (read_setting)."""
    return {name: read_setting(name, value) for name, value in zip(PANEL_SETTINGS, values)}


def read_setting(name: str, value) -> int | float:
    """The panel's setting `name` (a PANEL_SETTINGS name) from a raw value, read by the registry
    (lopa.settings.CANVAS_SETTINGS, Setting.parse): ValueError naming it. Unset (None, empty, or 0, which a
    cleared number box sends and no range takes) is 0, the checkpoint's own; the seed is always set."""
    spec = CANVAS_SETTINGS[name]
    if spec.default is None and _unset(value):
        return 0
    return spec.parse(value)


def _generation(settings: dict) -> dict:
    """generate()'s arguments from panel_settings: those the visitor set (the rest are the checkpoint's own)."""
    out = {name: settings[name] for name in ("max_new_tokens", "max_denoising_steps") if settings[name]}
    if settings["entropy_bound"]:
        from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig
        out["sampler_config"] = EntropyBoundSamplerConfig(entropy_bound=settings["entropy_bound"])
    return out


def _unset(value) -> bool:
    return value is None or (isinstance(value, (int, float, str)) and not isinstance(value, bool)
                             and str(value).strip() in ("", "0", "0.0"))


def _decode(model, tokenizer, name: str, prompt: str, seed: int, generation: dict) -> CanvasRun:
    """lopa.models.diffusion_gemma.decode within MAX_FORWARDS and DECODE_SECONDS."""
    from lopa.models.diffusion_gemma import decode
    own, canvas = model.generation_config, model.config.canvas_length
    tokens, steps = fitted(canvas, getattr(own, "max_new_tokens", None) or OWN_TOKENS,
                           getattr(own, "max_denoising_steps", None) or OWN_STEPS,
                           generation.get("max_new_tokens"), generation.get("max_denoising_steps"))
    generation = {**generation, "max_new_tokens": tokens, "max_denoising_steps": steps}
    forwards = -(-tokens // canvas) * steps
    if forwards > MAX_FORWARDS:
        raise ValueError(f"{tokens} new tokens at {steps} denoising steps may take {forwards} forwards "
                         f"({model.config.canvas_length} tokens a canvas); this app runs at most {MAX_FORWARDS} a "
                         "decode: lower max new tokens or max denoising steps")
    if getattr(tokenizer, "chat_template", None):
        body = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(body, return_tensors="pt", add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    if ids.shape[1] > MAX_PROMPT_TOKENS:
        raise ValueError(f"the prompt is {ids.shape[1]} tokens; this panel decodes at most {MAX_PROMPT_TOKENS}")
    deadline = time.monotonic() + DECODE_SECONDS

    def in_time(module, args, kwargs):
        if time.monotonic() > deadline:
            raise TimeoutError
    hook = model.register_forward_pre_hook(in_time, with_kwargs=True)
    try:
        return decode(model, ids.to(next(model.parameters()).device), tokenizer=tokenizer, prompt=prompt, seed=seed,
                      name=name, **generation)
    except TimeoutError:
        raise ValueError(f"the decode took longer than this app allows ({DECODE_SECONDS:g} s, LOPA_CANVAS_DECODE_S): "
                         "lower max new tokens or max denoising steps") from None
    finally:
        hook.remove()


def fitted(canvas: int, own_tokens: int, own_steps: int, tokens: int | None = None,
           steps: int | None = None) -> tuple[int, int]:
    """(max_new_tokens, max_denoising_steps) of a decode on a checkpoint with `canvas` tokens a canvas: the
    visitor's where set (never changed: _decode refuses a pair over MAX_FORWARDS), else the checkpoint's own
    (own_tokens, own_steps) lowered to fit MAX_FORWARDS, the steps of a canvas kept first and the new tokens
    (canvases) cut to what the rest allows."""
    if steps is None:
        steps = max(1, min(own_steps, MAX_FORWARDS // (-(-tokens // canvas) if tokens else 1)))
    if tokens is None:
        tokens = min(own_tokens, max(1, MAX_FORWARDS // steps) * canvas)
    return tokens, steps


def trace_names(tokenizer, run: CanvasRun) -> dict:
    """Token strings for the ids a trace shows: the answer's, then each step's argmax, draws and inputs (the
    random canvas: a real vocabulary's worth of ids), as many of these groups as fit in MAX_NAMED ids."""
    if tokenizer is None:
        return {}
    ids = set(run.tokens)
    for part in ("argmax", "sampled", "tokens_in"):
        more = ids | {t for r in run.records for t in getattr(r, part)}
        if len(more) > MAX_NAMED:
            break
        ids = more
    return token_names(tokenizer, ids)


def show_step(view: CanvasView, index) -> tuple:
    """DENOISE_OUTPUTS without the status: the trace at denoising record `index` (the slider)."""
    if view.run is None:
        return unchanged()
    try:
        index = whole("step", index, 0, len(view.run["records"]) - 1)
    except ValueError as err:
        gr.Warning(str(err))
        return unchanged()
    return render(view, index)


def render(view: CanvasView, index: int) -> tuple:
    """(counters, slider, step, settled, heatmap) of record `index` of the shown trace."""
    run, names = view.run, view.names
    records = run["records"]
    record = records[index]
    slider = gr.update(minimum=0, maximum=max(len(records) - 1, 1), value=index, interactive=len(records) > 1,
                       label=f"denoising step (all canvases in order: {len(records)} steps)")
    step = (f'<div data-record="{index}"><div class="lopa-caption">{STEP_CAPTION}</div>'
            f'{denoise.denoise_step_html(run, index, names)}</div>')
    settled = f'<div class="lopa-caption">{SETTLED_CAPTION}</div>{denoise.denoise_settled_html(run, names)}'
    return (denoise.denoise_counters_html(view.summary), slider, step, settled, denoise.denoise_heatmap(run, record["canvas"], names))


def unchanged() -> tuple:
    """DENOISE_OUTPUTS after the status, left as they are (a refused action changes nothing shown)."""
    return tuple(gr.skip() for _ in DENOISE_OUTPUTS[1:])


def error_status(err) -> str:
    """The panel's status line for a problem the visitor can fix; the message is escaped (it can quote a file name)."""
    return f"**⚠ Error:** {esc(err)}"
