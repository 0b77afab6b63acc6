"""The settings panel: an input per setting the registry marks for the app, the presets and the backend, and
under them the share link and the command they make (build_settings_panel). Its events (wire): a shared link
read into the inputs as the page loads (share.py reads and writes links), then the inputs the visitor sets,
which become their request. Its callbacks: callbacks.py."""

from __future__ import annotations

import functools
import math

import gradio as gr

from lopa.settings import SETTINGS

from ...serving.closed_pages import end_page
from ...serving.session import APP_DEFAULTS, BRANCH_PARALLEL, SETTING_NAMES, SINGLE, WORKER_RANGE
from ..denoise.callbacks import PANEL_INPUTS
from ..events import VIEW, Wiring
from . import callbacks as cb
from . import share


def setting_input(name: str, value):
    """The input of one registry setting (lopa.settings.SETTINGS): a dropdown for choices, a slider for
    a bounded interval, a number box otherwise; its label, help and range from the registry. Values
    are checked by the registry when read (app.serving.request.read_request), with its message."""
    spec = SETTINGS[name]
    # In words with the code name beside it (what the command line and the paper call it), the help in
    # sentences: the registry's words, which the command line's help says too (Setting.title, .explain).
    kw = dict(label=spec.title, info=spec.explain(), value=value, elem_id=name.replace("_", "-"))
    if spec.choices is not None:
        return gr.Dropdown([(spec.choice_title(c), c) for c in spec.choices], **kw)
    if spec.type is int and spec.high - spec.low <= 64:
        return gr.Slider(spec.low, spec.high, step=1, **kw)
    if spec.type is float and spec.high <= 1:          # a probability: open ends one step inside
        step = 0.01
        # The ends on the step's grid, inside the range: a slider shows its ends (ln 2, not 0.6931471805599453).
        low = math.ceil(round(spec.low / step, 6) + spec.open_low) * step
        high = math.floor(round(spec.high / step, 6) - spec.open_high) * step
        return gr.Slider(round(low, 2), round(high, 2), step=step, **kw)
    return gr.Number(precision=0 if spec.type is int else None, **kw)


def build_settings_panel() -> dict:
    """The settings accordion (a preset, then an input per setting), the backend under it, and the accordion
    with the share link and the command."""
    # Closed: a newcomer runs the defaults; the title names what the visitor set (callbacks.settings_title).
    with gr.Accordion("Decoding settings: all at the defaults", open=False, elem_id="settings") as accordion:
        preset = gr.Dropdown(list(cb.PRESETS), value=list(cb.PRESETS)[0], label="preset (paper: Table 5; keeps max new tokens)",
                             elem_id="preset")
        inputs = {name: setting_input(name, APP_DEFAULTS[name]) for name in SETTING_NAMES}
    # ---- BACKEND SLOT --------------------------------------------------------------------------
    # Where the LoPA decode runs (Run, Step and Compare's LoPA side); see app.serving.model_cache.ModelCache.bp_group.
    with gr.Group(elem_id="backend-slot"):
        with gr.Row():
            backend = gr.Radio([SINGLE, BRANCH_PARALLEL], value=SINGLE, label="backend", scale=3, elem_id="backend")
            workers = gr.Number(value=WORKER_RANGE[0], precision=0,    # range checked by the callbacks, with a message
                                label=f"workers (ranks, {WORKER_RANGE[0]}–{WORKER_RANGE[1]})", scale=1,
                                elem_id="workers")
        gr.Markdown("*Branch-parallel: the k+1 branches are spread over worker processes, each with a model replica "
                    "(the first run starts them, ~10 s). The rank lanes show who computed what.*")
    # ---- END BACKEND SLOT ----------------------------------------------------------------------
    with gr.Accordion("share this run: a link, or the same decode on the command line", open=False, elem_id="share"):
        share_link = gr.Textbox(label="this run as a link (opening it restores the prompt and settings)",
                                interactive=False, buttons=["copy"], elem_id="share-link")
        command = gr.Code(language="shell", label="copy as command", interactive=False, elem_id="command")
    return {"settings_accordion": accordion, "share_link": share_link, "command": command, "preset": preset, **inputs,
            "backend": backend,
            "workers": workers}


def link_inputs(w: Wiring) -> list:
    """What the share link and the command are made from (share.links): the session, the prompt, the settings
    inputs, then the DiffusionGemma panel's."""
    return [w.session, w.c["prompt"], *w.settings, *w.pick(*PANEL_INPUTS)]


def wire(w: Wiring) -> None:
    """The shared link's events first (the page load's listeners run in the order added: the link's inputs,
    then its DiffusionGemma folder, then, from the model panel, the warm-up), then the inputs'."""
    wire_link(w)
    wire_inputs(w)


def wire_link(w: Wiring) -> None:
    """A shared link restores the inputs (the status says what it could not read) and a DiffusionGemma folder;
    the link and the command follow the prompt and the panel's inputs (the settings: wire_inputs)."""
    c, out = w.c, [w.c["share_link"], w.c["command"]]
    # One unload handler: Gradio runs each on the page's state, and would make that state afresh for a second
    # handler after the first dropped it. The closed page's exports leave the disk, its runs the memory.
    w.demo.unload(end_page)
    loaded = w.on(w.demo.load, share.on_load, [w.session, c["prompt"], *w.settings],
                  [c["prompt"], *w.settings, c["model_dir"], c["status"], w.session], api_visibility="private",
                  queue=False, show_progress="hidden")
    w.then(loaded, cb.settings_follow, link_inputs(w), [c["settings_accordion"], *out], queue=False)
    panel = w.pick(*PANEL_INPUTS)
    w.deps["canvas_link"] = w.on(w.demo.load, share.open_canvas_link, [w.session],
                                 [c["denoise_folder"], *panel, c["denoise_status"]], api_visibility="private",
                                 queue=False, show_progress="hidden")
    w.on(functools.partial(gr.on, [x.change for x in [c["prompt"], *panel]]), share.links, link_inputs(w), out,
         api_visibility="private", queue=False, show_progress="hidden")


def wire_inputs(w: Wiring) -> None:
    """An input the visitor changes, or a preset, becomes theirs (Session.touched: their request); the
    settings' title, the link and the command follow it in the same answer."""
    c = w.c
    follows = [c["settings_accordion"], c["share_link"], c["command"]]
    for name in SETTING_NAMES:
        w.on(c[name].input, cb.toucher(name), link_inputs(w), follows, api_visibility="private",
             queue=False, show_progress="hidden")
    preset = w.on(c["preset"].change, cb.apply_preset, [c["preset"], w.session], w.settings,
                  api_visibility="private", show_progress="hidden", **VIEW)
    w.then(preset, cb.settings_follow, link_inputs(w), follows, queue=False)
