"""What a round leaves behind: its RoundRecord (the decisions, every branch as verified, the state after
the commit), the finishing round's, and the words for a decode that can make no progress. The engine
(lopa/engine.py) calls these once per round; the trace (lopa/trace.py) reads what they wrote."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from lopa.blocks import Branch
from lopa.chains import ChainPlan, chain_fields
from lopa.forward import Verified
from lopa.order import Commits
from lopa.settings import DecodeSettings
from lopa.trace import RoundRecord


def round_record(r: int, kind: str, branches: list[Branch], verified: Verified, scores: list[float], winner: int,
                 state: Branch, settings: DecodeSettings, start: float, decided: tuple[Commits, torch.Tensor] | None = None,
                 committed: int = 0, chains: tuple[ChainPlan, list[int]] | None = None,
                 edit: dict | None = None) -> RoundRecord:
    """The record of a round with a forward: its decisions (decided: the anchor's Commits, with what a script forced
    and why the rule committed, and the lookahead window indices; none for the prefill; chains: the round's
    ChainPlan and how much of each chain was kept, recorded when lookahead_depth > 1; edit: token editing's
    fields, lopa.editing.Editor.fields), every branch (row) as verified, and the state after the commit."""
    commits, look_pos = decided if decided else (Commits(*(torch.zeros(0, dtype=torch.long),) * 2), None)
    anchor_pos, look_pos = commits.positions, look_pos if look_pos is not None else torch.zeros(0, dtype=torch.long)
    w0 = branches[0].window_start
    per_branch = {"tokens": [], "positions": [], "max_prob": [], "conf": [], "argmax": []}
    for j, b in enumerate(branches):
        token, max_prob, conf = verified.branch(j)
        masked = b.window() == b.mask_id
        per_branch["tokens"].append(b.window().tolist())
        per_branch["positions"].append((masked.nonzero().flatten() + w0).tolist())
        per_branch["max_prob"].append(max_prob[masked].tolist())
        per_branch["conf"].append(conf[masked].tolist())
        per_branch["argmax"].append(token[masked].tolist())
    anchor_tokens = branches[0].window()[anchor_pos].tolist()
    look_tokens = [branches[j + 1].window()[p].item() for j, p in enumerate(look_pos.tolist())]
    return RoundRecord(
        round=r, kind=kind, window_start=w0,
        anchor_positions=(anchor_pos + w0).tolist(), anchor_tokens=anchor_tokens,
        lookahead_positions=(look_pos + w0).tolist(), lookahead_tokens=look_tokens,
        branch_tokens=per_branch["tokens"], branch_positions=per_branch["positions"],
        branch_max_prob=per_branch["max_prob"], branch_conf=per_branch["conf"], branch_argmax=per_branch["argmax"],
        branch_scores=scores,
        branch_rank=verified.ranks or [0] * len(branches),
        winner=winner, block_states=state.states(settings), committed=committed,
        n_cached_blocks=state.n_cached, forward_seconds=verified.seconds,
        round_seconds=time.perf_counter() - start, extra={**verified.extra, **commit_reasons(commits.reasons, w0)},
        forced=list(commits.forced),
        **({} if chains is None else chain_fields(chains[0], chains[1], branches)), **(edit or {}))


def trace_spec(spec) -> dict:
    """The model spec as a trace records it: the commit filter's folder (spec.extra, lopa/filter.py) by its own name
    only, so a shared trace names no path of the machine that made it."""
    data = spec.to_dict()
    if data["extra"].get("commit_filter"):
        data["extra"] = {**data["extra"], "commit_filter": Path(data["extra"]["commit_filter"]).name}
    return data


def commit_reasons(reasons: dict | None, w0: int) -> dict:
    """{"commit_reasons": {reason: generated positions}} for a round's `extra`, where the commit rule said why
    (commit=dawn: lopa.rules.dawn_anchor); {} otherwise."""
    if not reasons:
        return {}
    def shift(item):                          # a window position, or a [j, i] pair of them
        return [w0 + p for p in item] if isinstance(item, list) else w0 + item
    return {"commit_reasons": {name: [shift(item) for item in items] for name, items in reasons.items()}}


def final_record(r: int, anchor: Branch, commits: Commits, settings: DecodeSettings, start: float,
                 committed: int, edit: dict | None = None) -> RoundRecord:
    """The last anchor commit finished the sequence: nothing is left to verify, so no forward."""
    w0 = anchor.window_start
    return RoundRecord(
        round=r, kind="final", window_start=w0, anchor_positions=(commits.positions + w0).tolist(),
        anchor_tokens=anchor.window()[commits.positions].tolist(), lookahead_positions=[], lookahead_tokens=[],
        branch_tokens=[anchor.window().tolist()], branch_positions=[[]], branch_max_prob=[[]], branch_conf=[[]],
        branch_argmax=[[]], branch_scores=[float("inf")], branch_rank=[0], winner=0,
        block_states=anchor.states(settings), committed=committed,
        n_cached_blocks=anchor.n_cached, forward_seconds=0.0, round_seconds=time.perf_counter() - start,
        forced=list(commits.forced), extra=commit_reasons(commits.reasons, w0), **(edit or {}))


def stall_message(record: RoundRecord, settings: DecodeSettings, mask_id: int) -> str:
    """What round `record` did that every later round would repeat, and what to change."""
    picked = [p for p, t in zip(record.anchor_positions, record.anchor_tokens) if t == mask_id]
    shown = ", ".join(map(str, picked[:8])) + (", ..." if len(picked) > 8 else "")
    said = (f"the commit rule picked position{'s' * (len(picked) > 1)} {shown}, where the model's top token is the "
            "mask token, which mask_argmax='authors' writes back (the position stays masked)" if picked
            else "the commit rule picked no position")
    n = len(record.lookahead_positions)
    lost = ("no lookahead branch was tried" if n == 0 else "the lookahead branch that won holds the mask token too"
            if record.winner else "its lookahead branch did not win" if n == 1 else f"none of its {n} lookahead branches won")
    fix = "; use mask_argmax='next_best'" if settings.mask_argmax == "authors" else ""
    return (f"decoding made no progress at round {record.round} and cannot: {said}, and {lost}; every later round "
            f"would repeat it{fix}")


def device_label(executor) -> str:
    """What an executor's forwards run on: "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)"; "" when it does not say.
    A branch-parallel executor's is its rank 0's model's (the other ranks run on devices of the same kind)."""
    device = getattr(executor, "device", None)
    model = getattr(getattr(executor, "shard", None), "model", None)
    if device is None and isinstance(model, torch.nn.Module):
        device = next(model.parameters()).device
    if device is None:
        return ""
    device = torch.device(device)
    return f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)
