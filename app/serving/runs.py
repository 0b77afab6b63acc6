"""The run list of one session: the original runs, their forks and forks of forks, as a small tree.

Ids spell the tree: run "2" is the second original, "2.1" its first fork, "2.1.3" that fork's
third fork; the tour's recorded runs are "tour 1" and "tour 2". Each entry keeps the latest RunResult
snapshot (live while it decodes) and its token names. Labels are plain text (gradio renders radio
labels as text, not HTML).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

from lopa import RunResult
from lopa.problems import final_answer
from lopa.trace import metrics

from .budget import HOLD_BYTES, LEDGER, Read, held_bytes, mb, return_freed_memory

INDENT = "\u2003\u2003"          # em spaces: radio labels collapse ordinary ones
# A session's memory is bounded: at most MAX_RUNS runs, and its loaded traces within the half of its
# byte budget that holds them (app/serving/budget.py); the oldest original run and its forks go first. Runs here are plain data; saved
# per-round states stay in the decoding process (app/serving/boundary.py), never in a session.
MAX_RUNS = 24


def answer_label(before: str, after: str) -> str:
    """A fork against its parent, in a few words: the final `#### N` answer changed, or only the working."""
    if before == after:
        return "same answer"
    return "working changed, same answer" if final_answer(before or "") == final_answer(after or "") else "answer changed"


@dataclass
class RunEntry:
    id: str
    note: str                            # what makes this run: "confidence, k = 4", "fill 12 = '7' @ round 2"
    run: RunResult | None = None         # None until its first round arrives
    names: dict = field(default_factory=dict)
    parent: str | None = None
    at_round: int | None = None          # a fork's round: identical to the parent through it
    source: str = "live"                 # "live" (decoded here) or "replay" (loaded from a file)
    held: int = 0                        # bytes charged to the budgets (loaded traces)
    model: str | None = None             # the folder of the model that decoded it (None: a loaded trace)


class RunTree:
    def __init__(self, budget: int = HOLD_BYTES):
        self.entries: dict[str, RunEntry] = {}
        self._children: dict = {}      # parent id (or ("series", series) for originals) -> children so far
        self.budget = budget
        self._charges: dict[str, weakref.finalize] = {}     # run id -> gives its bytes back once

    @property
    def held(self) -> int:
        return sum(e.held for e in self.entries.values())

    def __getitem__(self, run_id: str) -> RunEntry:
        return self.entries[run_id]

    def __contains__(self, run_id) -> bool:
        return run_id in self.entries

    def add(self, note: str, parent: str | None = None, at_round: int | None = None, names: dict | None = None,
            source: str = "live", run: RunResult | None = None, read: Read | None = None,
            series: str = "") -> RunEntry:
        """A new run under `parent`. A loaded trace (source "replay") is charged its bytes, in place of
        the charge of the `read` that built it: the oldest runs it needs room for go first; ValueError,
        with nothing changed, where it cannot fit. An original run of a `series` ("tour ") is numbered
        in it ("tour 1"), so the tour's runs leave the visitor's own runs numbered from 1."""
        held = held_bytes(run) if source == "replay" and run is not None else 0
        evicted = self._room_for(held)
        if held:
            LEDGER.charge(held, freed_first=sum(self.entries[i].held for i in evicted), read=read)
        for run_id in evicted:
            self._drop_tree(run_id)
        key = parent if parent is not None else ("series", series)
        n = self._children[key] = self._children.get(key, 0) + 1
        run_id = f"{series}{n}" if parent is None else f"{parent}.{n}"
        entry = RunEntry(run_id, note, run, dict(names or {}), parent, at_round, source, held)
        self.entries[run_id] = entry
        if held:
            # given back when the entry is dropped, or when the tree goes with its session
            self._charges[run_id] = weakref.finalize(entry, LEDGER.release, held)
        self.trim(keep=run_id)
        if evicted:
            return_freed_memory()
        return entry

    def _room_for(self, nbytes: int) -> list[str]:
        """The oldest original runs (each with its forks) to drop so that `nbytes` more fit the budget."""
        if nbytes > self.budget:
            raise ValueError(f"this trace takes {mb(nbytes)} in memory; a session may hold {mb(self.budget)} of "
                             "loaded traces: load a shorter run")
        roots = [e.id for e in self.entries.values() if e.parent is None]
        held, evicted = self.held, []
        while held + nbytes > self.budget and roots:
            root = roots.pop(0)
            evicted.append(root)
            held -= sum(e.held for e in self.entries.values() if e.id == root or e.id.startswith(root + "."))
        return evicted

    def trim(self, keep: str) -> None:
        """Enforce MAX_RUNS (see above); `keep` and its ancestors always stay."""
        protected = {keep}
        node = self.entries.get(keep)
        while node is not None and node.parent is not None:
            protected.add(node.parent)
            node = self.entries.get(node.parent)
        roots = [e.id for e in self.entries.values() if e.parent is None and e.id not in protected]
        while len(self.entries) > MAX_RUNS and roots:
            self._drop_tree(roots.pop(0))

    def _drop_tree(self, run_id: str) -> None:
        for child in [e.id for e in self.entries.values() if e.parent == run_id]:
            self._drop_tree(child)
        self.remove(run_id)

    def remove(self, run_id: str) -> None:
        self.entries.pop(run_id, None)
        charge = self._charges.pop(run_id, None)
        if charge is not None:
            charge()

    def ready(self) -> list[RunEntry]:
        """Entries with at least one round, depth first (each fork right under its parent)."""
        out = []

        def walk(parent):
            for entry in self.entries.values():
                if entry.parent == parent:
                    if entry.run is not None and entry.run.records:
                        out.append(entry)
                    walk(entry.id)
        walk(None)
        return out

    def label(self, entry: RunEntry, unfinished: str = "") -> str:
        """The run list's line for `entry`; `unfinished` ("paused", "running"): the word for a decode that is
        still live (its snapshot is not finished, but it was not stopped either)."""
        m = metrics(entry.run)
        depth = entry.id.count(".")
        answer = " ".join(entry.run.text.split())
        answer = answer if len(answer) <= 28 else answer[:27] + "…"
        parent = self.entries.get(entry.parent)
        changed = ""
        if parent is not None and parent.run is not None:
            changed = " · " + answer_label(parent.run.text, entry.run.text)
        state = f" · {unfinished}" if unfinished else " · stopped" if entry.run.stopped else ""
        model = entry.run.spec.get("name") or "?"
        return (f"{INDENT * depth}{'└ ' if depth else ''}run {entry.id} · {model} · {entry.note} · {m['rounds']} rounds · "
                f"{m['forwards']} forwards · TPF {m['tpf_useful']:.2f} · answer “{answer}”{changed}{state}")

    def choices(self, live: str | None = None, unfinished: str = "paused") -> list[tuple[str, str]]:
        """(line, id) of every run shown; the run `live` (the session's live decode) reads `unfinished`."""
        return [(self.label(e, unfinished if e.id == live else ""), e.id) for e in self.ready()]

    def default_pair(self, current: str | None) -> tuple[str | None, str | None]:
        """What Compare runs starts with: the current run against its parent (a fork) or the run
        before it in the list."""
        ready = [e.id for e in self.ready()]
        if current not in ready:
            return (ready[-2] if len(ready) > 1 else None), (ready[-1] if ready else None)
        parent = self.entries[current].parent
        if parent in ready:
            return parent, current
        i = ready.index(current)
        return (ready[i - 1] if i > 0 else (ready[1] if len(ready) > 1 else None)), current
