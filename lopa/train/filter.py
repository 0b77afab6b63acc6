"""Train a model's commit filter (commit rule `learned`, lopa/filter.py) on its own decodes, after Learn2PD.

    python -m lopa.train filter --model assets/models/open-gsm-dllm --seed 0 --problems 240

1. Problems: `--problems` of the model's own family (config.lopa.problems) from the *train* split
   (lopa.problems.split("train", n, seed)). Membership of the held-out split is a hash of the question
   (lopa.problems.is_heldout), and every fresh evaluation draw (`python -m lopa.bench --problem-seed S`,
   lopa.problems.family_problems) takes held-out questions only, so no seed of either can give a filter
   problem to an evaluation. The model itself trained on an endless stream of that train split, so some
   of these questions it may have seen.
2. Decodes: D2F vanilla (k = 0, the threshold rule) at the bench's settings on the model (max_new_tokens
   128 unless the model says otherwise), greedy. Every round, every still-masked position of every block
   in the window gives one example: its FEATURES (exactly what the rule computes at commit time, through
   the same lopa.filter.block_features) and its label, 1 when the token it predicts that round is the
   token the decode finally wrote there.
3. Split by problem: the last fifth of the problems (in their drawn order) is validation, the rest train.
4. Training: the CommitFilter (about 2,000 parameters), features standardised by the training rows,
   full-batch AdamW (lr 3e-3, as Learn2PD's notebook) on binary cross-entropy for `--epochs` epochs from
   torch.manual_seed(seed); `--minutes` stops it early (the description records the epochs run: pass
   that --epochs to reproduce a run cut by time).
5. Report and save: validation loss, accuracy, precision, recall and the share of positions the filter
   would commit at the threshold (the model's learned_threshold, 0.96 unless set), and the share of rows
   labelled final; the filter and its description (features, sizes, seed, command, metrics) go to
   DIR/lopa_filter/ (lopa.filter.save_filter).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import torch

from lopa.filter import FEATURES, CommitFilter, save_filter
from lopa.models import load
from lopa.order import ConfidenceOrder, RoundView, block_predictions
from lopa.problems import FAMILY, split
from lopa.resolution import resolve
from lopa.rules import filter_features

BENCH_MAX_NEW_TOKENS = 128       # lopa.bench's own default: the filter learns the decodes the bench runs
VALIDATION_SHARE = 0.2
LEARNING_RATE = 3e-3


class RecordingOrder(ConfidenceOrder):
    """The paper's order, noting every round's features of every still-masked window position as the
    rule `learned` would compute them: rows of (generated position, predicted token, features [F])."""

    def __init__(self):
        self.rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def anchor(self, view: RoundView):
        for idx, block, full in block_predictions(view, view.conf):
            self.rows.append((view.window_start + idx, block.token.clone(), filter_features(block, view.block_size, full)))
        return super().anchor(view)


def decode_examples(loaded, settings, question: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One problem decoded by `settings` -> (features [R, F], labels [R]): one row per round per masked position."""
    order = RecordingOrder()
    result = loaded.decoder(settings, order=order).run(question)
    final = torch.tensor(result.tokens, dtype=torch.long)                            # [T] generated tokens
    if not order.rows:
        return torch.zeros(0, len(FEATURES)), torch.zeros(0)
    positions, tokens, features = (torch.cat(x) for x in zip(*order.rows))
    return features, (tokens == final[positions]).float()


def metrics(commit_filter: CommitFilter, features: torch.Tensor, labels: torch.Tensor, threshold: float) -> dict:
    """Loss, and the filter's decisions at `threshold` against the labels."""
    with torch.no_grad():
        logits = commit_filter(features)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels).item()
        chosen = torch.sigmoid(logits) > threshold
    right = labels.bool()
    n_chosen = int(chosen.sum())
    return {"rows": int(labels.numel()), "final_share": round(float(labels.mean()), 4), "loss": round(loss, 4),
            "accuracy": round(float((chosen == right).float().mean()), 4),
            "precision": round(float((chosen & right).sum()) / n_chosen, 4) if n_chosen else None,
            "recall": round(float((chosen & right).sum()) / max(int(right.sum()), 1), 4),
            "commit_share": round(n_chosen / max(labels.numel(), 1), 4)}


def fit(features: torch.Tensor, labels: torch.Tensor, seed: int, epochs: int, minutes: float | None = None,
        log=print) -> tuple[CommitFilter, int]:
    """The filter trained on (features [R, F], labels [R]): full-batch AdamW on BCE. -> (filter, epochs run)."""
    torch.manual_seed(seed)
    commit_filter = CommitFilter()
    commit_filter.mean.copy_(features.mean(0))
    commit_filter.scale.copy_(features.std(0).clamp_min(1e-3))          # a constant feature stays as it is
    optimizer = torch.optim.AdamW(commit_filter.parameters(), lr=LEARNING_RATE)
    start, ran = time.perf_counter(), 0
    for epoch in range(epochs):
        if minutes is not None and time.perf_counter() - start > 60 * minutes:
            log(f"stopped by --minutes {minutes} after {epoch} epochs")
            break
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(commit_filter(features), labels)
        loss.backward()
        optimizer.step()
        ran = epoch + 1
        if epoch % 500 == 0:
            log(f"epoch {epoch}: train loss {loss.item():.4f}")
    return commit_filter.eval(), ran


def train_filter(model: str, seed: int = 0, n_problems: int = 240, epochs: int = 3000, minutes: float | None = None,
                 out: str | None = None, command: str = "", log=print) -> dict:
    """Decode, split, fit, report and save (the module docstring). -> the filter's description."""
    loaded = load(model)
    family = loaded.spec.extra.get("problems")
    if not family or family.get("name") != FAMILY:
        raise ValueError(f"{loaded.spec.name} names no problem family of its own (config.lopa.problems "
                         f"{FAMILY!r}), so there are no decodes of its own problems to learn from")
    settings = resolve({}, loaded.spec, decoder="d2f", defaults={"max_new_tokens": BENCH_MAX_NEW_TOKENS})
    problems = split("train", n_problems, seed, family.get("max_steps", 3), family["max_value"],
                     family.get("phrasing", "plain"))
    start, examples = time.perf_counter(), []
    for i, problem in enumerate(problems):
        examples.append(decode_examples(loaded, settings, problem["question"]))
        if (i + 1) % 40 == 0:
            log(f"decoded {i + 1}/{len(problems)} problems ({time.perf_counter() - start:.0f} s)")
    decode_s = time.perf_counter() - start
    n_val = max(1, round(VALIDATION_SHARE * len(problems)))
    train_x, train_y = (torch.cat(x) for x in zip(*examples[:-n_val]))
    val_x, val_y = (torch.cat(x) for x in zip(*examples[-n_val:]))
    log(f"{train_y.numel()} training rows from {len(problems) - n_val} problems, {val_y.numel()} validation rows "
        f"from {n_val}")
    start = time.perf_counter()
    commit_filter, ran = fit(train_x, train_y, seed, epochs, minutes, log)
    threshold = settings.learned_threshold
    description = {
        "model": loaded.spec.name, "seed": seed, "problems": len(problems), "validation_problems": n_val,
        "split": f"lopa.problems.split('train', {n_problems}, {seed}, ...) of the family "
                 f"{family}; the last {n_val} problems are validation",
        "decoder": "d2f", "settings": {"max_new_tokens": settings.max_new_tokens, "tau_conf": settings.tau_conf,
                                       "block_size": settings.block_size, "attention": settings.attention},
        "confidence": settings.confidence, "epochs": ran, "learning_rate": LEARNING_RATE, "threshold": threshold,
        "train": metrics(commit_filter, train_x, train_y, threshold),
        "validation": metrics(commit_filter, val_x, val_y, threshold),
        "decode_s": round(decode_s, 1), "train_s": round(time.perf_counter() - start, 1),
        "threads": torch.get_num_threads(), "command": command,
    }
    folder = save_filter(out or loaded.path, commit_filter, description)
    log(f"validation at threshold {threshold}: {description['validation']}")
    log(f"saved {folder}")
    return description


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m lopa.train filter", description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="the model folder (or a bundled model's name); the filter is "
                                                   "saved in its lopa_filter/ unless --out")
    ap.add_argument("--seed", type=int, default=0, help="draws the problems and the filter's initial weights")
    ap.add_argument("--problems", type=int, default=240, help="problems decoded (a fifth of them validate)")
    ap.add_argument("--epochs", type=int, default=3000, help="full-batch training epochs")
    ap.add_argument("--minutes", type=float, default=None, help="stop training after this many minutes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", default=None, help="save beside another folder than the model's")
    args = ap.parse_args(argv)
    if args.problems < 2:
        ap.error("--problems must be at least 2: one to train on, one to validate")
    torch.set_num_threads(args.threads)
    command = "python -m lopa.train filter " + " ".join(shlex.quote(a) for a in (sys.argv[2:] if argv is None else argv))
    train_filter(args.model, args.seed, args.problems, args.epochs, args.minutes, args.out, command)
