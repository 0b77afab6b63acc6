"""The app served in-process and driven through its API with gradio_client: a streamed run, the
final result, a trace round trip (export, then load), per-session state and error messages."""

import json
import re
from pathlib import Path

import pytest
from gradio_client import Client, handle_file
from servers import free_port
from tiny import app_model

from app import build_demo
from app.serving.session import APP_DEFAULTS, BACKEND_NAMES, SETTING_NAMES

pytestmark = pytest.mark.timeout(300)                 # starts the app on a local port

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32, confidence="max_prob",
                attention="block_causal", temperature=0.0, seed=0)
ARGS = [SETTINGS[n] for n in SETTING_NAMES]
TIMEOUT_S = 60


def plain(out):
    """The values in a UI endpoint's outputs: the app sends every output as an update
    ({"value": ...}; app.serving.updates.as_updates says why), a skipped one as a bare update (None here)."""
    def one(v):
        if isinstance(v, dict) and v.get("__type__") == "update":
            return v.get("value")
        return v
    return tuple(one(v) for v in out) if isinstance(out, (tuple, list)) else one(out)


def predict(client, *args, **kwargs):
    return plain(client.predict(*args, **kwargs))


def rounds(counters_html: str) -> int:
    return int(re.search(r'data-rounds="(\d+)"', counters_html).group(1))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with app_model(tmp_path_factory):
        demo = build_demo()
        port = free_port()
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        yield demo, f"http://127.0.0.1:{port}/"
        demo.close()


@pytest.fixture(scope="module")
def url(served):
    return served[1]


@pytest.fixture
def client(url):
    return Client(url, verbose=False)


def stream(client, *args, api_name="/run"):
    """Submit and collect every streamed output (each a tuple); TIMEOUT_S only guards a hang."""
    job = client.submit(*args, api_name=api_name)
    outs = []
    for out in job:
        outs.append(plain(out))
    job.result(timeout=TIMEOUT_S)
    return outs, job


def final(job):
    return plain(job.result(timeout=TIMEOUT_S))


@pytest.mark.usefixtures("every_round")                     # the server is this process: it sends every round
def test_streamed_run_then_final_result(client):
    outs, job = stream(client, PROMPT, *ARGS)
    seen = [rounds(o[1]) for o in outs]
    assert seen == sorted(seen) and seen[-1] >= 3 and len(set(seen)) >= 3        # counters advance per round
    last = final(job)
    assert last[0].startswith("Done") and rounds(last[1]) == seen[-1]
    assert 'data-status="done"' in last[1]
    assert "lopa-canvas" in last[4] and "lopa-branches" in last[5]              # the final state is drawn
    chart = last[7]
    assert chart["type"] == "plotly" and len(json.loads(chart["plot"])["data"][0]["x"]) == seen[-1]


def test_trace_round_trip_through_the_api(client, tmp_path):
    run_final = final(stream(client, PROMPT, *ARGS)[1])
    for fmt in ("JSON", "Parquet"):
        file_update, status = predict(client, fmt, api_name="/export_trace")
        path = file_update["value"] if isinstance(file_update, dict) else file_update
        assert "Exported" in status and path.endswith(".json" if fmt == "JSON" else ".parquet")
        replay = Client(client.src, verbose=False)                 # another session, no model needed
        out = predict(replay, handle_file(path), api_name="/load_trace")
        assert out[0].startswith("Replaying") and rounds(out[1]) == rounds(run_final[1])
        assert 'data-status="replay"' in out[1] and out[3] == run_final[3]  # same answer text


def test_run_names_its_settings_and_one_left_out_takes_the_models_own(client):
    """/run lists its settings by name, each None by default (unset), and points to /decode; a caller
    that leaves them out decodes with the picked model's own values (this model's block size is 8, not
    the bundled model's 32), one it names with its value."""
    from app.serving.model_cache import MODELS
    from app.serving.request import Request
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    for name in ("/run", "/step"):
        parameters = endpoints[name]["parameters"]
        assert [p["parameter_name"] for p in parameters] == ["prompt", *SETTING_NAMES, *BACKEND_NAMES]
        assert all(p["parameter_has_default"] and p["parameter_default"] is None for p in parameters[1:-2])
    assert "/decode" in endpoints["/run"]["description"]
    own = Request().resolve(MODELS.get(str(MODELS.default)).spec).to_dict()
    for asked, expected in [({}, own), ({"k": 2}, {**own, "k": 2})]:
        assert final(client.submit(prompt=PROMPT, **asked, api_name="/run"))[0].startswith("Done")
        file_update, _ = predict(client, "JSON", api_name="/export_trace")
        settings = json.loads(open(file_update["value"] if isinstance(file_update, dict) else file_update).read())["settings"]
        assert settings == expected and settings["block_size"] == 8 != APP_DEFAULTS["block_size"]


def test_step_then_stop_and_per_session_state(client, url):
    first = predict(client, PROMPT, *ARGS, api_name="/step")
    second = predict(client, PROMPT, *ARGS, api_name="/step")
    assert rounds(first[1]) == 1 and rounds(second[1]) == 2 and "Paused" in second[0]
    other = Client(url, verbose=False)                              # a second user sees none of it
    assert predict(other, "JSON", api_name="/export_trace")[1].startswith("**⚠ Error:**")
    status, counters = predict(client, api_name="/stop")
    assert status.startswith("Stopped") and 'data-status="stopped"' in counters


def test_bad_inputs_come_back_as_messages(client):
    empty = predict(client, "  ", *ARGS, api_name="/run")
    assert "Error" in empty[0] and "prompt is empty" in empty[0]
    bad = dict(SETTINGS, max_new_tokens=30)
    out = predict(client, PROMPT, *[bad[n] for n in SETTING_NAMES], api_name="/run")
    assert "multiple of block_size" in out[0]
    info, status, box = predict(client, "/no/such/model", api_name="/pick_model")
    assert "Error" in status and "still uses" in status
    assert final(stream(client, PROMPT, *ARGS)[1])[0].startswith("Done")   # still serving


def test_comparison_through_the_api(client):
    outs, job = stream(client, PROMPT, "D2F vanilla (k = 0)", *ARGS, api_name="/compare")
    last = final(job)
    assert len(outs) >= 3 and last[0].startswith("Done")
    assert 'data-status="done"' in last[1] and 'data-status="done"' in last[4]
    assert "Speed-up of LoPA" in last[7]


def _rss_mb() -> float:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) / 1024


@pytest.mark.parametrize("case", ["huge block size", "many blocks", "script in kind", "string settings",
                                  "deep nesting", "pickle as json", "not utf-8"])
def test_a_hostile_trace_is_refused_within_a_memory_bound_and_the_app_still_serves(client, tmp_path, case):
    """Each bad trace comes back as a message (never "the upstream app has raised an exception"),
    the server's memory does not jump, and the same session then decodes normally."""
    run_final = final(stream(client, PROMPT, *ARGS)[1])
    file_update, _ = predict(client, "JSON", api_name="/export_trace")
    data = json.loads(open(file_update["value"] if isinstance(file_update, dict) else file_update).read())
    if case == "huge block size":
        data["settings"].update(block_size=1 << 30, max_new_tokens=1 << 30)
    elif case == "many blocks":
        data["records"][-1]["block_states"] = ["active_full"] * 200_000
    elif case == "script in kind":
        data["records"][0]["kind"] = '<img src=x onerror="alert(1)">'
    elif case == "string settings":
        data["settings"] = "k=4"
    path = tmp_path / "bad.json"
    if case == "deep nesting":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "pickle as json":
        path.write_bytes(__import__("pickle").dumps({"format": "lopa-trace/1"}))
    elif case == "not utf-8":
        path.write_bytes(b"\xff\xfe" + json.dumps(data).encode())
    else:
        path.write_text(json.dumps(data))
    before = _rss_mb()
    out = predict(client, handle_file(str(path)), api_name="/load_trace")
    assert "Error" in out[0] and ("trace" in out[0] or "UTF-8" in out[0]), out[0]
    assert _rss_mb() - before < 200
    again = final(stream(client, PROMPT, *ARGS)[1])
    assert again[0].startswith("Done") and again[3] == run_final[3]


def test_the_typed_decode_endpoint_equals_lopa_generate(client, tmp_path):
    from app.serving.model_cache import MODELS
    from lopa.cli import main
    result = client.predict(prompt=PROMPT, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8,
                            max_new_tokens=32, confidence="max_prob", api_name="/decode")
    assert set(result) >= {"answer", "metrics", "trace", "settings"} and result["settings"]["k"] == 3
    trace = tmp_path / "cli.json"
    assert main(["generate", "--model", str(MODELS.default), "--prompt", PROMPT, "--k", "3", "--tau-conf", "0.12",
                 "--tau-add", "0.3", "--tau-act", "0.6", "--block-size", "8", "--max-new-tokens", "32",
                 "--confidence", "max_prob", "--trace", str(trace)]) == 0
    cli = json.loads(trace.read_text())
    assert result["trace"]["tokens"] == cli["tokens"] and result["answer"] == cli["text"]
    assert result["metrics"]["forwards"] == sum(r["kind"] != "final" for r in cli["records"])
    authors = client.predict(prompt=PROMPT, k=3, block_size=8, max_new_tokens=32, cache_schedule="authors",
                             api_name="/decode")
    assert authors["settings"]["cache_schedule"] == "authors" and authors["trace"]["settings"]["cache_schedule"] == "authors"
    # This random tiny model's argmax is the mask token at every open position: the authors' rule
    # leaves those masked and their loop would spin; the engine stops and says so.
    with pytest.raises(Exception, match="made no progress .* use mask_argmax='next_best'"):
        client.predict(prompt=PROMPT, k=3, block_size=8, max_new_tokens=32, mask_argmax="authors", api_name="/decode")
    with pytest.raises(Exception, match="k .lookahead branches. must be an integer"):
        client.predict(prompt=PROMPT, k=99, api_name="/decode")


def test_the_dependency_aware_rule_decodes_through_the_api_as_on_the_command_line(client, tmp_path):
    """commit=dawn (a window-wide rule reading the round's attention) through /decode: the CLI's tokens, and each
    round's reasons in the trace."""
    from app.serving.model_cache import MODELS
    from lopa.cli import main
    result = client.predict(prompt=PROMPT, k=2, block_size=8, max_new_tokens=16, commit="dawn", dawn_low=0.05,
                            api_name="/decode")
    assert result["settings"]["commit"] == "dawn"
    trace = tmp_path / "dawn.json"
    assert main(["generate", "--model", str(MODELS.default), "--prompt", PROMPT, "--k", "2", "--block-size", "8",
                 "--max-new-tokens", "16", "--commit", "dawn", "--dawn-low", "0.05", "--trace", str(trace)]) == 0
    cli = json.loads(trace.read_text())
    assert result["trace"]["tokens"] == cli["tokens"]
    assert all("commit_reasons" in r["extra"] for r in result["trace"]["records"] if r["kind"] == "round")


def test_the_docs_client_snippet_runs(url):
    page = (Path(__file__).resolve().parent.parent / "docs" / "explorer.md").read_text()
    snippet = page.split("<!-- client-snippet -->")[1].split("```python")[1].split("```")[0]
    namespace = {}
    exec(snippet.replace("http://localhost:7860/", url), namespace)      # the page's own words, run as written
    assert namespace["result"]["answer"] == namespace["result"]["trace"]["text"]


def test_runs_in_one_session_keep_its_components_fixed(served, client):
    """Gradio keeps a per-session copy of every component an event updated; app.serving.updates.as_updates
    keeps that copy from gaining a component per Run (the in-session memory growth of issue #18)."""
    demo = served[0]
    sizes = []
    for _ in range(4):
        final(stream(client, PROMPT, *ARGS)[1])
        client.predict(PROMPT, *ARGS, api_name="/step")          # a paused run: skips, then values
        sizes.append(len(demo.state_holder.session_data[client.session_hash].blocks_config.blocks))
    assert sizes[1] == sizes[-1], sizes
