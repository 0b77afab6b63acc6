"""The DiffusionGemma panel (app/panels/denoise/, its saved traces: app/panels/denoise/traces.py) on a tiny random
DiffusionGemma folder (the stock config classes, the word-level test tokenizer): picking the folder in
the model box opens it there, Decode records the sampler's steps and the slider shows each one, a saved
canvas trace opens (and a hostile one is refused or shown escaped), the decode's bounds; then the same
in a real browser."""

import json
import os
import re
from pathlib import Path

import gradio as gr
import pytest
from servers import free_port, launch_chromium, needs_chromium
from test_diffusion_gemma import CANVAS

from app.panels.denoise import build_denoise_panel
from app.panels.denoise import callbacks as denoise
from app.panels.denoise import traces as canvas_traces
from app.panels.model import pick_model
from app.serving.budget import LEDGER
from app.serving.model_cache import MODELS
from app.serving.models import MODELS_DIR
from app.serving.session import Session
from lopa.models.canvas_trace import CanvasRun
from lopa.models.diffusion_gemma import decode
from lopa.models.tiny import save_tiny_diffusion_gemma, tiny_diffusion_gemma, tiny_tokenizer
from lopa.settings import CANVAS_SETTINGS
from visualizations.denoise import denoise_step_html

PROMPT = "how many apples does Tom have"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_diffusion_gemma(tmp_path_factory.mktemp("models") / "diffusiongemma-tiny")


@pytest.fixture
def allowed(folder, monkeypatch):
    """The DiffusionGemma folder, where this server may load models from (beside the bundled ones)."""
    monkeypatch.setenv("LOPA_MODEL_DIRS", os.pathsep.join([str(folder.parent), str(MODELS_DIR)]))
    return folder


@pytest.fixture(scope="module")
def other(folder):
    """A second DiffusionGemma folder beside the first, with other weights (it decodes other tokens)."""
    import torch
    model = tiny_diffusion_gemma()
    torch.manual_seed(1)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(0.5 * torch.randn_like(weight))
    target = folder.parent / "diffusiongemma-other"
    model.save_pretrained(target)
    tiny_tokenizer().save_pretrained(target)
    return target


def alone(folder, prompt=PROMPT, seed=3, tokens=16, steps=4) -> list[int]:
    """The tokens the engine's decode gives on a fresh load of `folder` (no app, no cache)."""
    from lopa.models.diffusion_gemma import load_diffusion_gemma
    model, tokenizer = load_diffusion_gemma(folder, "cpu")
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    return decode(model, ids, seed=seed, max_new_tokens=tokens, max_denoising_steps=steps).tokens


def visitor(key: str):
    from types import SimpleNamespace
    return SimpleNamespace(session_hash=key)


def decoded(folder, **numbers):
    view = denoise.CanvasView()
    out = denoise.decode_canvas(Session(canvas_model=str(folder)), view, PROMPT, numbers.get("tokens", 16), numbers.get("steps", 4), None,
                                numbers.get("seed", 3))
    return view, dict(zip(denoise.DENOISE_OUTPUTS, out))


def test_a_diffusion_gemma_folder_picked_in_the_model_box_opens_in_its_panel(allowed, tmp_path, monkeypatch):
    session = Session()
    info, status, box = pick_model(session, str(allowed))
    assert "DiffusionGemma checkpoint" in status and "decodes on its own sampler" in status
    assert session.model is None and box["value"] != str(allowed)       # Run keeps the session's LoPA model
    assert session.canvas_model == str(allowed) and "diffusiongemma-tiny" in denoise.folder_line(session)
    pick_model(session, box["value"])                                  # the box shown again: the panel keeps it
    assert session.canvas_model == str(allowed) and denoise.folder_line(Session()) == denoise.NO_FOLDER
    # Outside LOPA_MODEL_DIRS a DiffusionGemma folder is refused, and a LoPA model is not one.
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    fresh = Session()
    assert "only loads models from" in pick_model(fresh, str(allowed))[1] and fresh.canvas_model is None
    with pytest.raises(ValueError, match="only loads models from"):
        denoise.canvas_folder(str(allowed))
    monkeypatch.setenv("LOPA_MODEL_DIRS", "*")
    assert denoise.canvas_folder("") is None and denoise.canvas_folder(["x"]) is None


def test_decode_records_each_step_and_the_slider_shows_it(allowed):
    view, out = decoded(allowed)
    assert "Decoded on DiffusionGemma's sampler" in out["denoise_status"]
    # the engine's decode of the same prompt at the same seed: the same tokens and steps
    from lopa.models.diffusion_gemma import load_diffusion_gemma
    model, tokenizer = load_diffusion_gemma(allowed, "cpu")
    ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    alone = decode(model, ids, seed=3, max_new_tokens=16, max_denoising_steps=4)
    run = view.run
    assert run["tokens"] == alone.tokens and len(run["records"]) == alone.forwards
    assert f'data-counter="forwards" data-value="{alone.forwards}"' in out["denoise_counters"]
    assert out["denoise_slider"]["maximum"] == alone.forwards - 1 and out["denoise_slider"]["value"] == 0
    assert out["denoise_settled"].count('class="lopa-settled"') == len(alone.tokens)
    for i, record in enumerate(run["records"]):
        counters, slider, step, settled, heatmap = denoise.show_step(view, i)
        assert step.startswith(f'<div data-record="{i}">') and denoise_step_html(run, i, view.names) in step
        assert step.count("border:2px solid") == len(record["accepted"])          # accepted cells
        assert step.count("border:1px dotted #777") == len(record["renoised"])    # re-noised cells
        same_canvas = [r for r in run["records"] if r["canvas"] == record["canvas"]]
        assert [list(z) for z in heatmap.data[0].z] == [r["entropy"] for r in same_canvas]
    settled = [s for s in run["settled"] if s is not None]
    assert settled and all(f'data-step="{s}"' in out["denoise_settled"] for s in settled)
    assert all(isinstance(x, dict) and x.get("__type__") == "update" for x in denoise.show_step(view, "nine"))


def test_the_panels_defaults_decode_the_tiny_checkpoint_the_documented_command_writes(tmp_path, monkeypatch):
    """`python -m lopa.models.tiny DIR` (docs/checkpoints.md) writes a folder the loader opens; picked in the model
    box, the panel decodes it at its defaults (every number 0: the checkpoint's own, 256 tokens at 48 steps, which
    on 8-token canvases would take 1536 forwards), fitted under the bound: 48 steps, as many canvases as fit."""
    from lopa.models.diffusion_gemma import load_diffusion_gemma
    from lopa.models.tiny import main
    page = (Path(__file__).resolve().parent.parent / "docs" / "checkpoints.md").read_text()
    command = re.search(r"^python -m lopa\.models\.tiny (\S+)$", page, re.M)
    target = tmp_path / Path(command.group(1)).name
    assert main([str(target)]) == 0
    model, _ = load_diffusion_gemma(target, "cpu")
    assert model.config.canvas_length == CANVAS
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    session, view = Session(), denoise.CanvasView()
    pick_model(session, str(target))
    assert session.canvas_model == str(target)
    with gr.Blocks():
        panel = build_denoise_panel()
    defaults = [panel[name].value for name in denoise.PANEL_INPUTS]            # what the page shows and sends
    out = dict(zip(denoise.DENOISE_OUTPUTS, denoise.decode_canvas(session, view, PROMPT, *defaults)))
    assert "80 new tokens at up to 48 denoising steps" in out["denoise_status"], out["denoise_status"]   # 10 canvases
    assert view.run["settings"]["max_new_tokens"] == 80 and view.summary["forwards"] <= denoise.MAX_FORWARDS


@pytest.mark.parametrize("set_tokens, set_steps, expected", [
    (None, None, (80, 48)),          # the checkpoint's own steps, as many 8-token canvases as 512 forwards allow
    (16, None, (16, 48)),            # two canvases: its own 48 steps fit
    (400, None, (400, 10)),          # 50 canvases: 10 steps each
    (None, 100, (40, 100)),          # 5 canvases of 100 steps
    (2048, 256, (2048, 256)),        # both set: the visitor's (the decode then refuses the pair)
])
def test_lengths_left_unset_fit_the_bound(set_tokens, set_steps, expected):
    assert denoise.fitted(8, 256, 48, set_tokens, set_steps) == expected
    assert denoise.fitted(256, 256, 48) == (256, 48)          # DiffusionGemma's own canvas: one canvas, unchanged


def test_decode_is_bounded_and_bad_numbers_are_named(allowed, monkeypatch):
    view, session = denoise.CanvasView(), Session(canvas_model=str(allowed))
    def message(*numbers, prompt=PROMPT):
        out = denoise.decode_canvas(session, view, prompt, *numbers)
        assert all(x.get("__type__") == "update" for x in out[1:])      # nothing else changes
        return out[0]
    assert f"at most {denoise.MAX_FORWARDS} a decode" in message(2048, 256, None, 0)
    # A length the visitor set is theirs: the pair over the bound is refused, not changed.
    assert "256 new tokens at 48 denoising steps may take 1536 forwards" in message(256, 48, None, 0)
    # The panel's settings are the registry's (lopa.settings.CANVAS_SETTINGS), read and worded by it.
    assert "seed must be an integer in 0..2147483647 (a number), got &#x27;x&#x27;" in message(8, 2, None, "x")
    assert "entropy bound must be in (0, 1000], got &#x27;-1&#x27;" in message(8, 2, "-1", 0)
    assert "max denoising steps must be an integer in 1..256, got 999" in message(8, 999, None, 0)
    assert [denoise.read_setting(n, v) for n, v in zip(denoise.PANEL_SETTINGS, ("16", 0, 0.5, "3"))] == [16, 0, 0.5, 3]
    assert denoise.PANEL_SETTINGS == tuple(CANVAS_SETTINGS) == ("max_new_tokens", "max_denoising_steps",
                                                                 "entropy_bound", "seed")
    assert "the prompt is empty" in message(8, 2, None, 0, prompt="  ")
    assert "No DiffusionGemma checkpoint picked" in denoise.decode_canvas(Session(), view, PROMPT, 8, 2, None, 0)[0]
    monkeypatch.setattr(denoise, "DECODE_SECONDS", -1.0)               # the deadline passed before the first step
    assert "took longer than this app allows" in message(8, 2, None, 0)
    assert view.run is None
    monkeypatch.setattr(denoise, "DECODE_SECONDS", 300.0)
    assert "Decoded" in denoise.decode_canvas(session, view, PROMPT, 8, 2, 0.5, 1)[0]          # and the hook is gone
    assert view.run["settings"]["entropy_bound"] == 0.5 and view.run["settings"]["max_denoising_steps"] == 2


def test_a_saved_trace_opens_and_its_bytes_are_given_back(allowed, tmp_path):
    view, _ = decoded(allowed)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(view.run))
    before = LEDGER.held
    opened = denoise.CanvasView()
    out = dict(zip(denoise.DENOISE_OUTPUTS, canvas_traces.load_canvas_trace(opened, str(path))))
    assert "Opened a canvas trace of `diffusiongemma-tiny`" in out["denoise_status"]
    assert opened.run == view.run and opened.names == view.names      # the held model's tokenizer names its tokens
    assert LEDGER.held > before
    denoise.end_canvas_view(opened)
    assert LEDGER.held == before and opened.run is None


def test_a_hostile_trace_is_refused_or_shown_escaped(allowed, tmp_path, monkeypatch):
    view, _ = decoded(allowed)
    good = view.run

    def opened(data, name="t.json"):
        target = denoise.CanvasView()
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return target, dict(zip(denoise.DENOISE_OUTPUTS, canvas_traces.load_canvas_trace(target, str(path))))

    # Strings from the file reach the page escaped.
    evil = {**good, "model": "<img src=x onerror=alert(1)>", "prompt": "<script>alert(1)</script>",
            "answer": "<b>x</b>"}
    target, out = opened(evil)
    assert target.run is not None and target.names == {}              # no tokenizer is looked up by that name
    page = "".join(str(v) for k, v in out.items() if k != "denoise_heatmap")
    assert "<img" not in page and "<script" not in page and "&lt;script&gt;" in page
    # Refused with a message, the panel unchanged.
    for data, expected in [
        ({**good, "records": [{**good["records"][0], "renoised": good["records"][0]["renoised"][1:]}]},
         "records.0: accepted and renoised must split"),
        ({**good, "records": [{**good["records"][0], "entropy": [float("nan")] * CANVAS}]}, "records.0.entropy"),
        ({**good, "format": "lopa-trace/1"}, "not a canvas-sampler trace"),
        ({**good, "settings": {"canvas_length": 0, "max_denoising_steps": 4}}, "canvas_length"),
        ({**good, "records": []}, "no denoising steps"),
        ({**good, "extra": "<script>"}, "extra"),
        ("{not json", "not a JSON trace"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ]:
        target, out = opened(data)
        assert target.run is None and all(x.get("__type__") == "update" for k, x in out.items() if k != "denoise_status")
        assert "⚠ Error" in out["denoise_status"], out["denoise_status"][:300]
        assert re.search(expected, out["denoise_status"]), (expected, out["denoise_status"][:300])
        assert "<script" not in out["denoise_status"]
    monkeypatch.setattr(canvas_traces, "MAX_UPLOAD_BYTES", 1000)
    assert "a canvas trace may be" in opened(good)[1]["denoise_status"]
    assert "no canvas trace file given" in canvas_traces.load_canvas_trace(denoise.CanvasView(), {"path": 1})[0]


def test_the_served_endpoints_answer_hostile_raw_values_with_the_input_s_name(allowed):
    """Through HTTP, raw JSON (NaN, a list, 100 KB) in every input of the panel's endpoints: a message
    naming the input, never a server error, never the value echoed in full."""
    import httpx

    from app import build_demo
    big = "9" * 200_000
    demo, port = build_demo(), free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    base = f"http://127.0.0.1:{port}/gradio_api/call/"

    def call(api: str, data: list) -> str:
        event = httpx.post(base + api, content=json.dumps({"data": data}), headers={"content-type": "application/json"},
                           timeout=60)
        text = httpx.get(f"{base}{api}/{event.json()['event_id']}", timeout=300).text
        assert "data: {\"error" not in text and len(text) < 5000, text[:300]
        first = json.loads([line[6:] for line in text.splitlines() if line.startswith("data: ")][-1])[0]
        return str(first.get("value") if isinstance(first, dict) else first)

    try:
        good = [PROMPT, 16, 4, 0, 0]
        for i, name in enumerate(("prompt", "max new tokens", "max denoising steps", "entropy bound", "seed")):
            for bad in (float("nan"), [1, 2], big, {"a": 1}):
                if i == 0 and isinstance(bad, float):
                    continue
                message = call("decode_canvas", [*good[:i], bad, *good[i + 1:]])
                assert "⚠ Error" in message and name in message and big not in message, (name, message[:200])
        assert "No DiffusionGemma checkpoint picked" in call("decode_canvas", good)     # this HTTP session picked none
        assert call("show_canvas_step", [big]) is not None                             # nothing shown yet: no change
    finally:
        demo.close()


def test_diffusion_gemma_models_live_in_the_one_models_cache_leased_while_they_decode(allowed, other, monkeypatch):
    from app.serving.model_cache import model_bytes
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(allowed.parent))
    monkeypatch.setattr(MODELS, "max_bytes", 1)                 # less than one model: the least recently used goes
    MODELS.clear()
    key = {f: MODELS.key(f) for f in (allowed, other)}
    # Two sessions, two DiffusionGemma folders: each decodes its own (the same tokens as its folder alone).
    one, two = Session(), Session()
    pick_model(one, str(allowed)), pick_model(two, str(other))
    runs = {}
    for session, folder in ((one, allowed), (two, other)):
        view = denoise.CanvasView()
        assert "Decoded" in denoise.decode_canvas(session, view, PROMPT, 16, 4, None, 3)[0]
        runs[folder] = view.run["tokens"]
        assert runs[folder] == alone(folder)
        held = MODELS.peek(folder, load=denoise.load_canvas_model)
        assert MODELS.held() == {key[folder]: (model_bytes(held), 0)}   # counted in the bound; the other went
    assert runs[allowed] != runs[other]
    # Held as a DiffusionGemma model, the folder is never handed to a LoPA caller.
    assert MODELS.peek(other) is None
    with pytest.raises(ValueError, match="another kind of model"):
        MODELS.get(other)
    # While a decode holds its model, loading another one does not evict it; it goes once released.
    seen, decode_in_cache = [], denoise._decode

    def decode_after_a_lopa_load(*args, **kwargs):
        MODELS.get(MODELS.default)
        seen.append(MODELS.held())
        return decode_in_cache(*args, **kwargs)
    monkeypatch.setattr(denoise, "_decode", decode_after_a_lopa_load)
    assert "Decoded" in denoise.decode_canvas(one, denoise.CanvasView(), PROMPT, 16, 4, None, 3)[0]
    assert seen[0][key[allowed]][1] == 1 and MODELS.key(MODELS.default) in seen[0]
    assert list(MODELS.held()) == [MODELS.key(MODELS.default)]
    MODELS.clear()


def test_the_trace_shown_saves_to_a_file_that_opens_as_the_same_view(allowed, tmp_path, monkeypatch):
    from app.serving import disk
    exports = disk.Exports(1 << 30, 1 << 30, root=tmp_path / "cache")
    monkeypatch.setattr(disk, "EXPORTS", exports)
    empty = canvas_traces.export_canvas_trace(denoise.CanvasView(), visitor("a"))
    assert empty[0]["value"] is None and "nothing to save yet" in empty[1]
    view, _ = decoded(allowed)
    update, status = canvas_traces.export_canvas_trace(view, visitor("a"))
    path = Path(update["value"])
    assert "Saved" in status and path.name.startswith("lopa-canvas-trace-diffusiongemma-tiny-") and path.suffix == ".json"
    assert exports.held("a") == path.stat().st_size and exports.root / "a" in path.parents
    opened = denoise.CanvasView()
    assert "Opened a canvas trace" in canvas_traces.load_canvas_trace(opened, str(path))[0]
    assert path.is_file()                                          # an export is not an upload: it stays for download
    assert opened.run == view.run and opened.names == view.names and opened.summary == view.summary
    for i in range(len(view.run["records"])):                      # the same view, step by step
        shown, again = denoise.render(view, i), denoise.render(opened, i)
        assert shown[:4] == again[:4] and shown[4].to_json() == again[4].to_json()
    # Within the disk budgets: a session's own older export makes room; one over its budget is refused.
    monkeypatch.setattr(disk, "EXPORTS", disk.Exports(int(1.5 * path.stat().st_size), 1 << 30, root=tmp_path / "b"))
    first, _ = canvas_traces.export_canvas_trace(view, visitor("b"))
    second, status = canvas_traces.export_canvas_trace(view, visitor("b"))
    assert "1 older export(s) removed" in status and not Path(first["value"]).exists() and Path(second["value"]).exists()
    monkeypatch.setattr(disk, "EXPORTS", disk.Exports(100, 1 << 30, root=tmp_path / "c"))
    refused = canvas_traces.export_canvas_trace(view, visitor("c"))
    assert refused[0]["value"] is None and "could not save the canvas trace" in refused[1] and "exports may take" in refused[1]
    assert not any(p.is_file() for p in (tmp_path / "c").rglob("*"))
    # A file the panel could not open again is not written.
    monkeypatch.setattr(canvas_traces, "MAX_UPLOAD_BYTES", 1000)
    assert "opens canvas traces up to" in canvas_traces.export_canvas_trace(view, visitor("a"))[1]


class Link:
    """A page request whose address carries `query` (what share.open_canvas_link reads)."""
    def __init__(self, query: dict):
        self.query_params = query


def test_a_share_link_reopens_the_picked_diffusion_gemma_folder_with_its_settings(allowed, tmp_path, monkeypatch):
    from urllib.parse import parse_qsl

    from app.panels.settings import share
    from app.serving.session import APP_DEFAULTS, SETTING_NAMES
    session = Session()
    pick_model(session, str(allowed))
    values = [APP_DEFAULTS[n] for n in SETTING_NAMES]
    query, command = share.links(None, session, PROMPT, *values, 16, 0, "0.5", 0)
    fields = dict(parse_qsl(query[1:]))
    assert fields["canvas"] == str(allowed) and fields["canvas_max_new_tokens"] == "16"
    assert fields["canvas_entropy_bound"] == "0.5" and "canvas_seed" not in fields       # defaults stay out
    assert "canvas" not in command                                 # `lopa generate` does not decode DiffusionGemma
    assert "canvas" not in share.links(None, Session(), PROMPT, *values, 16, 0, 0, 0)[0]       # nothing picked
    assert "fix the settings first: seed" in share.links(None, session, PROMPT, *values, 16, 0, 0, "x")[0]
    # Opened: a fresh session has the folder in its panel, and the panel's inputs the link's values.
    fresh = Session()
    line, tokens, steps, bound, seed, status = share.open_canvas_link(Link(fields), fresh)
    assert fresh.canvas_model == str(allowed) and "diffusiongemma-tiny" in line
    assert tokens["value"] == 16 and bound["value"] == 0.5 and steps.get("__type__") == seed.get("__type__") == "update"
    assert "value" not in steps and "value" not in seed and "value" not in status
    assert share.links(None, fresh, PROMPT, *values, 16, 0, 0.5, 0)[0] == query      # the same link again
    # A bad setting is dropped and named; a folder outside LOPA_MODEL_DIRS is not opened at all.
    fresh = Session()
    out = share.open_canvas_link(Link({**fields, "canvas_max_denoising_steps": "999"}), fresh)
    assert fresh.canvas_model == str(allowed) and "max denoising steps must be an integer in 1..256" in out[-1]
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    fresh = Session()
    out = share.open_canvas_link(Link({"canvas": str(allowed), "canvas_seed": "4"}), fresh)
    assert fresh.canvas_model is None and "dropped: this server only loads models from" in out[-1]
    assert all(x.get("__type__") == "update" and "value" not in x for x in out[:-1])
    assert all(x.get("__type__") == "update" and "value" not in x for x in share.open_canvas_link(Link({}), Session()))


WAIT_MS = 180_000          # hang guards only


@pytest.mark.browser
@pytest.mark.timeout(600)
@needs_chromium
def test_the_panel_decodes_the_tiny_checkpoint_and_steps_it_in_a_browser(allowed, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from app import LAUNCH_KWARGS, build_demo
    demo = build_demo()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **LAUNCH_KWARGS)
    try:
        with sync_api.sync_playwright() as p:
            browser = launch_chromium(p, WAIT_MS)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            errors = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(f"http://127.0.0.1:{port}/", timeout=WAIT_MS)
            page.wait_for_selector("#run")
            box = page.locator("#model-dir input")
            box.click()
            box.fill("")
            box.type(str(allowed))                                    # a typed folder: applied on Enter
            box.press("Enter")
            page.wait_for_function("document.querySelector('#denoise-model')?.innerText.includes('diffusiongemma-tiny')")
            page.wait_for_function("document.querySelector('#status')?.innerText.includes('DiffusionGemma checkpoint')")
            page.locator("#prompt textarea").fill(PROMPT)
            page.locator("#denoise-max-new-tokens input").fill("16")
            page.locator("#denoise-steps input").fill("4")
            page.locator("#denoise-decode").scroll_into_view_if_needed()
            page.click("#denoise-decode")
            page.wait_for_selector("#denoise-counters .lopa-denoise-counters")
            forwards = int(page.locator("#denoise-counters [data-counter='forwards']").get_attribute("data-value"))
            assert forwards >= 2 and page.locator("#denoise-step [data-record='0']").count() == 1
            page.wait_for_selector("#denoise-heatmap .js-plotly-plot")
            assert page.locator("#denoise-settled .lopa-settled").count() == 16
            slider = page.locator("#denoise-slider input[type=range]")
            slider.focus()
            for i in range(1, forwards):                              # step through every recorded step
                page.keyboard.press("ArrowRight")
                page.wait_for_selector(f"#denoise-step [data-record='{i}']")
            assert "step 3" in page.locator("#denoise-step").inner_text()
            # the trace shown saves as a file offered for download
            page.click("#denoise-export")
            page.wait_for_function("document.querySelector('#denoise-export-file')?.innerText"
                                   ".includes('lopa-canvas-trace-diffusiongemma-tiny')")
            assert "Saved" in page.locator("#denoise-status").inner_text()
            # the share link carries the picked folder and the panel's settings, and reopens them on a new page
            page.get_by_text("share this run").first.click()
            page.wait_for_function("(document.querySelector('#share-link textarea')?.value || '')"
                                   ".includes('canvas_max_denoising_steps=4')")
            link = page.locator("#share-link textarea").input_value()
            assert "canvas=" in link and "canvas_max_new_tokens=16" in link
            assert link.startswith(f"http://127.0.0.1:{port}/?prompt=")          # a link to paste, not a query
            shared = browser.new_page(viewport={"width": 1440, "height": 1000})
            shared.set_default_timeout(WAIT_MS)
            shared.goto(link, timeout=WAIT_MS)
            shared.wait_for_function("(document.querySelector('#denoise-model')?.innerText || '')"
                                     ".includes('diffusiongemma-tiny')")
            shared.wait_for_function("document.querySelector('#denoise-steps input')?.value === '4'")
            assert shared.locator("#denoise-max-new-tokens input").input_value() == "16"
            shared.close()
            # a saved canvas trace opens in the same panel
            from lopa.models.diffusion_gemma import load_diffusion_gemma
            model, tokenizer = load_diffusion_gemma(allowed, "cpu")
            ids = tokenizer("Tom buys 3 apples", return_tensors="pt")["input_ids"]
            saved = decode(model, ids, prompt="Tom buys 3 apples", seed=1, max_new_tokens=8, max_denoising_steps=3,
                           name="diffusiongemma-tiny").save(tmp_path / "saved.json")
            page.set_input_files("#denoise-upload input[type=file]", str(saved))
            page.wait_for_function("document.querySelector('#denoise-status')?.innerText.includes('Opened a canvas trace')")
            page.wait_for_function("document.querySelector('#denoise-counters [data-counter=\"forwards\"]')"
                                   "?.dataset.value === '3'")
            assert "Tom buys 3 apples" in page.locator("#denoise-status").inner_text()
            assert not errors, errors
            browser.close()
    finally:
        demo.close()


def test_token_strings_go_to_the_answer_first_when_a_trace_holds_too_many_ids(allowed, monkeypatch):
    view, _ = decoded(allowed)
    run = CanvasRun.from_json(json.dumps(view.run))
    tokenizer = MODELS.peek(allowed, load=denoise.load_canvas_model).tokenizer
    answer, argmax = set(run.tokens), {t for r in run.records for t in r.argmax}
    assert set(denoise.trace_names(tokenizer, run)) == answer | argmax | {t for r in run.records for t in r.sampled + r.tokens_in}
    monkeypatch.setattr(denoise, "MAX_NAMED", len(answer | argmax))
    assert set(denoise.trace_names(tokenizer, run)) == answer | argmax
    monkeypatch.setattr(denoise, "MAX_NAMED", len(answer))
    assert set(denoise.trace_names(tokenizer, run)) == answer


def test_a_chat_checkpoint_s_prompt_goes_through_its_chat_template(folder, tmp_path, monkeypatch):
    import shutil

    from transformers import AutoTokenizer
    chat = shutil.copytree(folder, tmp_path / "diffusiongemma-tiny-it")
    tokenizer = AutoTokenizer.from_pretrained(chat)
    tokenizer.chat_template = "{% for m in messages %}Question : {{ m['content'] }} Answer{% endfor %}"
    tokenizer.save_pretrained(chat)
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tmp_path))
    view = denoise.CanvasView()
    assert "Decoded" in denoise.decode_canvas(Session(canvas_model=str(chat)), view, "how many apples", 8, 2, 0, 0)[0]
    expected = tokenizer("Question : how many apples Answer", add_special_tokens=False)["input_ids"]
    assert view.run["prompt_ids"] == expected and view.run["prompt"] == "how many apples"
