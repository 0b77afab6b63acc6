"""Synthetic traces at the schema's limits, valid in every field: the memory budget's tests and
scripts/bench_app_memory.py load them as a visitor's upload would be loaded."""

from __future__ import annotations

import json

from lopa import DecodeSettings
from lopa.read_budget import READ_BYTES, read_cost
from lopa.schema import MAX_ROUNDS

SPEC = {"mask_token_id": 3, "eos_token_ids": [2], "logit_shift": False, "vocab_size": 50_000, "name": "synthetic"}


def trace_json(rounds: int, blocks: int, per_round: int = 0, block_size: int = 32) -> str:
    """A trace of `rounds` rounds, each with `blocks` block states and `per_round` predictions of
    the anchor branch. Numbers are chosen above 256 (Python shares smaller ints), so that every
    one is an object of its own once parsed: the most memory a byte of trace can become."""
    length = blocks * block_size
    settings = DecodeSettings(k=0, block_size=block_size, max_new_tokens=length).to_dict()
    positions = [300 + i % (length - 300) for i in range(per_round)]
    record = {"kind": "round", "window_start": 0, "anchor_positions": [300], "anchor_tokens": [1000],
              "lookahead_positions": [], "lookahead_tokens": [], "branch_tokens": [[1000] * min(per_round, 64)],
              "branch_positions": [positions], "branch_max_prob": [[0.5] * per_round],
              "branch_conf": [[-0.25] * per_round], "branch_argmax": [[1000 + i for i in range(per_round)]],
              "branch_scores": [0.5], "branch_rank": [0], "winner": 0, "block_states": ["cached"] * blocks,
              "committed": 1, "n_cached_blocks": 0, "forward_seconds": 0.001, "round_seconds": 0.001}
    records = [{"round": i, **record} for i in range(rounds)]
    return json.dumps({"format": "lopa-trace/2", "prompt": "synthetic", "prompt_ids": [1000], "settings": settings,
                       "spec": SPEC, "tokens": [1000] * length, "text": "", "records": records},
                      separators=(",", ":"))


def largest_trace(rounds: int = MAX_ROUNDS, blocks: int = 64) -> str:
    """The biggest such trace the schema reads (read_cost within READ_BYTES): `rounds` rounds of
    the most blocks up to `blocks` that fit, and as many predictions per round as still fit."""
    while read_cost(trace_json(rounds, blocks, 0)) > READ_BYTES:
        if blocks == 1:
            raise ValueError(f"{rounds} rounds of one block already cost more than {READ_BYTES} bytes to read")
        blocks //= 2
    empty, ten = read_cost(trace_json(rounds, blocks, 0)), read_cost(trace_json(rounds, blocks, 10))
    per_round = int((READ_BYTES - empty) / ((ten - empty) / 10))
    while per_round > 0 and read_cost(text := trace_json(rounds, blocks, per_round)) > READ_BYTES:
        per_round -= 1
    return text if per_round > 0 else trace_json(rounds, blocks, 0)
