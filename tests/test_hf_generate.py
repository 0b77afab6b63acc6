"""transformers' generate() with LoPA (lopa.hf), offline on the bundled model folder (the same
format as a Hub repo): the custom_generate path decodes the same tokens as `lopa generate`, its
streamers see every round, plain generate() refuses with the guard's message, and the folder's
code runs only with trust_remote_code=True, never from our own loader."""

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TextDiffusionStreamer

from lopa import DecodeSettings, ModelSpec
from lopa.cli import main
from lopa.hf import GUARD_MESSAGE, LopaGenerationConfig, RoundStreamer, add_transformers_support
from lopa.models import DEFAULT_MODEL, load
from lopa.resolution import settings_for_model
from lopa.trace import RunResult

ROOT = Path(__file__).resolve().parent.parent
PATH = str(DEFAULT_MODEL)
QUESTION = "Tom has 23 apples. He gives 7 to Ann. How many apples does Tom have now?"
TRUST = dict(custom_generate=PATH, trust_remote_code=True)


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(PATH)


@pytest.fixture(scope="module")
def plain():
    return AutoModelForCausalLM.from_pretrained(PATH)                       # no trust_remote_code


@pytest.fixture(scope="module")
def trusted():
    return AutoModelForCausalLM.from_pretrained(PATH, trust_remote_code=True)  # generate() is LoPA's


def prompt(tok, question=QUESTION):
    template = json.loads((DEFAULT_MODEL / "config.json").read_text())["lopa"]["prompt_template"]
    return tok(template.format(prompt=question), return_tensors="pt")


def cli_run(tmp_path, flags) -> RunResult:
    trace = tmp_path / "cli.json"
    assert main(["generate", "--prompt", QUESTION, "--device", "cpu", "--trace", str(trace), *flags]) == 0
    return RunResult.load(trace)


@pytest.mark.parametrize("flags, kwargs", [
    ([], {}),                                                          # both fill unset settings the same way
    (["--k", "2", "--order", "left_to_right", "--tau-conf", "0.8", "--confidence", "max_prob", "--block-size", "16",
      "--max-new-tokens", "64"],
     dict(k=2, order="left_to_right", tau_conf=0.8, confidence="max_prob", block_size=16, max_new_tokens=64)),
    (["--temperature", "0.7", "--seed", "3", "--max-new-tokens", "64"],
     dict(do_sample=True, temperature=0.7, seed=3, max_new_tokens=64)),
], ids=["defaults", "settings", "sampled"])
def test_custom_generate_decodes_the_same_tokens_as_lopa_generate(plain, tok, tmp_path, flags, kwargs):
    cli = cli_run(tmp_path, flags)
    inputs = prompt(tok)
    out = plain.generate(**inputs, **TRUST, **kwargs, return_dict_in_generate=True)
    assert inputs["input_ids"][0].tolist() == cli.prompt_ids
    assert out.sequences[0, len(cli.prompt_ids):].tolist() == cli.useful_tokens
    assert out.traces[0].settings == cli.settings
    assert out.tokens_per_forward == [cli.metrics()["tpf_useful"]]


def test_a_model_loaded_with_trust_remote_code_generates_with_lopa(trusted, tok, tmp_path):
    assert isinstance(trusted.generate, functools.partial)     # transformers replaced generate with the folder's
    cli = cli_run(tmp_path, ["--k", "3", "--max-new-tokens", "64"])
    config = LopaGenerationConfig.from_settings(DecodeSettings.from_dict(cli.settings))
    before = (config.to_dict(), trusted.generation_config.to_dict())
    out = trusted.generate(prompt(tok)["input_ids"], generation_config=config)     # positional ids, as usual
    assert out[0, len(cli.prompt_ids):].tolist() == cli.useful_tokens
    assert (config.to_dict(), trusted.generation_config.to_dict()) == before       # neither config changed
    assert trusted.config._attn_implementation == "sdpa"                           # the model's attention given back


def test_plain_generate_refuses_and_says_how(plain, tok):
    with pytest.raises(ValueError) as err:
        plain.generate(**prompt(tok), max_new_tokens=8)
    assert GUARD_MESSAGE in str(err.value)
    assert "trust_remote_code=True" in GUARD_MESSAGE and "custom_generate" in GUARD_MESSAGE


def test_the_folder_code_runs_only_with_trust_remote_code(plain, tok, monkeypatch):
    """Never assumed: not for a local folder, not by our loader even when it is given the flag."""
    import transformers.generation.utils as generation_utils

    def never(*args, **kwargs):
        raise AssertionError("custom_generate/generate.py was fetched or run")
    monkeypatch.setattr(generation_utils, "get_cached_module_file", never)
    monkeypatch.setattr(generation_utils, "get_class_in_module", never)
    for trust in (False, None):          # None would ask on a terminal; a test has none, so it refuses
        with pytest.raises(ValueError, match="trust_remote_code=True"):
            plain.generate(**prompt(tok), custom_generate=PATH, trust_remote_code=trust)
    assert not isinstance(plain.generate, functools.partial)
    for loaded in (load(device="cpu"), load(PATH, device="cpu", trust_remote_code=True)):
        assert not isinstance(loaded.model.generate, functools.partial)
        assert loaded.decoder(DecodeSettings(k=2, max_new_tokens=32)).run(QUESTION).records


@pytest.mark.timeout(300)
def test_without_lopa_the_folder_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['lopa'] = None; from transformers import AutoModelForCausalLM; "
            f"AutoModelForCausalLM.from_pretrained({PATH!r}, trust_remote_code=True)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0 and "needs the `lopa` package" in done.stderr and "pip install lopa-explorer" in done.stderr


def test_round_streamer_sees_every_round(plain, tok):
    streamer, seen = RoundStreamer(on_round=lambda record, draft: None), []
    streamer.on_round = lambda record, draft: seen.append((record.round, list(streamer.tokens)))
    inputs = prompt(tok)
    out = plain.generate(**inputs, **TRUST, k=3, max_new_tokens=64, streamer=streamer, return_dict_in_generate=True)
    run = out.traces[0]
    assert [r.round for r in streamer.records] == [r.round for r in run.records] == [s[0] for s in seen]
    assert len(streamer.drafts) == len(run.records) and streamer.ended
    assert streamer.prompt == inputs["input_ids"][0].tolist() and streamer.tokens == run.useful_tokens
    confirmed = [len(tokens) for _, tokens in seen]
    assert confirmed == sorted(confirmed) and 0 < confirmed[-1] <= len(run.useful_tokens)


def test_text_diffusion_streamer_prints_the_answer(plain, tok):
    class Captured(TextDiffusionStreamer):
        text, drafts = "", 0

        def put_draft(self, value, **kwargs):
            self.drafts += 1
            super().put_draft(value, **kwargs)

        def on_finalized_text(self, text, stream_end=False):
            self.text += text

    streamer = Captured(tok, skip_prompt=True, skip_special_tokens=True)
    out = plain.generate(**prompt(tok), **TRUST, k=2, max_new_tokens=64, streamer=streamer, return_dict_in_generate=True)
    run = out.traces[0]
    assert streamer.drafts == len(run.records)
    assert streamer.text.strip() == tok.decode(run.useful_tokens, skip_special_tokens=True).strip() != ""


def test_a_padded_batch_decodes_each_row_as_alone(plain, tok):
    questions = [QUESTION, "Mia has 4 eggs. She buys 5 more. How many eggs does Mia have now?"]
    template = json.loads((DEFAULT_MODEL / "config.json").read_text())["lopa"]["prompt_template"]
    tok.padding_side = "left"
    batch = tok([template.format(prompt=q) for q in questions], return_tensors="pt", padding=True)
    out = plain.generate(**batch, **TRUST, k=2, max_new_tokens=32)
    for b, question in enumerate(questions):
        alone = plain.generate(**prompt(tok, question), **TRUST, k=2, max_new_tokens=32)[0].tolist()
        generated = alone[int(batch["attention_mask"][b].sum()):]
        padding = [tok.pad_token_id] * (out.shape[1] - batch["input_ids"].shape[1] - len(generated))
        assert out[b].tolist() == batch["input_ids"][b].tolist() + generated + padding


def test_arguments_lopa_cannot_honour_are_refused(plain, tok):
    with pytest.raises(TypeError, match="kk"):
        plain.generate(**prompt(tok), **TRUST, kk=3)
    with pytest.raises(ValueError, match="logits_processor"):
        plain.generate(**prompt(tok), **TRUST, logits_processor=[lambda ids, scores: scores])
    with pytest.raises(ValueError, match="multiple of block_size"):
        plain.generate(**prompt(tok), **TRUST, max_new_tokens=100)


def test_generation_config_maps_to_and_from_decode_settings():
    s = DecodeSettings(k=7, tau_conf=0.8, tau_add=0.3, tau_act=0.9, block_size=16, max_new_tokens=64, commit="top1",
                       confidence="margin", attention="full", temperature=0.5, seed=4, order="random", order_seed=2,
                       branch_score="min")
    assert LopaGenerationConfig.from_settings(s).to_settings() == s
    assert LopaGenerationConfig.from_dict(LopaGenerationConfig.from_settings(s).to_dict()).to_settings() == s
    assert LopaGenerationConfig.from_settings(s.replace(temperature=0.0)).to_settings().temperature == 0.0
    assert LopaGenerationConfig(temperature=0.7).to_settings().temperature == 0.0      # counts only with do_sample
    spec = ModelSpec(mask_token_id=1, eos_token_ids=(0,), logit_shift=True, block_size=16, attention="full")
    assert LopaGenerationConfig(max_new_tokens=32).to_settings(spec) == settings_for_model(spec, max_new_tokens=32) \
        == DecodeSettings(k=4, block_size=16, attention="full", max_new_tokens=32)
    with pytest.raises(ValueError, match="num_beams"):
        LopaGenerationConfig(num_beams=2).to_settings()


def test_the_readme_snippet_runs_and_matches_the_engine(monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    snippet = readme.split("<!-- hf-snippet -->")[1].split("```python")[1].split("```")[0]
    monkeypatch.chdir(ROOT)
    namespace = {}
    exec(snippet, namespace)                                  # the README's own words, run as written
    loaded = load(device="cpu")
    engine = loaded.decoder(settings_for_model(loaded.spec, k=4, max_new_tokens=64)).run(QUESTION)
    assert namespace["answer"] == engine.text != ""
    assert namespace["answer"] in capsys.readouterr().out


def test_hf_export_gives_another_model_folder_the_same(tmp_path):
    from tiny import save_tiny_model_dir
    path = save_tiny_model_dir(tmp_path / "tiny-dllm")
    assert main(["hf-export", str(path)]) == 0
    first = (path / "generation_config.json").read_text()
    assert json.loads(first)["bad_words_ids"] == GUARD_MESSAGE and json.loads(first)["eos_token_id"] == 1
    assert (path / "custom_generate" / "generate.py").read_bytes() == \
        (DEFAULT_MODEL / "custom_generate" / "generate.py").read_bytes()
    assert main(["hf-export", str(path)]) == 0 and (path / "generation_config.json").read_text() == first
    with pytest.raises(ValueError, match="masked diffusion LM"):
        AutoModelForCausalLM.from_pretrained(path).generate(torch.tensor([[3, 4, 5]]), max_new_tokens=4)
    ids = torch.tensor([[13, 14, 5, 6, 15]])
    out = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True).generate(ids, k=2, max_new_tokens=16)
    loaded = load(path, device="cpu")
    engine = loaded.decoder(settings_for_model(loaded.spec, k=2, max_new_tokens=16)).run(ids[0])
    assert out[0, 5:].tolist() == engine.useful_tokens


def test_hf_export_refuses_checkpoints_transformers_loads_through_remote_code(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "Dream"}))
    with pytest.raises(ValueError, match="remote modeling code"):
        add_transformers_support(tmp_path)


def test_the_bundled_folder_is_exported_as_the_helper_would(tmp_path):
    """A retrain that rewrote generation_config.json without the guard fails here: rerun
    `python -m lopa hf-export assets/models/sure-gsm-dllm` (lopa.train's export does it itself)."""
    copy = tmp_path / DEFAULT_MODEL.name
    copy.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEFAULT_MODEL / name, copy / name)
    add_transformers_support(copy)
    assert (copy / "generation_config.json").read_text() == (DEFAULT_MODEL / "generation_config.json").read_text()
    assert sorted(p.name for p in (DEFAULT_MODEL / "custom_generate").iterdir() if p.name != "__pycache__") == \
        ["generate.py", "requirements.txt"]
