"""What LoPA can gain on a model that is exactly right about the synthetic problem family: an oracle.

    python -m lopa.study.oracle --phrasing varied --n 100 --ks 0,4,8,14
    python -m lopa.study.oracle --phrasing plain                   # one right answer per problem

The oracle stands in for the model (it speaks the engine's Executor protocol). For a masked position
it returns the true distribution of the token there: the share, among the problem's right answers
(lopa.problems.phrasings, all equally likely) that agree with every filled token the position can
see, of those that have each token there. It is the best-calibrated model of the family there can
be, so D2F and LoPA decoding it show what the family itself leaves to the token filling order,
whatever a trained model adds or lacks (issue #13: how far can LoPA's TPF go beyond D2F's on these
answers without losing accuracy? On the oracle every decoder is always right).

What a position can see follows the bundled model's layout (`--attention block_causal`, logit
shift): the output at position g-1 predicts position g, and it sees the prompt and the blocks up to
its own, so the first token of a block sees only the blocks before it. `--attention full` lets every
position see every filled token.

Layer: with the other studies (core, lopa.models, lopa.problems).
"""

from __future__ import annotations

import argparse
import time

import torch

from lopa.engine import Decoder
from lopa.exact import exact_distribution, reading_table
from lopa.forward import Verified
from lopa.problems import PHRASINGS, grammatical_lines, phrasings, split
from lopa.resolution import add_settings_arguments, settings_from_args
from lopa.rules import summarize
from lopa.settings import DecodeSettings, decoder_settings
from lopa.tasks.grading import exact_match
from lopa.tasks.sources import DEFAULT_SEED
from lopa.trace import pooled

DEFAULTS = {"max_new_tokens": 128}       # and the paper's GSM8K row (Table 5)
VISIBILITY = ("block_causal", "full")    # what a position can see, as the oracle computes it


class OracleExecutor:
    """Executor whose predictions are the exact distribution over `answers` (token lists, EOS-ended)."""

    def __init__(self, answers: list[list[int]], vocab: int, spec, settings: DecodeSettings,
                 attention: str = "block_causal"):
        self.answers, self.vocab, self.spec, self.settings, self.attention = answers, vocab, spec, settings, attention

    def start(self, prompt_ids: torch.Tensor) -> None:
        pass

    def commit(self, winner: int, n_positions: int) -> None:
        pass

    def snapshot(self) -> None:
        return None                           # no saved states: a fork of an oracle run replays it

    def distribution(self, tokens: torch.Tensor) -> torch.Tensor:
        """[n] generated tokens (mask id where masked) -> [n, V] probabilities of each position
        (lopa.exact; uniform where no right answer agrees: no preference)."""
        cands, weights = reading_table(self.answers, tokens.numel(), self.spec.eos_token_ids[0])
        probs, defined = exact_distribution(tokens, cands, weights, self.spec.mask_token_id, self.vocab,
                                            self.settings.block_size, self.attention)
        probs[~defined] = 1.0 / self.vocab
        return probs

    def verify(self, branches) -> Verified:
        t0 = time.perf_counter()
        lengths = [b.window().numel() for b in branches]
        W = max(lengths)
        logits = torch.full((len(branches), W, self.vocab), -30.0)                  # [B, W, V]
        for j, b in enumerate(branches):
            probs = self.distribution(b.tokens)[b.window_start:]                    # [w, V]
            logits[j, : probs.shape[0]] = probs.clamp_min(1e-12).log()
        s = self.settings
        token, max_prob, conf = summarize(logits, s.confidence, s.temperature, None, self.spec.mask_token_id,
                                          s.mask_argmax)
        return Verified(token, max_prob, conf, lengths, time.perf_counter() - t0)


def decode(loaded, problem: dict, settings: DecodeSettings, phrasing: str = "varied", attention: str = "block_causal"):
    """One problem decoded with the oracle of the `phrasing` family in place of the model; its RunResult."""
    tok = loaded.tokenizer
    answers = [tok(" " + a, add_special_tokens=False)["input_ids"] + [loaded.spec.eos_token_ids[0]]
               for a in phrasings(problem["answer"], phrasing)]   # " ": the answer's first token carries the space (model card)
    oracle = OracleExecutor(answers, len(tok), loaded.spec, settings, attention)
    return Decoder(None, loaded.spec, settings, tok, executor=oracle).run(problem["question"])


def main(argv=None) -> int:
    from lopa.models import load

    ap = argparse.ArgumentParser(prog="python -m lopa.study.oracle", description=__doc__.splitlines()[0])
    ap.add_argument("--phrasing", default="varied", choices=PHRASINGS)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--problem-seed", type=int, default=DEFAULT_SEED, help="seed of the fresh held-out problems")
    ap.add_argument("--ks", default="0,1,2,4,8,14", help="branch counts; 0 = D2F vanilla (TPF/D2F is over the first row)")
    add_settings_arguments(ap, per_row=("k",), choose_decoder=False, defaults=DEFAULTS)     # --ks: one row each
    args = ap.parse_args(argv)
    loaded = load()                  # the tokenizer and spec of the bundled model; its weights are not used
    base = settings_from_args(args, loaded.spec, defaults=DEFAULTS)
    if base.attention not in VISIBILITY:
        ap.error(f"the oracle computes {' and '.join(VISIBILITY)} attention, not {base.attention}")
    attention = base.attention
    problems = split("heldout", args.n, seed=args.problem_seed, phrasing=args.phrasing)
    print(f"oracle of the '{args.phrasing}' family ({attention}); {args.n} held-out problems, seed {args.problem_seed}; "
          f"paper GSM8K settings (tau_conf {base.tau_conf}, tau_add {base.tau_add}, tau_act {base.tau_act}, block {base.block_size})")
    print(f"{'decoder':>10} {'right':>6} {'TPF':>6} {'TPF/D2F':>8} {'forwards':>9} {'fill spread':>12} {'1st-round fill':>15} "
          f"{'grammar':>8}")
    d2f_tpf = None
    for k in (int(x) for x in args.ks.split(",")):
        settings = decoder_settings("lopa", base, k=k) if k else decoder_settings("d2f", base)
        runs = [decode(loaded, p, settings, args.phrasing, attention) for p in problems]
        right = sum(exact_match(r.text, p["answer"])[0] for r, p in zip(runs, problems))
        m = [r.metrics() for r in runs]
        pool = pooled(m)
        tpf = pool["tpf_useful"]
        # a block sees only the blocks before it, so blocks filling at once can splice two readings
        lines = [grammatical_lines(r.text, args.phrasing) for r in runs]
        grammar = sum(ok for ok, _ in lines) / max(1, sum(n for _, n in lines))
        d2f_tpf = d2f_tpf or tpf
        print(f"{'d2f' if k == 0 else f'lopa-k{k}':>10} {right:>6} {tpf:6.2f} {tpf / d2f_tpf:7.2f}x "
              f"{pool['forwards_mean']:9.2f} {pool['fill_spread_mean']:12.2f} "
              f"{100 * pool['first_fill_share_mean']:14.0f}% {100 * grammar:7.1f}%", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
