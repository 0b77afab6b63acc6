
import json

import torch

from lopa.tasks import layout
from lopa.train import evaluator
from lopa.train import trainer as T
from lopa.train.checkpoint import load_weights, update_model_card
from lopa.train.data import Batch, make_batch, number_dependencies, steps_for
from lopa.train.losses import blocked_by_mask, diffusion_loss, digit_ids, name_ids
from lopa.train.noise import block_mask_ratios
from lopa.train.recipe import Recipe, build_model

TINY = Recipe(layers=1, hidden=32, heads=2, kv_heads=1, ffn=64, batch=4, warmup=2, bf16=False)


def test_block_causal_mask():
    # prompt of 2, answer blocks 1 and 2, then one padding position
    block_id = torch.tensor([[0, 0, 1, 1, 2, 0]])
    valid = torch.tensor([[True] * 5 + [False]])
    m = layout.block_causal_mask(block_id, valid)[0, 0]
    assert m.shape == (6, 6)
    assert m[0].tolist() == [True, True, False, False, False, False]  # prompt never sees the answer
    assert m[2].tolist() == [True, True, True, True, False, False]  # block 1 sees itself both ways
    assert m[4].tolist() == [True] * 5 + [False]
    assert m[5].tolist() == [False] * 5 + [True]  # padded query: itself only


def test_noise_is_monotone_and_spares_the_prompt():
    block_id = torch.tensor([[0] * 5 + [1] * 32 + [2] * 32 + [3] * 32] * 64)
    valid = torch.ones_like(block_id, dtype=torch.bool)
    t = block_mask_ratios(block_id, valid, Recipe(), torch.Generator().manual_seed(0))
    assert (t[:, :5] == 0).all()
    per_block = t[:, [5, 37, 69]]  # [B, 3]
    assert (per_block[:, 1:] >= per_block[:, :-1]).all() and (per_block <= 1).all()
    assert (per_block[:, -1] > 0).all()


def _train(out, steps, resume=False, n_eval=0, log=lambda *_: None, **kw):
    # A small tokenizer placed where train() looks keeps the test fast (no GSM8K pass).
    if not (out / "tokenizer" / "tokenizer.json").exists():
        from lopa.train.tokenizer import build_tokenizer, save_tokenizer, training_texts
        save_tokenizer(build_tokenizer(training_texts(None, n_synthetic=300), vocab_size=400), out / "tokenizer")
    return T.train(out, TINY, minutes=None, steps=steps, seed=0, resume=resume, export_dir=out / "model",
                   ckpt_minutes=100, n_eval=n_eval, log=log, threads=1, **kw)


def test_smoke_train_export_and_resume(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model, tok = _train(tmp_path, steps=3, n_eval=2)
    spec = AutoConfig.from_pretrained(str(tmp_path / "model")).lopa
    assert spec == {"mask_token_id": tok.mask_token_id, "eos_token_ids": [tok.eos_token_id],
                    "pad_token_id": tok.pad_token_id, "logit_shift": True, "block_size": 32,
                    "prompt_template": "Question: {prompt}\nAnswer:", "attention": "block_causal",
                    # the problem family it was trained on, for `python -m lopa.bench --problem-seed`
                    "problems": {"name": "synthetic-gsm", "phrasing": TINY.phrasing, "max_steps": TINY.max_steps,
                                 "max_value": TINY.max_value}}
    assert (tmp_path / "model" / "custom_generate" / "generate.py").is_file()      # lopa.hf: generate() with LoPA
    assert "masked diffusion LM" in json.loads((tmp_path / "model" / "generation_config.json").read_text())["bad_words_ids"]
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    assert loaded.config.model_type == "qwen2" and loaded.config.eos_token_id == tok.eos_token_id
    tok2 = AutoTokenizer.from_pretrained(str(tmp_path / "model"))
    assert tok2.mask_token_id == spec["mask_token_id"]
    for name, p in model.state_dict().items():  # exported weights are the trained ones in bf16
        assert torch.equal(loaded.state_dict()[name].float(), p.to(torch.bfloat16).float()), name

    state = torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=False)
    assert state["step"] == 3
    resumed, _ = _train(tmp_path, steps=5, resume=True)
    assert torch.load(tmp_path / "checkpoint" / "state.pt", weights_only=False)["step"] == 5


def test_greedy_decode_runs_and_stops(tmp_path):
    model, tok = _train(tmp_path, steps=1)
    questions = ["Tom has 3 apples. How many apples does Tom have now?", "Mia has 4 eggs."]
    texts, rounds, committed = evaluator.greedy_decode(model, tok, questions, max_blocks=1)
    assert len(texts) == 2 and 1 <= rounds <= 32 and committed == 64  # every position filled once


def test_model_card_sections_are_filled(tmp_path):
    card = tmp_path / "README.md"
    card.write_text("a\n<!-- stats:start -->\nold\n<!-- stats:end -->\nb\n<!-- eval:start -->\nold\n<!-- eval:end -->\nc\n")
    hist = [{"step": 10, "minutes": 1.0, "acc": 0.5, "by_steps": {1: 1.0, 2: 0.5}, "tokens_per_round_per_sample": 2.0}]
    update_model_card(card, hist, 1_400_000, TINY)
    text = card.read_text()
    assert "old" not in text and "1.40M" in text and "| 10 | 1.0 | 0.50 | 1.00 | 0.50 | nan | 2.00 |" in text
    assert text.startswith("a\n") and text.endswith("c\n")


def test_hard_bias_draws_longer_problems_more_often():
    import collections
    import random

    def counts(bias):
        rng = random.Random(0)
        return collections.Counter(steps_for(rng, 1.0, Recipe(hard_bias=bias)) for _ in range(3000))
    flat, biased = counts(0.0), counts(1.0)
    assert set(flat) == set(biased) == {1, 2, 3}
    assert abs(flat[3] - flat[1]) < 300  # uniform without the bias
    assert biased[3] > 2.4 * biased[1]  # weights 1:2:3 with it
    assert {steps_for(random.Random(i), 0.0, Recipe(hard_bias=1.0)) for i in range(50)} == {1}


def test_digit_weight_scales_only_digit_targets(tmp_path):
    _, tok = _train(tmp_path, steps=1)
    is_digit = digit_ids(tok)
    assert [tok.decode([i]) for i in is_digit.nonzero().flatten().tolist()] == list("0123456789")

    torch.manual_seed(0)
    model = build_model(TINY, tok).eval()
    ids = torch.tensor([tok("Question: 7 apples\nAnswer: 12 apples")["input_ids"]])
    block_id = torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.ones(1, ids.shape[1] - 5, dtype=torch.long)], 1)
    valid = torch.ones_like(ids, dtype=torch.bool)

    def loss(recipe):
        gen = torch.Generator().manual_seed(0)  # the same noise for both recipes
        with torch.no_grad():
            return diffusion_loss(model, Batch(ids, block_id, valid), mask_id=tok.mask_token_id, recipe=recipe, gen=gen,
                                  is_digit=is_digit)
    (l1, ce1, m1), (l3, ce3, m3) = loss(Recipe(inv_t_weight=False, digit_weight=1.0)), loss(Recipe(inv_t_weight=False, digit_weight=3.0))
    assert m1 == m3 and torch.equal(ce1, ce3)  # the reported CE is unweighted
    has_digit_target = bool(is_digit[ids[0, 5:]].any())
    assert has_digit_target and l3 > l1


def _loss_curve(out, steps, **kw):
    """{step: logged loss} of one run, logged every step."""
    lines = []
    model, _ = _train(out, steps, log=lines.append, log_every=1, **kw)
    curve = {int(line.split()[1]): line.split(" loss ")[1].split()[0] for line in lines if line.startswith("step ")}
    return curve, model


def test_interrupted_and_resumed_run_matches_an_uninterrupted_one(tmp_path):
    full, full_model = _loss_curve(tmp_path / "full", steps=8)
    first, _ = _loss_curve(tmp_path / "part", steps=8, stop_after=3)
    assert sorted(first) == [1, 2, 3]
    assert torch.load(tmp_path / "part" / "checkpoint" / "state.pt", weights_only=False)["step"] == 3
    resumed, resumed_model = _loss_curve(tmp_path / "part", steps=8, resume=True)
    assert sorted(resumed) == [4, 5, 6, 7, 8]  # the same step count, continued from the checkpoint
    assert resumed == {s: v for s, v in full.items() if s > 3} and first == {s: full[s] for s in (1, 2, 3)}
    for name, p in full_model.state_dict().items():
        assert torch.equal(resumed_model.state_dict()[name], p), name
    assert torch.load(tmp_path / "part" / "checkpoint" / "state.pt", weights_only=False)["step"] == 8


def test_resume_refuses_another_recipe_or_seed(tmp_path):
    import dataclasses

    import pytest

    _train(tmp_path, steps=4, stop_after=1)
    kw = dict(minutes=None, steps=4, resume=True, export_dir=tmp_path / "model", ckpt_minutes=100, n_eval=0,
              log=lambda *_: None, threads=1)
    with pytest.raises(ValueError, match="same flags"):
        T.train(tmp_path, dataclasses.replace(TINY, lr=1e-3), seed=0, **kw)
    with pytest.raises(ValueError, match="same flags"):
        T.train(tmp_path, TINY, seed=1, **kw)


def test_number_dependencies_link_results_to_their_operands(tmp_path):
    _, tok = _train(tmp_path, steps=1)
    answer = "Leo has <<16-3=13>>13 books left.\nLeo now has <<13+2=15>>15 books.\n#### 15"
    pieces = [tok.decode([i]) for i in tok(" " + answer)["input_ids"]]
    pairs = set(number_dependencies(tok, answer))
    d = [i for i, p in enumerate(pieces) if p.isdigit()]  # 1 6 | 3 | 1 3 | 1 3 || 1 3 | 2 | 1 5 | 1 5 || 1 5
    assert "".join(pieces[i] for i in d) == "1631313132151515"
    a1, b1, c1, r1, a2, b2, c2, r2, final = d[0:2], d[2:3], d[3:5], d[5:7], d[7:9], d[9:10], d[10:12], d[12:14], d[14:16]

    def links(targets, sources):
        return {(t, s) for t in targets for s in sources}
    expected = (links(c1, a1 + b1) | links(r1, c1) | links(a2, r1) | links(c2, a2 + b2) | links(r2, c2)
                | links(final, r2))
    assert pairs == expected  # names, words and the question's operands have no dependencies


def test_blocked_by_mask_marks_targets_with_a_masked_source():
    masked = torch.tensor([[False, True, False, False], [False, False, False, False]])
    deps = torch.tensor([[0, 2, 1], [0, 3, 0], [1, 3, 1]])
    before = masked.clone()
    blocked = blocked_by_mask(masked, deps)
    assert blocked.tolist() == [[False, False, True, False], [False, False, False, False]]
    assert torch.equal(masked, before)  # inputs untouched
    assert not blocked_by_mask(masked, torch.zeros(0, 3, dtype=torch.long)).any()


def test_dep_and_name_weights_change_only_their_targets(tmp_path):
    import random

    _, tok = _train(tmp_path, steps=1)
    torch.manual_seed(0)
    model = build_model(TINY, tok).eval()
    recipe = Recipe(batch=2, inv_t_weight=False)
    batch = make_batch(tok, random.Random(0), recipe, progress=1.0)
    deps = batch.deps
    assert deps.shape[1] == 3 and len(deps) > 0
    assert (deps[:, 1] > deps[:, 2]).all()  # a number depends on numbers before it

    def loss(**kw):
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            return diffusion_loss(model, batch, mask_id=tok.mask_token_id, recipe=Recipe(inv_t_weight=False, **kw),
                                  gen=gen, is_digit=digit_ids(tok), is_name=name_ids(tok))[0]
    assert loss(dep_weight=1.0) > loss(dep_weight=0.1)
    assert loss(dep_weight=1.0, name_weight=1.0) < loss(dep_weight=1.0, name_weight=3.0)


def test_name_ids_cover_both_spellings_of_a_name():
    from transformers import AutoTokenizer

    from lopa.problems import NAMES, OBJECTS

    tok = AutoTokenizer.from_pretrained("assets/models/sure-gsm-dllm")
    names = {tok.decode([i]) for i in name_ids(tok, NAMES, bare=True).nonzero().flatten().tolist()}
    assert {"Leo", " Leo"} <= names  # "Leo" starts a later answer line, " Leo" the first one
    assert "Leo" not in {tok.decode([i]) for i in name_ids(tok, NAMES).nonzero().flatten().tolist()}
    assert not names & {" " + o for o in OBJECTS}
    assert " apples" in {tok.decode([i]) for i in name_ids(tok, OBJECTS).nonzero().flatten().tolist()}


def test_export_only_writes_the_checkpoint_and_keeps_other_files(tmp_path):
    from transformers import AutoModelForCausalLM

    model, _ = _train(tmp_path, steps=2, n_eval=2)
    dest = tmp_path / "dest"
    (dest / "custom_generate").mkdir(parents=True)
    (dest / "custom_generate" / "notes.txt").write_text("another engineer's file\n")
    (dest / "extra.json").write_text("{}")
    (dest / "README.md").write_text("card\n<!-- stats:start -->\n<!-- stats:end -->\n")
    T.main(["--out", str(tmp_path), "--export", str(dest), "--export-only", "--steps", "2",
            "--layers", "1", "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--ffn", "64"])
    assert (dest / "custom_generate" / "notes.txt").read_text() == "another engineer's file\n"
    assert (dest / "extra.json").read_text() == "{}"  # files that are not the export's stay
    assert "Trained 2 optimizer steps" in (dest / "README.md").read_text()
    loaded = AutoModelForCausalLM.from_pretrained(str(dest))
    for name, p in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name].float(), p.to(torch.bfloat16).float()), name


def test_init_starts_a_second_stage_from_an_exported_model(tmp_path):
    import dataclasses
    import shutil

    import pytest

    first, tok = _train(tmp_path / "stage1", steps=2)
    start = {k: v.to(torch.bfloat16).float() for k, v in first.state_dict().items()}   # what export wrote
    loaded = load_weights(tmp_path / "stage1" / "model", first)
    assert loaded.keys() == start.keys() and all(torch.equal(w, start[n]) for n, w in loaded.items())
    varied = dataclasses.replace(TINY, init=str(tmp_path / "stage1" / "model"), phrasing="varied")
    shutil.copytree(tmp_path / "stage1" / "tokenizer", tmp_path / "stage2" / "tokenizer")
    # another seed, so that a random init (what --init replaces) would be far from the first stage's weights
    second, _ = T.train(tmp_path / "stage2", varied, minutes=None, steps=1, seed=1, resume=False,
                        export_dir=tmp_path / "stage2" / "model", ckpt_minutes=100, n_eval=0, log=lambda *_: None,
                        threads=1)
    moved = [(p.float() - start[n]).abs().max() for n, p in second.state_dict().items()]
    assert 0 < max(moved) < 0.05          # one optimizer step from the first stage's weights, not from scratch
    with pytest.raises(ValueError, match="does not fit"):
        load_weights(tmp_path / "stage1" / "model", build_model(dataclasses.replace(TINY, hidden=48), tok))
    # a resumed second stage takes its weights from its checkpoint: the init folder may be gone by then
    kw = dict(minutes=None, resume=True, export_dir=tmp_path / "stage2" / "model", ckpt_minutes=100, n_eval=0,
              log=lambda *_: None, threads=1)
    T.train(tmp_path / "stage2", varied, steps=3, seed=1, stop_after=2, **kw)
    shutil.rmtree(tmp_path / "stage1" / "model")
    resumed, _ = T.train(tmp_path / "stage2", varied, steps=3, seed=1, **kw)
    assert torch.load(tmp_path / "stage2" / "checkpoint" / "state.pt", weights_only=False)["step"] == 3
    from lopa.models import load
    assert load(tmp_path / "stage2" / "model", device="cpu").spec.extra["problems"]["phrasing"] == "varied"
