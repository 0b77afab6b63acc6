"""Tiny real models built inside tests: a random Qwen2 and the word-level tokenizer of lopa.models.tiny, saved in
the same on-disk format as the bundled model (config.json with `lopa`, safetensors, tokenizer)."""

from contextlib import contextmanager

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lopa import ModelSpec
from lopa.models.tiny import WORDS, tiny_tokenizer  # noqa: F401  (the tests import the tokenizer from here too)

MASK_ID, EOS_ID, PAD_ID = 0, 1, 2


def tiny_qwen2(seed=0, layers=2, vocab=len(WORDS)):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         eos_token_id=EOS_ID, pad_token_id=PAD_ID, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).eval()


def tiny_spec(**changes):
    base = dict(mask_token_id=MASK_ID, eos_token_ids=(EOS_ID,), logit_shift=True, max_context=512)
    return ModelSpec(**{**base, **changes})


def save_tiny_model_dir(path, with_spec=True, with_mask=True, seed=0):
    model = tiny_qwen2(seed)
    if with_spec:
        model.config.lopa = {"mask_token_id": MASK_ID, "eos_token_ids": [EOS_ID], "pad_token_id": PAD_ID,
                             "logit_shift": True, "block_size": 8, "attention": "block_causal",
                             "prompt_template": "Question : {prompt} Answer :"}
    model.save_pretrained(path)
    tok = tiny_tokenizer()
    if not with_mask:
        tok = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, eos_token="<|endoftext|>", unk_token="?")
    tok.save_pretrained(path)
    return path


def save_commit_filter(path, confidence: str, seed: int = 0):
    """A commit filter of random weights (lopa/filter.py) beside the model in `path`, so that commit=learned
    decodes with it, under Conf `confidence`. Returns the filter."""
    from lopa.filter import CommitFilter, save_filter
    torch.manual_seed(seed)
    commit_filter = CommitFilter().eval()
    save_filter(path, commit_filter, {"confidence": confidence})
    return commit_filter


@contextmanager
def app_model(tmp_path_factory):
    """The app's default model pointed at a fresh tiny model (loaded into the cache on first use) for
    the duration, then restored. Yields the model directory. It holds a commit filter for the app's Conf
    (max_prob, the tests' settings), so that every commit rule decodes."""
    from app.serving.model_cache import MODELS
    path = save_tiny_model_dir(tmp_path_factory.mktemp("model") / "tiny-dllm")
    save_commit_filter(path, "max_prob")
    saved = MODELS.default
    MODELS.default = path
    try:
        yield path
    finally:
        MODELS.default = saved


# Low thresholds so that a random tiny model commits several tokens per round and lookahead matters.
LIVELY = dict(tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32, confidence="max_prob")
PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"


def decisions(run):
    """A run's decisions round by round, for equality tests between execution paths (timings, ranks
    and executor extras left out: they differ by design)."""
    return [(r.anchor_positions, r.anchor_tokens, r.lookahead_positions, r.lookahead_tokens, r.winner,
             r.block_states, r.branch_positions) for r in run.records]


def study_setup(root):
    """A tiny model and two GSM8K-format problems under `root`, for a study end to end: (model, data, root)."""
    import json
    model = save_tiny_model_dir(root / "model")
    data = root / "p.jsonl"
    data.write_text("\n".join(json.dumps({"question": q, "answer": f"he buys <<1+2=3>>3\n#### {a}"})
                              for q, a in [("Tom has 3 apples ?", 3), ("how many apples does Tom have ?", 4)]))
    return model, data, root
