"""Loading a local Hugging Face directory, the command line, and bad input."""

import json

import pytest
import torch
from tiny import EOS_ID, MASK_ID, save_tiny_model_dir, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings, RunResult
from lopa.cli import main
from lopa.models import load


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny"))


def test_load_reads_the_spec_from_the_checkpoint(model_dir):
    loaded = load(model_dir, device="cpu")
    assert loaded.spec.mask_token_id == MASK_ID and loaded.spec.eos_token_ids == (EOS_ID,)
    assert loaded.spec.logit_shift and loaded.spec.block_size == 8
    assert loaded.spec.prompt_template == "Question : {prompt} Answer :"
    result = loaded.decoder(DecodeSettings(k=2, block_size=8, max_new_tokens=16)).run("how many apples")
    assert result.records[0].kind == "prefill" and len(result.tokens) >= 8
    assert isinstance(result.text, str)


def test_cli_generate_prints_answer_metrics_and_writes_trace(model_dir, tmp_path, capsys):
    trace = tmp_path / "run.json"
    code = main(["generate", "--model", str(model_dir), "--prompt", "how many apples does Tom have ?",
                 "--k", "3", "--max-new-tokens", "16", "--trace", str(trace)])
    out = capsys.readouterr().out
    assert code == 0 and "tpf_useful" in out and "tpf_paper" in out and "forwards" in out
    assert json.loads(trace.read_text())["format"] == "lopa-trace/2"


def test_cli_generate_decodes_with_a_peer_s_rule_and_prints_the_cost_counters(model_dir, tmp_path, capsys):
    trace = tmp_path / "run.json"
    code = main(["generate", "--model", str(model_dir), "--prompt", "how many apples does Tom have ?", "--k", "2",
                 "--commit", "frechet", "--frechet-margin", "-0.5", "--max-new-tokens", "16", "--trace", str(trace)])
    out = capsys.readouterr().out
    assert code == 0 and "token_forwards" in out and "latency_s" in out and "device           cpu" in out
    settings = json.loads(trace.read_text())["settings"]
    assert (settings["commit"], settings["frechet_margin"], settings["k"]) == ("frechet", -0.5, 2)


def test_cli_generate_decodes_with_lookahead_chains_and_the_trace_carries_them(model_dir, tmp_path):
    trace = tmp_path / "run.json"
    assert main(["generate", "--model", str(model_dir), "--prompt", "how many apples does Tom have ?", "--k", "3",
                 "--lookahead-depth", "3", "--max-new-tokens", "16", "--trace", str(trace)]) == 0
    run = RunResult.load(trace)
    assert run.settings["lookahead_depth"] == 3
    rounds = [r for r in run.records if r.kind == "round" and r.lookahead_positions]
    assert rounds and all(len(r.chain_kept) == len(r.lookahead_positions) for r in rounds)


def test_cli_help_lists_the_settings(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["generate", "--help"])
    assert stop.value.code == 0
    assert "--tau-conf" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--tau-conf", "0"], "tau_conf must be in (0, 1]"),
    (["--tau-add", "1.5"], "tau_add must be in (0, 1]"),
    (["--k", "-1"], "k (lookahead branches) must be an integer in 0..32"),
    (["--k", "33"], "0..32"),
    (["--block-size", "12", "--max-new-tokens", "32"], "multiple of block_size"),
    (["--commit", "eb", "--confidence", "max_prob"], "commit=eb reads each position's entropy from Conf: set "
                                                     "confidence=neg_entropy"),
    (["--stable-js", "1"], "stable_js must be in [0, 0.693147]"),
    (["--factor-f", "0"], "factor_f must be in (0, 100]"),
])
def test_cli_refuses_bad_settings_with_a_clear_message(model_dir, capsys, flags, message):
    code = main(["generate", "--model", str(model_dir), "--prompt", "hi", *flags])
    assert code == 2 and message in capsys.readouterr().err


def test_cli_refuses_missing_model(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "hi"]) == 2
    assert "no model at" in capsys.readouterr().err


def test_a_bundled_model_loads_by_its_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                 # no assets/ here: the name alone must find the folder
    assert load("sure-gsm-dllm").spec.name == "sure-gsm-dllm"
    assert load("tiny-gsm-dllm").spec.name == "sure-gsm-dllm"      # its name before it was renamed
    with pytest.raises(FileNotFoundError, match="bundled model's name"):
        load("no-such-dllm")
    with pytest.raises(FileNotFoundError):
        load("../sure-gsm-dllm")               # a name, never a path


def test_empty_and_oversized_prompts_are_refused(model_dir):
    loaded = load(model_dir)
    decoder = loaded.decoder(DecodeSettings(block_size=8, max_new_tokens=16))
    with pytest.raises(ValueError, match="prompt is empty"):
        next(decoder.stream("   "))
    with pytest.raises(ValueError, match="exceeds|context"):
        next(decoder.stream(" ".join(["apples"] * 600)))


def test_model_without_mask_token_is_refused(tmp_path):
    path = save_tiny_model_dir(tmp_path / "nomask", with_spec=False, with_mask=False)
    with pytest.raises(ValueError, match="no mask token"):
        load(path)


def test_settings_validation_messages():
    with pytest.raises(ValueError, match="block_size"):
        DecodeSettings(block_size=64, max_new_tokens=32)
    with pytest.raises(ValueError, match="confidence"):
        DecodeSettings(confidence="vibes")
    with pytest.raises(ValueError, match="temperature"):
        DecodeSettings(temperature=-1)
    with pytest.raises(ValueError, match="mask token"):
        tiny_spec(mask_token_id=-1)


def test_prompt_ids_longer_than_context_are_refused():
    decoder = Decoder(tiny_qwen2(), tiny_spec(max_context=64), DecodeSettings(block_size=8, max_new_tokens=32))
    with pytest.raises(ValueError, match="Shorten the prompt to at most 32 tokens"):
        next(decoder.stream(torch.arange(40) % 10 + 3))
