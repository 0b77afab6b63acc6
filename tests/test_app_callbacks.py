"""The app's callbacks called as plain functions (no server, no browser) on a tiny random model."""

import json
from pathlib import Path

import gradio as gr
import pytest
from tiny import app_model, save_tiny_model_dir

from app.panels import model as model_panel
from app.panels import traces
from app.panels.compare import COMPARE_OUTPUTS, compare_stream, stop_compare
from app.panels.round_view import callbacks as cb
from app.panels.round_view import views
from app.panels.settings import callbacks as settings_panel
from app.serving.model_cache import MODELS
from app.serving.models import example_prompts, safetensors_param_count
from app.serving.request import read_request
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session
from visualizations import canvas_text

# gr.Warning outside a request falls back to warnings.warn: expected for the bad-input tests. Most tests here
# step a Run round by round (tests/conftest.py every_round); the pace of a stream's messages is
# test_a_runs_messages_come_at_most_every_message_s's.
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("every_round")]

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
# Low thresholds so that a random model commits several tokens per round and lookahead matters.
SETTINGS = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32, confidence="max_prob",
                attention="block_causal", temperature=0.0, seed=0)


def values(**changes):
    return [{**SETTINGS, **changes}[n] for n in SETTING_NAMES]


def named(outputs, names=views.LIVE_OUTPUTS):
    assert len(outputs) == len(names)
    return dict(zip(names, outputs))


def is_skip(value):
    return value == gr.skip()


@pytest.fixture(scope="module", autouse=True)
def tiny_model(tmp_path_factory):
    """Every callback in this module decodes with a tiny random Qwen2 saved like the bundled model."""
    with app_model(tmp_path_factory) as path:
        yield path


def drain(gen):
    return [named(out) for out in gen]


def test_a_request_reads_every_input_with_clear_messages():
    s = read_request(values()).resolve()
    assert s.k == 3 and s.block_size == 8 and s.confidence == "max_prob"
    assert read_request(values(k=3.0, seed=2.0)).resolve().seed == 2
    for bad, message in [(dict(max_new_tokens=30), "multiple of block_size"), (dict(tau_conf=1.5), "tau_conf"),
                         (dict(k=2.5), "whole number"), (dict(block_size=None), "empty"), (dict(k=99), "lookahead branches")]:
        with pytest.raises(ValueError, match=message):
            read_request(values(**bad), frozenset(SETTING_NAMES)).resolve()     # a page that set each input


def test_run_streams_rounds_live_and_renders_the_final_state():
    session = Session()
    outs = drain(cb.run_stream(session, PROMPT, *values()))
    run = session.run
    assert not run.stopped and session.live is None and session.status() == "done"
    rounds = [int(o["counters"].split('data-rounds="')[1].split('"')[0]) for o in outs]
    assert rounds[0] == 0 and rounds[-1] == len(run.records)
    assert rounds[1:-1] == list(range(1, len(run.records) + 1))    # one yield per round, as computed
    last = outs[-1]
    assert last["status"].startswith("Done") and not any(is_skip(last[n]) for n in views.VIEW_OUTPUTS)
    assert f'data-round="{len(run.records) - 1}"' in last["canvas"] and last["answer"] == run.text
    assert session.names                                             # token strings from the tokenizer


def test_a_runs_messages_come_at_most_every_message_s(monkeypatch):
    """The start at once, then a message at most every MESSAGE_S however many rounds the engine made
    meanwhile, and the final state: each message has the page lay out its panels again."""
    clock = [0.0]
    real = cb.stream_jobs

    def paced(jobs):                              # a round every 0.04 s on the clock the stream reads
        for chunks in real(jobs):
            clock[0] += 0.04
            yield chunks
    monkeypatch.setattr(cb, "stream_jobs", paced)
    monkeypatch.setattr(cb.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(cb, "MESSAGE_S", 0.1)
    session = Session()
    counted = [int(named(out)["counters"].split('data-rounds="')[1].split('"')[0])
               for out in cb.run_stream(session, PROMPT, *values())]
    n = len(session.run.records)
    assert n > 6 and counted[0] == 0 and counted[-1] == n
    assert counted[1:-1] == list(range(3, n + 1, 3))       # rounds 3, 6, 9, ...: 0.12 s apart, the least >= 0.1 s
    monkeypatch.setattr(cb, "MESSAGE_S", 0.0)
    assert len(list(cb.run_stream(Session(), PROMPT, *values()))) == n + 2      # start, every round, the end


def test_a_first_fast_run_is_shown_again_round_by_round_once(monkeypatch):
    monkeypatch.setattr(cb, "REPLAY_STEP_S", 0.0)
    session = Session()
    drain(cb.run_stream(session, PROMPT, *values()))
    n = session.n_rounds
    monkeypatch.setattr(views, "REPLAY_UNDER_S", session.elapsed + 1.0)     # this Run counts as fast
    shown = [named(o, cb.ARRIVING_OUTPUTS) for o in cb.show_rounds_arriving(session)]
    assert [o["round_slider"]["value"] for o in shown] == list(range(n))
    assert all(f'data-round="{r}"' in o["canvas"] for r, o in enumerate(shown))
    assert [o["answer"] for o in shown] == [canvas_text(session.run, r, session.names) for r in range(n)]
    skips = [tuple(gr.skip() for _ in cb.ARRIVING_OUTPUTS)]              # nothing changes (none would blank them)
    assert list(cb.show_rounds_arriving(session)) == skips               # once a session
    slow = Session()
    drain(cb.run_stream(slow, PROMPT, *values()))
    monkeypatch.setattr(views, "REPLAY_UNDER_S", 0.0)                       # a Run a visitor could follow
    assert list(cb.show_rounds_arriving(slow)) == skips
    from app.serving.give_way import TURNS
    crowd, busy = Session(), Session()
    for s in (crowd, busy):
        drain(cb.run_stream(s, PROMPT, *values()))
    monkeypatch.setattr(views, "REPLAY_UNDER_S", 1e9)
    TURNS.start()                                    # another visitor's decode runs: no replay to share the CPU with
    try:
        assert list(cb.show_rounds_arriving(crowd)) == skips
    finally:
        TURNS.end()
    replay = cb.show_rounds_arriving(busy)
    first = named(next(replay), cb.ARRIVING_OUTPUTS)
    TURNS.start()                                    # one starts meanwhile: straight to the final round
    try:
        rest = [named(o, cb.ARRIVING_OUTPUTS) for o in replay]
    finally:
        TURNS.end()
    assert first["round_slider"]["value"] == 0 and [o["round_slider"]["value"] for o in rest] == [busy.n_rounds - 1]
    scrubbed = Session()
    drain(cb.run_stream(scrubbed, PROMPT, *values()))
    cb.show_round(scrubbed, 1)                       # the visitor took the slider before the replay began
    assert list(cb.show_rounds_arriving(scrubbed)) == skips
    scrubbing = Session()
    drain(cb.run_stream(scrubbing, PROMPT, *values()))
    replay = cb.show_rounds_arriving(scrubbing)
    next(replay)
    cb.show_round(scrubbing, 1)                      # ... or while it runs
    assert list(replay) == []
    moved_on = Session()
    drain(cb.run_stream(moved_on, PROMPT, *values()))
    monkeypatch.setattr(views, "REPLAY_UNDER_S", 1e9)
    replay = cb.show_rounds_arriving(moved_on)
    next(replay)
    moved_on.streaming = True                                            # the visitor pressed Run again
    assert list(replay) == []


def test_only_a_pages_first_fast_run_ends_with_counters_that_ask_for_its_rounds_again(monkeypatch):
    """The page asks for show_rounds_arriving (app.panels.round_view.PAGE_ASKS_JS) only where the final counters carry
    data-replay: no request for it on any other Run, Step or fork, nor from an API caller."""
    monkeypatch.setattr(cb, "REPLAY_STEP_S", 0.0)
    monkeypatch.setattr(views, "REPLAY_UNDER_S", 1e9)
    page = Session()
    page.page = True
    outs = drain(cb.run_stream(page, PROMPT, *values()))
    assert f'data-replay="{page.current}"' in outs[-1]["counters"]
    assert not any("data-replay" in o["counters"] for o in outs[:-1])          # not while it streams
    assert len(list(cb.show_rounds_arriving(page))) == page.n_rounds
    assert "data-replay" not in drain(cb.run_stream(page, PROMPT, *values()))[-1]["counters"]     # once a session
    fresh = Session()
    fresh.page = True
    stepped = named(cb.step_once(fresh, PROMPT, *values()))
    assert "data-replay" not in stepped["counters"]
    api = Session()                                                              # no page: nothing to ask
    assert "data-replay" not in drain(cb.run_stream(api, PROMPT, *values()))[-1]["counters"]
    slow = Session()
    slow.page = True
    monkeypatch.setattr(views, "REPLAY_UNDER_S", 0.0)
    assert "data-replay" not in drain(cb.run_stream(slow, PROMPT, *values()))[-1]["counters"]


def test_run_answers_the_round_views_stop_in_its_own_last_message():
    """Run's outputs end with the Stop (cb.RUN_OUTPUTS): left alone while it streams, then disabled, unless a
    decode is left to stop (a Run refused while this session's search runs keeps the paused Step's Stop)."""
    outs = list(cb.run_with_stop(Session(), PROMPT, *values()))
    assert all(len(o) == len(cb.RUN_OUTPUTS) for o in outs)
    assert all(is_skip(o[-1]) for o in outs[:-1]) and outs[-1][-1]["interactive"] is False
    paused = Session()
    cb.step_once(paused, PROMPT, *values())
    paused.searching = True
    refused = list(cb.run_with_stop(paused, PROMPT, *values()))
    assert len(refused) == 1 and "search is still running" in refused[0][0]
    assert refused[0][-1]["interactive"] is True and paused.live is not None


def test_heavy_outputs_are_throttled_but_the_end_is_always_drawn(monkeypatch):
    monkeypatch.setattr(views, "REFRESH_S", {"html": 0.0, "plots": 3600.0})
    outs = drain(cb.run_stream(Session(), PROMPT, *values()))
    plots = [not is_skip(o["heatmap"]) and not is_skip(o["chart"]) for o in outs]
    html = [not is_skip(o["canvas"]) and not is_skip(o["branches"]) for o in outs]
    assert not any(plots[:-1]) and plots[-1] is True      # the plots' clock starts with the run: once, at the end
    assert html[0] is False and all(html[1:])                       # cheap HTML views: every round
    assert all(not is_skip(o["counters"]) for o in outs)             # counters move every round
    assert all(not is_skip(o["round_slider"]) and not is_skip(o["answer"]) for o in outs[1:])   # with the canvas
    monkeypatch.setattr(views, "REFRESH_S", {"html": 3600.0, "plots": 3600.0})
    session = Session()
    outs = drain(cb.run_stream(session, PROMPT, *values()))
    assert all(is_skip(o["round_slider"]) and is_skip(o["answer"]) for o in outs[2:-1])         # ... and only then
    assert outs[-1]["answer"] == session.run.text and not is_skip(outs[-1]["round_slider"])


def test_a_pages_run_leaves_its_figures_until_the_page_asks_for_them():
    figures = views.FIGURE_OUTPUTS + ("counters",)
    api = Session()                                           # an API caller: the figures come with the end
    everything = drain(cb.run_stream(api, PROMPT, *values()))[-1]
    assert 'data-figures' not in everything["counters"] and not api.figures_stale
    page = Session(page=True)
    last = drain(cb.run_stream(page, PROMPT, *values()))[-1]
    assert all(is_skip(last[n]) for n in views.FIGURE_OUTPUTS) and 'data-figures="stale"' in last["counters"]
    assert not any(is_skip(last[n]) for n in views.VIEW_OUTPUTS if n not in views.FIGURE_OUTPUTS)
    drawn = named(views.draw_figures(page), figures)
    assert 'data-figures="drawn"' in drawn["counters"] and 'data-status="done"' in drawn["counters"]
    for name in ("heatmap", "chart"):                         # the same figures the end would have carried
        assert drawn[name].to_json() == everything[name].to_json()
    assert [t.y for t in drawn["ranks"].data] == [t.y for t in everything["ranks"].data]   # (its x: measured times)
    again = named(views.draw_figures(page), figures)             # drawn already: nothing to draw
    assert all(is_skip(again[n]) for n in views.FIGURE_OUTPUTS) and 'data-figures="drawn"' in again["counters"]
    drain(cb.run_stream(page, PROMPT, *values(seed=1)))
    cb.show_round(page, 0)                                    # the slider drew a round's figures meanwhile
    assert not page.figures_stale
    assert all(is_skip(v) for v in views.draw_figures(page)[:len(views.FIGURE_OUTPUTS)])
    page.streaming = True                                     # a new decode streams: its counters stay as sent
    assert all(is_skip(v) for v in views.draw_figures(page))


def test_stop_cancels_within_one_round():
    session = Session()
    gen = cb.run_stream(session, PROMPT, *values())
    next(gen), next(gen), next(gen)                                  # start, round 0, round 1
    status, _ = cb.stop_run(session)
    assert status == cb.stop_pending() and session.stop_requested     # the stream says it stopped, not Stop
    rest = drain(gen)
    assert session.run.stopped and len(session.run.records) == 3    # the round in flight, then stop
    assert "stopped" in rest[-1]["status"] and session.status() == "stopped"


def test_a_run_abandoned_by_the_browser_leaves_a_paused_decode():
    session = Session()
    gen = cb.run_stream(session, PROMPT, *values())
    next(gen), next(gen)
    gen.close()                                                      # what the server does on disconnect
    assert not session.streaming and session.status() == "paused"
    drain(cb.run_stream(session, PROMPT, *values()))                 # Run picks the decode up again
    assert session.status() == "done" and session.run.records[0].kind == "prefill"


def test_step_advances_one_round_and_run_continues_the_same_decode():
    full = Session()
    drain(cb.run_stream(full, PROMPT, *values()))
    session = Session()
    for r in range(2):
        out = named(cb.step_once(session, PROMPT, *values()))
        assert len(session.run.records) == r + 1 and f"round {r}" in out["status"]
    assert session.status() == "paused"
    drain(cb.run_stream(session, PROMPT, *values()))
    assert session.run.tokens == full.run.tokens and len(session.run.records) == len(full.run.records)
    assert [r.winner for r in session.run.records] == [r.winner for r in full.run.records]


def test_step_with_changed_settings_starts_over_and_stop_while_paused_cancels_now():
    session = Session()
    cb.step_once(session, PROMPT, *values())
    cb.step_once(session, PROMPT, *values())
    cb.step_once(session, PROMPT, *values(k=1))
    assert len(session.run.records) == 1 and session.run.settings["k"] == 1
    status, counters = cb.stop_run(session)
    assert status.startswith("Stopped") and session.run.stopped and 'data-status="stopped"' in counters
    assert cb.stop_run(session)[0] == "Nothing is running."


@pytest.mark.parametrize("prompt, settings, message", [
    ("   ", {}, "prompt is empty"),
    (" ".join(["apples"] * 600), {}, "context"),
    (PROMPT, dict(max_new_tokens=20), "multiple of block_size"),
    (PROMPT, dict(tau_add=0), "tau_add"),
])
def test_bad_input_shows_a_message_and_the_session_survives(prompt, settings, message):
    session = Session()
    out = drain(cb.run_stream(session, prompt, *values(**settings)))[-1]
    assert "Error" in out["status"] and message in out["status"]
    assert session.live is None and not session.streaming
    assert message in named(cb.step_once(session, prompt, *values(**settings)))["status"]
    drain(cb.run_stream(session, PROMPT, *values()))                 # and it still works afterwards
    assert session.status() == "done"


def test_scrub_play_and_reset():
    session = Session()
    drain(cb.run_stream(session, PROMPT, *values()))
    n = len(session.run.records)
    canvas, *_, answer = cb.show_round(session, 1)
    assert 'data-round="1"' in canvas and 'data-round="0"' in cb.show_round(session, -5)[0]
    assert answer == canvas_text(session.run, 1, session.names) != session.run.text    # the output at round 1
    assert cb.show_round(session, 10_000)[-1] == session.run.text == named(views.live_outputs(session, ""))["answer"]
    assert f'data-round="{n - 1}"' in cb.show_round(session, 10_000)[0]
    timer, button, playing = cb.toggle_play(session, False, n - 1)
    assert playing and timer.active
    slider, timer, _, playing, *view = cb.play_tick(session, True, n - 1)  # from the end: back to the start
    assert slider["value"] == 0 and 'data-round="0"' in view[0] and is_skip(timer) and playing
    assert view[-1] == canvas_text(session.run, 0, session.names)
    slider, timer, _, playing, *_ = cb.play_tick(session, True, n - 2)     # reaching the end stops the timer
    assert slider["value"] == n - 1 and not timer.active and not playing
    slider, timer, _, playing, *view = cb.play_tick(session, False, 3)     # a stray tick after Pause
    assert is_skip(slider) and not timer.active and all(is_skip(v) for v in view)
    out = named(cb.reset_session(session))
    assert session.run is None and "No rounds yet" in out["canvas"]


@pytest.mark.parametrize("fmt", ["JSON", "Parquet"])
def test_export_then_load_replays_the_same_trace(fmt, monkeypatch):
    session = Session()
    assert "nothing to export" in traces.export_trace(session, fmt)[1]
    drain(cb.run_stream(session, PROMPT, *values()))
    update, status = traces.export_trace(session, fmt)
    assert update["value"].endswith(".parquet" if fmt == "Parquet" else ".json") and "Exported" in status
    replay = Session()
    out = named(traces.load_trace(replay, update["value"]))
    assert replay.source == "replay" and replay.run.records == session.run.records
    assert out["status"].startswith("Replaying") and replay.status() == "replay"
    assert replay.names                                               # the trace's model is the loaded one
    assert cb.show_round(replay, 1)[0] == cb.show_round(Session(run=session.run, names=session.names), 1)[0]
    MODELS.clear()                                                    # its tokenizer is nowhere: show ids
    without = Session()
    traces.load_trace(without, update["value"])
    assert not without.names and "#" in cb.show_round(without, 1)[0]


def test_corrupt_foreign_or_misnamed_trace_files_are_refused(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "foreign.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / "trace.txt").write_text("{}")
    session = Session()
    for name in ("bad.json", "foreign.json", "bad.parquet", "trace.txt"):
        out = named(traces.load_trace(session, str(tmp_path / name)))
        assert "Error" in out["status"] and name in out["status"]
    assert session.run is None


def test_model_directory_errors_keep_the_session_model(tiny_model, tmp_path):
    session = Session()
    info, status, box = model_panel.pick_model(session, str(tmp_path / "nowhere"))
    assert "Error" in status and "still uses" in status and session.model is None
    assert box["value"] == str(MODELS.default)                        # the box shows the model Run uses again
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{broken")
    assert "Error" in model_panel.pick_model(session, str(tmp_path / "broken"))[1] and session.model is None
    assert "Error" in model_panel.pick_model(session, None)[1] and session.model is None
    assert is_skip(model_panel.pick_model(session, str(tiny_model))[1])          # the model it has: nothing to say
    other = save_tiny_model_dir(tmp_path / "other", seed=1)
    info, status, box = model_panel.pick_model(session, str(other))
    assert "now decodes with `other`" in status and "M parameters" in info and session.model == str(other)
    assert safetensors_param_count(other) == MODELS.get(other).n_params


def test_a_space_only_loads_the_bundled_models(tiny_model, monkeypatch):
    from app.serving.models import MODELS_DIR, check_model_dir
    monkeypatch.delenv("LOPA_MODEL_DIRS", raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/lopa-explorer")
    session = Session()
    info, status, box = model_panel.pick_model(session, str(tiny_model))
    assert "only loads models from `assets/models`" in status and session.model is None
    check_model_dir(MODELS_DIR / "sure-gsm-dllm")  # the bundled model stays loadable
    with pytest.raises(ValueError):
        check_model_dir(MODELS_DIR / ".." / ".." / "lopa")  # no escaping by ".."
    monkeypatch.setenv("LOPA_MODEL_DIRS", str(tiny_model.parent))  # an operator may widen it
    check_model_dir(tiny_model)
    monkeypatch.setenv("LOPA_MODEL_DIRS", "*")
    check_model_dir(Path("/"))


def test_comparison_streams_both_sides_and_summarises():
    session = Session()
    outs = [dict(zip(COMPARE_OUTPUTS, o)) for o in compare_stream(session, PROMPT, "D2F vanilla (k = 0)", *values())]
    base, lopa = session.compare
    assert base.settings["k"] == 0 and lopa.settings["k"] == 3 and not base.stopped and not lopa.stopped
    assert 'data-status="done"' in outs[-1]["base_counters"] and 'data-status="done"' in outs[-1]["lopa_counters"]
    assert "Speed-up of LoPA" in outs[-1]["compare_summary"] and outs[-1]["lopa_answer"] == lopa.text
    assert len(outs) >= max(len(base.records), len(lopa.records))
    one_token = dict(zip(COMPARE_OUTPUTS, list(compare_stream(Session(), PROMPT, "one token per round", *values()))[-1]))
    assert "Speed-up" in one_token["compare_summary"] and "lopa-diff" in one_token["compare_diff"]
    error = list(compare_stream(Session(), PROMPT, "D2F vanilla (k = 0)", *values(k=0)))[-1]
    assert "Error" in error[0] and "k is 0" in error[0]


def test_comparison_stops_on_request():
    session = Session()
    gen = compare_stream(session, PROMPT, "D2F vanilla (k = 0)", *values())
    next(gen)
    assert stop_compare(session) == cb.stop_pending() and session.stop_requested
    last = list(gen)[-1]
    assert "stopped early" in last[0] and session.compare[1].stopped


def test_presets_and_examples():
    updates = settings_panel.apply_preset("paper: gsm8k")
    by_name = dict(zip(SETTING_NAMES, updates))
    assert by_name["k"]["value"] == 14 and by_name["tau_conf"]["value"] == 0.9 and is_skip(by_name["max_new_tokens"])
    prompts = example_prompts()
    assert len(prompts) >= 4 and all(isinstance(p, str) and p for p in prompts)


def test_warm_model_loads_lazily_and_describes_it():
    MODELS.clear()
    assert "not loaded yet" in MODELS.describe()
    assert "M parameters" in model_panel.warm_model(Session()) and MODELS.peek() is not None


def test_compare_decodes_the_baseline_with_the_chosen_peer_rule():
    """Each peer's rule is a baseline of Compare: its side decodes with that rule alone (k = 0, its knob as the
    settings panel has it), exactly as the engine does under those settings; D2F's side keeps D2F's threshold."""
    from app.panels.compare import BASELINES
    from lopa import DecodeSettings
    from visualizations.glossary import PEER_RULES, rule_name
    assert [BASELINES[f"{rule_name(rule)} (k = 0)"] for rule in PEER_RULES] == [f"d2f-{rule}" for rule in PEER_RULES]
    for rule in PEER_RULES:
        session = Session()
        label = f"{rule_name(rule)} (k = 0)"
        out = dict(zip(COMPARE_OUTPUTS, list(compare_stream(session, PROMPT, label, *values(eb_gamma=0.7)))[-1]))
        base, lopa = session.compare
        assert (base.settings["commit"], base.settings["k"]) == (rule, 0), rule
        assert (lopa.settings["commit"], lopa.settings["k"]) == ("threshold", 3)
        assert base.settings["eb_gamma"] == 0.7 and base.settings["confidence"] == ("neg_entropy" if rule == "eb" else "max_prob")
        loaded = MODELS.get(MODELS.folder(session.model))
        assert base.tokens == loaded.decoder(DecodeSettings.from_dict(base.settings)).run(PROMPT).tokens, rule
        assert f'data-counter="commit" data-value="{rule_name(rule)}"' in out["base_counters"]
        assert label in out["compare_summary"] and "token-forwards" in out["compare_summary"]
    # LoPA over a peer's rule against D2F: each side says which rule it committed by
    session = Session()
    out = dict(zip(COMPARE_OUTPUTS, list(compare_stream(session, PROMPT, "D2F vanilla (k = 0)",
                                                        *values(commit="factor", factor_f=1.5)))[-1]))
    base, lopa = session.compare
    assert base.settings["commit"] == "threshold" and (lopa.settings["commit"], lopa.settings["factor_f"]) == ("factor", 1.5)
    assert "LoPA over Fast-dLLM factor (k = 3)" in out["compare_summary"]
    assert [e.note for e in session.runs.entries.values()][-1] == "LoPA over Fast-dLLM factor (k = 3)"
