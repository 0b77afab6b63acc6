
import torch

from lopa.train import layout as train_layout
from lopa.train import trainer as T

TINY = T.Recipe(layers=1, hidden=32, heads=2, kv_heads=1, ffn=64, batch=4, warmup=2, bf16=False)


def test_block_causal_mask():
    # prompt of 2, answer blocks 1 and 2, then one padding position
    block_id = torch.tensor([[0, 0, 1, 1, 2, 0]])
    valid = torch.tensor([[True] * 5 + [False]])
    m = train_layout.block_causal_mask(block_id, valid)[0, 0]
    assert m.shape == (6, 6)
    assert m[0].tolist() == [True, True, False, False, False, False]  # prompt never sees the answer
    assert m[2].tolist() == [True, True, True, True, False, False]  # block 1 sees itself both ways
    assert m[4].tolist() == [True] * 5 + [False]
    assert m[5].tolist() == [False] * 5 + [True]  # padded query: itself only


def test_noise_is_monotone_and_spares_the_prompt():
    block_id = torch.tensor([[0] * 5 + [1] * 32 + [2] * 32 + [3] * 32] * 64)
    valid = torch.ones_like(block_id, dtype=torch.bool)
    t = T.block_mask_ratios(block_id, valid, T.Recipe(), torch.Generator().manual_seed(0))
    assert (t[:, :5] == 0).all()
    per_block = t[:, [5, 37, 69]]  # [B, 3]
    assert (per_block[:, 1:] >= per_block[:, :-1]).all() and (per_block <= 1).all()
    assert (per_block[:, -1] > 0).all()


def _train(out, steps, resume=False, n_eval=0):
    # A small tokenizer placed where train() looks keeps the test fast (no GSM8K pass).
    if not (out / "tokenizer" / "tokenizer.json").exists():
        from lopa.train.tokenizer import build_tokenizer, save_tokenizer, training_texts
        save_tokenizer(build_tokenizer(training_texts(None, n_synthetic=300), vocab_size=400), out / "tokenizer")
    return T.train(out, TINY, minutes=None, steps=steps, seed=0, resume=resume, export_dir=out / "model",
                   ckpt_minutes=100, n_eval=n_eval, log=lambda *_: None, threads=1)


def test_smoke_train_export_and_resume(tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    model, tok = _train(tmp_path, steps=3, n_eval=2)
    spec = AutoConfig.from_pretrained(str(tmp_path / "model")).lopa
    assert spec == {"mask_token_id": tok.mask_token_id, "eos_token_ids": [tok.eos_token_id],
                    "pad_token_id": tok.pad_token_id, "logit_shift": True, "block_size": 32,
                    "prompt_template": "Question: {prompt}\nAnswer:", "attention": "block_causal"}
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
    texts, rounds, committed = train_layout.greedy_decode(model, tok, questions, max_blocks=1)
    assert len(texts) == 2 and 1 <= rounds <= 32 and committed == 64  # every position filled once


def test_model_card_sections_are_filled(tmp_path):
    card = tmp_path / "README.md"
    card.write_text("a\n<!-- stats:start -->\nold\n<!-- stats:end -->\nb\n<!-- eval:start -->\nold\n<!-- eval:end -->\nc\n")
    hist = [{"step": 10, "minutes": 1.0, "acc": 0.5, "by_steps": {1: 1.0, 2: 0.5}, "tokens_per_round_per_sample": 2.0}]
    T.update_model_card(card, hist, 1_400_000, TINY)
    text = card.read_text()
    assert "old" not in text and "1.40M" in text and "| 10 | 1.0 | 0.50 | 1.00 | 0.50 | nan | 2.00 |" in text
    assert text.startswith("a\n") and text.endswith("c\n")


def test_hard_bias_draws_longer_problems_more_often():
    import collections
    import random

    def counts(bias):
        rng = random.Random(0)
        return collections.Counter(T.steps_for(rng, 1.0, T.Recipe(hard_bias=bias)) for _ in range(3000))
    flat, biased = counts(0.0), counts(1.0)
    assert set(flat) == set(biased) == {1, 2, 3}
    assert abs(flat[3] - flat[1]) < 300  # uniform without the bias
    assert biased[3] > 2.4 * biased[1]  # weights 1:2:3 with it
    assert {T.steps_for(random.Random(i), 0.0, T.Recipe(hard_bias=1.0)) for i in range(50)} == {1}


def test_digit_weight_scales_only_digit_targets(tmp_path):
    _, tok = _train(tmp_path, steps=1)
    is_digit = T.digit_ids(tok)
    assert [tok.decode([i]) for i in is_digit.nonzero().flatten().tolist()] == list("0123456789")

    torch.manual_seed(0)
    model = T.build_model(TINY, tok).eval()
    ids = torch.tensor([tok("Question: 7 apples\nAnswer: 12 apples")["input_ids"]])
    block_id = torch.cat([torch.zeros(1, 5, dtype=torch.long), torch.ones(1, ids.shape[1] - 5, dtype=torch.long)], 1)
    valid = torch.ones_like(ids, dtype=torch.bool)

    def loss(recipe):
        gen = torch.Generator().manual_seed(0)  # the same noise for both recipes
        with torch.no_grad():
            return T.diffusion_loss(model, ids, block_id, valid, tok.mask_token_id, recipe, gen, is_digit)
    (l1, ce1, m1), (l3, ce3, m3) = loss(T.Recipe(inv_t_weight=False, digit_weight=1.0)), loss(T.Recipe(inv_t_weight=False, digit_weight=3.0))
    assert m1 == m3 and torch.equal(ce1, ce3)  # the reported CE is unweighted
    has_digit_target = bool(is_digit[ids[0, 5:]].any())
    assert has_digit_target and l3 > l1
