"""The learned commit filter (commit rule `learned`, after Learn2PD, arXiv 2509.25188): a small MLP that
reads what a round already knows about each still-masked position and predicts whether the token it
predicts now is the one the decode finally writes there. lopa.peers.learned_commit commits the positions
whose predicted probability clears the threshold knob (learned_threshold).

The features of one position, all from the round's view (RoundView: no extra forward, nothing kept
between rounds), FEATURES in order:

    max_prob      the predicted token's probability
    conf          Conf under the settings' metric (the filter records which it was trained with)
    same_as_prev  1 when the round before predicted the same token here, else 0 (also where it predicted none)
    prev_max_prob the round before's max prob here, 0 where it predicted none
    offset        the position within its block, 0 (first) .. 1 (last)
    masked_share  the share of the block's positions still masked (M / N)
    first_block   1 in the window's first block (the one right after the cache), else 0
    fully_active  1 when the block is fully activated, else 0
    rank          the position's place among the block's masked by max prob, 0 (surest) .. 1
    left_known    1 when the position before it in the block is already decided (or it is the block's first)

A filter lives beside its model, in FILTER_DIR (weights FILTER_WEIGHTS, description FILTER_JSON); `python -m
lopa.train filter --model DIR` trains and writes one (lopa/train/filter.py). The model loader records the
folder in ModelSpec.extra["commit_filter"] when it is there, and the Decoder loads it under commit=learned.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from pathlib import Path

import torch

FEATURES = ("max_prob", "conf", "same_as_prev", "prev_max_prob", "offset", "masked_share", "first_block",
            "fully_active", "rank", "left_known")
HIDDEN = (48, 32)                 # two hidden layers: 10*48+48 + 48*32+32 + 32+1 = 2,129 parameters
FILTER_DIR = "lopa_filter"        # a folder, so the model loader's *.safetensors glob never counts it as weights
FILTER_WEIGHTS = "filter.safetensors"
FILTER_JSON = "filter.json"
FILTER_FORMAT = "lopa-commit-filter/1"
TRAIN_COMMAND = "python -m lopa.train filter --model {model}"


def block_features(token: torch.Tensor, max_prob: torch.Tensor, conf: torch.Tensor, prev_token: torch.Tensor,
                   prev_max_prob: torch.Tensor, offset: torch.Tensor, block_size: int, first_block: bool,
                   fully_activated: bool) -> torch.Tensor:
    """FEATURES of one block's still-masked positions. [M] each (offset: position within the block, ascending;
    prev_token -1 and prev_max_prob nan where the round before predicted nothing) -> [M, len(FEATURES)] float32."""
    M = max_prob.numel()
    if M == 0:
        return torch.zeros(0, len(FEATURES))
    known = prev_token >= 0
    same = (known & (token == prev_token)).float()
    prev = torch.where(known, prev_max_prob.float().nan_to_num(0.0), torch.zeros(M))
    place = torch.empty(M)
    place[torch.sort(max_prob.double(), descending=True, stable=True).indices] = torch.arange(M, dtype=torch.float)
    masked_before = torch.isin(offset - 1, offset)                       # [M] the position before is still masked
    columns = (max_prob.float(), conf.float(), same, prev, offset.float() / max(block_size - 1, 1),
               torch.full((M,), M / block_size), torch.full((M,), float(first_block)),
               torch.full((M,), float(fully_activated)), place / max(M - 1, 1), (~masked_before).float())
    return torch.stack(columns, -1)                                       # [M, F]


class CommitFilter(torch.nn.Module):
    """features [M, F] -> logits [M] that the prediction is final. The features are standardised by the
    training set's mean and spread (buffers), then two ReLU layers of HIDDEN units."""

    def __init__(self, n_features: int = len(FEATURES), hidden: tuple[int, ...] = HIDDEN):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("scale", torch.ones(n_features))
        sizes, layers = (n_features, *hidden), []
        for a, b in zip(sizes, sizes[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(sizes[-1], 1))
        self.hidden = tuple(hidden)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net((features - self.mean) / self.scale).squeeze(-1)

    @torch.no_grad()
    def probability(self, features: torch.Tensor) -> torch.Tensor:
        """[M, F] -> [M]: the chance each position's prediction is final."""
        return torch.sigmoid(self.forward(features.float()))

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def save_filter(folder, commit_filter: CommitFilter, description: dict) -> Path:
    """Write the filter into `folder`/FILTER_DIR (its weights, and FILTER_JSON: `description` plus the format,
    the features and the sizes). -> that folder."""
    from safetensors.torch import save_file
    out = Path(folder) / FILTER_DIR
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in commit_filter.state_dict().items()}, str(out / FILTER_WEIGHTS))
    meta = {"format": FILTER_FORMAT, "features": list(FEATURES), "hidden": list(commit_filter.hidden),
            "parameters": commit_filter.n_params(), **description}
    (out / FILTER_JSON).write_text(json.dumps(meta, indent=2) + "\n")
    return out


def check_description(meta, where: str) -> dict:
    """The one schema of FILTER_JSON: a ValueError naming what is wrong, else the description."""
    if not isinstance(meta, dict) or meta.get("format") != FILTER_FORMAT:
        raise ValueError(f"{where} is not a commit filter description ({FILTER_FORMAT})")
    if meta.get("features") != list(FEATURES):
        raise ValueError(f"{where} was trained on the features {meta.get('features')}, this engine computes "
                         f"{list(FEATURES)}: train it again ({TRAIN_COMMAND.format(model='DIR')})")
    hidden = meta.get("hidden")
    if not (isinstance(hidden, list) and 0 < len(hidden) <= 4 and all(isinstance(h, int) and 0 < h <= 1024 for h in hidden)):
        raise ValueError(f"{where}: hidden must be 1 to 4 layer sizes from 1 to 1024, got {hidden!r}")
    if meta.get("confidence") not in ("max_prob", "neg_entropy", "margin"):
        raise ValueError(f"{where}: confidence must name the Conf metric the filter was trained with")
    return meta


@functools.lru_cache(maxsize=8)
def _load(folder: str, stamp: tuple) -> tuple[CommitFilter, dict]:
    from safetensors.torch import load_file
    where = Path(folder)
    try:
        meta = json.loads((where / FILTER_JSON).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read {where / FILTER_JSON}: {err}") from None
    meta = check_description(meta, str(where / FILTER_JSON))
    commit_filter = CommitFilter(len(FEATURES), tuple(meta["hidden"]))
    try:
        commit_filter.load_state_dict(load_file(str(where / FILTER_WEIGHTS)))
    except Exception as err:             # a missing, corrupt or mis-shaped file: say which
        raise ValueError(f"cannot load {where / FILTER_WEIGHTS}: {str(err).splitlines()[0][:200]}") from None
    return commit_filter.eval(), meta


MAX_FILTER_BYTES = {FILTER_JSON: 2**20, FILTER_WEIGHTS: 16 * 2**20}    # kilobytes in practice


def load_filter(folder) -> tuple[CommitFilter, dict]:
    """(the filter, its description) from a FILTER_DIR folder; cached while its files are unchanged. Each file
    must be a regular file within MAX_FILTER_BYTES (checked by `stat`, before anything is opened: a named pipe
    in a model folder would block a reader forever)."""
    folder, stamp = Path(folder), []
    for name, limit in MAX_FILTER_BYTES.items():
        try:
            info = os.stat(folder / name)
        except OSError as err:
            raise ValueError(f"cannot read {folder / name}: {err.strerror or err}") from None
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise ValueError(f"{folder / name} must be a regular file of at most {limit // 2**20} MiB")
        stamp.append((info.st_mtime_ns, info.st_size))
    return _load(str(folder), tuple(stamp))


def filter_folder(model_folder) -> str | None:
    """The FILTER_DIR of a model folder when it holds a filter description, else None."""
    folder = Path(model_folder) / FILTER_DIR
    return str(folder) if (folder / FILTER_JSON).is_file() else None


def filter_for(spec, confidence: str) -> CommitFilter:
    """The commit filter of the model `spec` describes, for a decode under Conf `confidence`; a ValueError
    naming the command that trains one when the model has none, or the setting to change."""
    folder = spec.extra.get("commit_filter")
    if not folder:
        raise ValueError(f"commit=learned needs a commit filter trained on {spec.name}'s own decodes, and it has "
                         f"none: train one with `{TRAIN_COMMAND.format(model=spec.name)}` "
                         "(it is saved beside the model), or choose another commit rule")
    commit_filter, meta = load_filter(folder)
    if meta["confidence"] != confidence:
        raise ValueError(f"{spec.name}'s commit filter was trained with confidence={meta['confidence']}, and reads "
                         f"Conf as one of its features: set confidence={meta['confidence']} (got {confidence})")
    return commit_filter
