"""Forced decisions: scripts that override an order policy round by round.

A script is {round: Forced}: in a given round, commit a position now (with a token, or the model's
own), hold one back, or pin the lookahead. ScriptedOrder wraps any order policy (lopa.order) with
such a script; every decision a round's script leaves open, and every round it does not name, is
the policy's. This is how forks and replays of recorded traces work: script_from_trace turns a
recorded run's decisions into a script that reproduces it. Scripts travel as JSON documents
(SCRIPT_FORMAT), and `--script` also takes a recorded trace (load_script).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from lopa.order import Commits, OrderPolicy, RoundView

SCRIPT_FORMAT = "lopa-script/1"


# -- forced decisions -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Forced:
    """One round's forced decisions. Positions are generated indices (0 = first after the prompt).

    commit: position -> token id, or None for the model's own top token there (committed by the
            anchor this round, whatever the policy says).
    hold: positions kept masked this round (no anchor commit, no lookahead branch) even if they
          pass tau_conf.
    lookahead: the lookahead positions of this round, in rank order (None: the policy's).
    exclusive: the anchor commits exactly `commit`, nothing else (replaying a recorded trace).
    """
    commit: dict = field(default_factory=dict)
    hold: tuple = ()
    lookahead: tuple | None = None
    exclusive: bool = False


class ScriptedOrder:
    """A policy plus forced decisions for some rounds ({round: Forced}); other rounds, and every
    decision a round's script leaves open, follow `base`."""

    def __init__(self, base: OrderPolicy, script: dict[int, Forced]):
        self.base, self.script = base, dict(script)

    def anchor(self, view: RoundView) -> Commits:
        forced = self.script.get(view.round)
        if forced is None:
            return self.base.anchor(view)
        w0 = view.window_start
        _check(view, forced)
        keep = view.masked.clone()
        if forced.exclusive:
            keep[:] = False
        for p in (*forced.hold, *forced.commit):
            keep[p - w0] = False
        chosen = self.base.anchor(replace(view, masked=keep))
        extra = torch.tensor([p - w0 for p in forced.commit], dtype=torch.long)
        extra_tokens = torch.tensor([int(view.token[p - w0]) if t is None else t for p, t in forced.commit.items()],
                                    dtype=torch.long)
        positions = torch.cat([chosen.positions, extra])
        order = positions.argsort()
        tokens = torch.cat([chosen.tokens, extra_tokens])[order]
        record = ([{"action": "commit", "position": p, "token": int(t)} for p, t in
                   zip(forced.commit, extra_tokens.tolist())]
                  + [{"action": "hold", "position": p} for p in forced.hold]
                  + [{"action": "lookahead", "position": p} for p in (forced.lookahead or ())])
        return Commits(positions[order], tokens, record, chosen.reasons)

    def lookahead(self, view: RoundView, free: torch.Tensor) -> torch.Tensor:
        forced = self.script.get(view.round)
        if forced is None:
            return self.base.lookahead(view, free)
        free = free.clone()
        for p in forced.hold:
            free[p - view.window_start] = False
        if forced.lookahead is None:
            return self.base.lookahead(view, free)
        pinned = torch.tensor([p - view.window_start for p in forced.lookahead], dtype=torch.long)
        for p, w in zip(forced.lookahead, pinned.tolist()):
            if not (0 <= w < free.numel()) or not bool(free[w]):
                raise ValueError(f"script round {view.round}: lookahead position {p} is not free at that round "
                                 "(committed by the anchor, held, or not a masked window position)")
        return pinned


def _check(view: RoundView, forced: Forced) -> None:
    """Clear errors for decisions that cannot apply at this round, naming the round and position."""
    r, w0 = view.round, view.window_start
    for p in (*forced.commit, *forced.hold, *(forced.lookahead or ())):
        if not isinstance(p, int) or p < 0 or p >= view.n_tokens:
            raise ValueError(f"script round {r}: position {p!r} is not a generated position at that round "
                             f"(0..{view.n_tokens - 1} are appended so far)")
    for p in (*forced.commit, *forced.hold):
        if p < w0 or not bool(view.masked[p - w0]):
            raise ValueError(f"script round {r}: position {p} is not masked at that round (already committed)")
    for p in set(forced.commit) & set(forced.hold):
        raise ValueError(f"script round {r}: position {p} is both committed and held back")
    for p, t in forced.commit.items():
        if t is None:
            continue
        if not isinstance(t, int) or t < 0 or (view.vocab_size is not None and t >= view.vocab_size):
            top = f"0..{view.vocab_size - 1}" if view.vocab_size else "a non-negative id"
            raise ValueError(f"script round {r}: token id {t!r} at position {p} is outside the vocabulary ({top})")
        if t == view.mask_id:
            raise ValueError(f"script round {r}: position {p} cannot be committed to the mask token ({t})")
    if forced.lookahead is not None and len(forced.lookahead) > view.settings.k:
        raise ValueError(f"script round {r}: {len(forced.lookahead)} lookahead positions but k = {view.settings.k}")


# -- scripts as data: JSON files and recorded traces -----------------------------------------------
def script_from_trace(run, upto: int | None = None) -> dict[int, Forced]:
    """Every decision of a recorded run (rounds 1..upto) as forced decisions: replaying them
    reproduces the run (tokens, forwards, scores) whatever the policy."""
    last = len(run.records) - 1 if upto is None else upto
    return {rec.round: Forced(commit=dict(zip(rec.anchor_positions, rec.anchor_tokens)),
                              lookahead=tuple(rec.lookahead_positions), exclusive=True)
            for rec in run.records[1:last + 1]}


def script_from_json(data) -> dict[int, Forced]:
    """{round: Forced} from a script document: {"format": "lopa-script/1", "rounds": [{"round": r,
    "commit": {"12": 7, "13": null}, "hold": [14], "lookahead": [..], "exclusive": false}, ...]}
    (a bare list of rounds is accepted too). Raises ValueError naming what is wrong."""
    rounds = data.get("rounds") if isinstance(data, dict) else data
    if not isinstance(rounds, list):
        raise ValueError(f"not a LoPA script: expected {{'format': {SCRIPT_FORMAT!r}, 'rounds': [...]}}")
    script = {}
    for i, entry in enumerate(rounds):
        if not isinstance(entry, dict) or not isinstance(entry.get("round"), int) or entry["round"] < 1:
            raise ValueError(f"script entry {i}: needs an integer 'round' >= 1 (round 0 is the prompt forward)")
        r = entry["round"]
        unknown = set(entry) - {"round", "commit", "hold", "lookahead", "exclusive"}
        if unknown:
            raise ValueError(f"script round {r}: unknown keys {sorted(unknown)}")
        try:
            commit = {int(p): (None if t is None else int(t)) for p, t in dict(entry.get("commit", {})).items()}
            hold = tuple(int(p) for p in entry.get("hold", []))
            look = entry.get("lookahead")
            look = None if look is None else tuple(int(p) for p in look)
        except (TypeError, ValueError):
            raise ValueError(f"script round {r}: positions and tokens must be integers "
                             "(commit: {\"position\": token or null}, hold: [positions])") from None
        if r in script:
            raise ValueError(f"script round {r} appears twice")
        script[r] = Forced(commit, hold, look, bool(entry.get("exclusive", False)))
    return script


def script_to_json(script: dict[int, Forced]) -> dict:
    rounds = [{"round": r, "commit": {str(p): t for p, t in f.commit.items()}, "hold": list(f.hold),
               **({"lookahead": list(f.lookahead)} if f.lookahead is not None else {}),
               **({"exclusive": True} if f.exclusive else {})} for r, f in sorted(script.items())]
    return {"format": SCRIPT_FORMAT, "rounds": rounds}


def load_script(path: str | Path):
    """(script, trace): a script file, or a recorded trace (.json / .parquet) whose decisions
    become the script; `trace` is that RunResult (None for a plain script)."""
    from lopa.schema import OLD_FORMATS
    from lopa.trace import TRACE_FORMAT, RunResult
    path = Path(path)
    if path.suffix == ".parquet":
        run = RunResult.load(path)
        return script_from_trace(run), run
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"script {path.name} is not JSON: {err}") from None
    if isinstance(data, dict) and (data.get("format") == TRACE_FORMAT or data.get("format") in OLD_FORMATS):
        run = RunResult.from_json(json.dumps(data))
        return script_from_trace(run), run
    return script_from_json(data), None
