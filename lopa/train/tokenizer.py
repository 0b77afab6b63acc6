"""Byte-level BPE tokenizer for the bundled tiny model.

Digits are always single tokens (as in Qwen2), so every number is spelled digit by digit
and the model can learn column arithmetic instead of memorising a token per number. The
vocabulary is kept small (~1k) because embeddings dominate a tiny model's parameters.
Trained on GSM8K train text plus synthetic problems, so the synthetic templates' words are
whole tokens and real GSM8K questions still tokenize sensibly.

    python -m lopa.train.tokenizer --out DIR
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from lopa.models.loading import ASSETS
from lopa.problems import make_problem, read_jsonl

EOS, MASK, PAD = "<|endoftext|>", "<|mask|>", "<|pad|>"
SPECIAL_TOKENS = (EOS, MASK, PAD)  # ids 0, 1, 2 in this order
VOCAB_SIZE = 1024
GSM8K_TRAIN = ASSETS / "data" / "gsm8k" / "train.jsonl"


def training_texts(gsm8k_train: Path | None = GSM8K_TRAIN, n_synthetic: int = 20000, seed: int = 0):
    """GSM8K train questions/answers, then synthetic ones (all steps counts, train-side seed)."""
    if gsm8k_train is not None and Path(gsm8k_train).exists():
        for row in read_jsonl(gsm8k_train):
            yield row["question"]
            yield row["answer"]
    rng = random.Random(f"tokenizer-{seed}")
    for _ in range(n_synthetic):
        p = make_problem(rng, rng.randint(1, 4))
        yield "Question: " + p["question"] + "\nAnswer:"
        yield p["answer"]


def build_tokenizer(texts, vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    # Digits first so " 23" becomes " ", "2", "3" before byte-level merges can glue them.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def save_tokenizer(tok: Tokenizer, out: str | Path):
    """Save as a transformers fast tokenizer so AutoTokenizer.from_pretrained(out) works offline."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, mask_token=MASK)
    fast.save_pretrained(str(out))
    return fast


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m lopa.train.tokenizer", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gsm8k", default=str(GSM8K_TRAIN))
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    args = ap.parse_args(argv)
    tok = build_tokenizer(training_texts(Path(args.gsm8k)), args.vocab_size)
    save_tokenizer(tok, args.out)
    print(f"saved tokenizer with {tok.get_vocab_size()} tokens to {args.out}")


if __name__ == "__main__":
    main()
