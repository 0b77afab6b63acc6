"""Hostile values in every input of the app's own endpoints: a string, NaN, inf, None, a list and a
100 KB string in any setting, backend, study, round, format, run or token input come back as a
message that names the input and quotes at most a short prefix of the value; nothing reaches the
engine or Gradio's own checks (which answer a traceback, or echo the whole value). The served app is
driven with raw JSON (NaN and inf included), the way any HTTP client can call it."""

import json

import httpx
import pytest
from servers import free_port
from tiny import LIVELY, app_model

from app import build_demo
from app.panels import forks, traces
from app.panels.compare import COMPARE_OUTPUTS, compare_stream
from app.panels.round_view import callbacks as cb
from app.panels.studies import callbacks as studies
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session
from lopa.cli import main

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::UserWarning")]

BIG = "9" * 100_000
HOSTILE = {"text": "abc", "nan": float("nan"), "inf": float("inf"), "none": None, "list": [1, 2], "big": BIG}
GOOD = {**APP_DEFAULTS, **LIVELY, "max_new_tokens": 16}
INPUTS = (*SETTING_NAMES, "backend", "workers")
LABELS = {"k": "k (lookahead branches)", "lookahead_depth": "lookahead depth", "workers": "workers (ranks"}
MAX_MESSAGE = 600


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def values(name=None, bad=None) -> list:
    out = [GOOD[n] for n in SETTING_NAMES] + [SINGLE, 2]
    if name is not None:
        out[INPUTS.index(name)] = bad
    return out


def refused(message: str, name: str) -> bool:
    """The message names the input and is short (no 100 KB echo)."""
    return "Error" in message and LABELS.get(name, name) in message and len(message) < MAX_MESSAGE


@pytest.mark.parametrize("kind", HOSTILE)
def test_run_step_and_compare_name_every_bad_input(model, kind):
    bad = HOSTILE[kind]
    for name in INPUTS:
        run = list(cb.run_stream(Session(), "hi", *values(name, bad)))[-1][0]
        step = cb.step_once(Session(), "hi", *values(name, bad))[0]
        compare = list(compare_stream(Session(), "hi", "D2F vanilla (k = 0)", *values(name, bad)))[-1][0]
        for endpoint, message in (("run", run), ("step", step), ("compare", compare)):
            if kind == "none" and name in SETTING_NAMES:     # a caller with no page leaves it unset: the model's own
                assert "Error" not in message, (endpoint, name, message[:300])
                continue
            assert refused(message, name), (endpoint, name, kind, message[:300])
    for message in (list(cb.run_stream(Session(), bad, *values()))[-1][0],
                    list(compare_stream(Session(), bad, "D2F vanilla (k = 0)", *values()))[-1][0]):
        assert kind in ("text", "none", "big") or refused(message, "prompt"), message[:300]
    baseline = list(compare_stream(Session(), "hi", bad, *values()))[-1]
    assert refused(baseline[0], "baseline") and len(baseline) == len(COMPARE_OUTPUTS)


@pytest.mark.parametrize("kind", HOSTILE)
def test_studies_rounds_formats_runs_and_tokens_name_every_bad_input(model, kind):
    bad, session = HOSTILE[kind], Session()
    for i, name in enumerate(("study", "problems", "random orders", "knob values per rule", "problem seed")):
        args = ["orders", 1, 1, 1, 15]
        args[i] = bad
        message = list(studies.run_study(studies.new_study_state(), *args))[-1][0]
        assert refused(message, name), (name, message[:300])
    with pytest.raises(Exception) as err:                        # gr.Error: the slider's endpoint has no status
        cb.show_round(session, bad)
    assert "round must be a whole number" in str(err.value) and len(str(err.value)) < MAX_MESSAGE
    assert refused(traces.export_trace(session, bad)[1], "format")
    assert len(cb.select_run(session, bad)[0]) < MAX_MESSAGE
    if kind != "none":                                           # None is "no token chosen yet"
        assert refused(list(forks.fill_first(session, {"run": "1", "round": 0, "position": 3}, bad))[-1][0], "token")


def test_the_served_endpoints_answer_raw_hostile_json_with_the_input_s_name(model):
    """Through HTTP: Gradio's own preprocessing never sees these values (the wiring passes them raw)."""
    demo, port = build_demo(), free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
    base = f"http://127.0.0.1:{port}/gradio_api/call/"

    def call(api: str, data: list) -> str:
        body = json.dumps({"data": data})                       # json allows NaN and Infinity
        event = httpx.post(base + api, content=body, headers={"content-type": "application/json"}, timeout=60)
        text = httpx.get(f"{base}{api}/{event.json()['event_id']}", timeout=300).text
        assert '"error": null' not in text, text[:300]                     # never a bare server error
        errors = [json.loads(line[6:])["error"] for line in text.splitlines() if line.startswith("data: {\"error")]
        assert not errors or len(errors[-1]) < MAX_MESSAGE, errors[-1][:300]
        assert not errors, errors[-1]                                      # (an error's message, for pytest.raises)
        last = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
        first = json.loads(last)[0]
        return str(first.get("value") if isinstance(first, dict) else first)

    try:
        for name, bad in (("tau_conf", float("nan")), ("block_size", "abc"), ("order", BIG), ("seed", float("inf")),
                          ("workers", [1]), ("backend", BIG), ("confidence", 7)):
            for api, prefix in (("run", ["hi"]), ("step", ["hi"]), ("compare", ["hi", "D2F vanilla (k = 0)"])):
                message = call(api, [*prefix, *values(name, bad)])
                assert refused(message, name), (api, name, message[:300])
        assert refused(call("run_study", ["orders", "abc", 1, 1, 15]), "problems")
        for bad in ("abc", float("nan"), [1], BIG, {"path": "/etc/passwd", "meta": {"_type": "gradio.FileData"}}):
            with pytest.raises(AssertionError, match="the trace file must be a .json or .parquet file uploaded"):
                call("load_trace", [bad])                       # an event: error with the input's message
        assert refused(call("run_study", [BIG, 1, 1, 1, 15]), "study")
        assert "Done" in call("run", ["hi", *values()])             # and it still serves
    finally:
        demo.close()


@pytest.mark.parametrize("argv", [["--order", BIG], ["--decoder", BIG], ["--preset", BIG], ["--executor", BIG],
                                  ["--backend", BIG], ["--workers", BIG], ["--k", BIG], ["--attention", "nope"]])
def test_the_cli_names_a_bad_flag_and_quotes_a_short_prefix(argv, capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--prompt", "x", *argv])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert argv[0] in error and len(error) < 300, error[:300]


def test_a_100_kb_subcommand_is_not_echoed(capsys):
    with pytest.raises(SystemExit):
        main([BIG])
    assert len(capsys.readouterr().err) < 600
