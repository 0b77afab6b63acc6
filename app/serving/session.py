"""Per-user session state (held in a gr.State), the names of the settings inputs and the backend (a click's
request is read from them by app/serving/request.py).

A Session holds plain data only, so that the model can run behind a process boundary (ZeroGPU,
app/serving/gpu.py): a decode is a job (plain values) given to app/serving/boundary.py, whose chunks (records,
tokens, token names) the session assembles into `session.run`, a RunResult snapshot. Run takes the
chunks of one call to the end, Step one chunk, Stop stops taking them; a paused decode continues
from its trace. The UI never touches engine tensors.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import weakref
from dataclasses import dataclass, field

import gradio as gr

from lopa import DecodeSettings, RunResult
from lopa.settings import SETTINGS
from lopa.trace import RoundRecord

from .boundary import forget_runs, trace_of
from .budget import Read, return_freed_memory
from .inputs import choice, shown, whole
from .runs import RunTree

# The settings inputs: every setting the registry (lopa.settings.SETTINGS) marks for the app, in its
# order. The panel builds them, the wiring passes them and the callbacks read them by these names.
SETTING_NAMES = tuple(name for name, spec in SETTINGS.items() if spec.app)
# The app's own starting point: the engine's defaults (the paper's GSM8K row, Table 5) with k and
# length cut for a CPU.
APP_DEFAULTS = {**{name: SETTINGS[name].default for name in SETTING_NAMES}, "k": 4, "max_new_tokens": 64}
# The backend inputs follow the settings inputs (optional: callers that leave them out get single process).
BACKEND_NAMES = ("backend", "workers")
SINGLE, BRANCH_PARALLEL = "single process", "branch-parallel"
WORKER_RANGE = (2, 4)        # ranks of a branch-parallel group (each holds a model replica)
# Forks resume from a copy of the prefix cache saved after every round, or replay the parent's
# recorded decisions (same result, more forwards). Below MIN a replay costs less than a page
# refresh (the bundled model: ~8 ms a forward) while the copies cost ~1 MB a run in every
# session, which grew a Space's memory with its visitors; past MAX (a 7B model: tens of MB a
# round) the copies are too large. Between the two the decoding process keeps them for the few newest
# runs of all sessions together (app/serving/boundary.py, MAX_KEPT); sessions never hold them.
KEEP_STATES_MIN_PARAMS = 10_000_000
KEEP_STATES_MAX_PARAMS = 100_000_000


@dataclass(frozen=True)
class Backend:
    """Where the LoPA decode runs: this process (workers = 1) or a branch-parallel group of W ranks."""
    kind: str = SINGLE
    workers: int = 1

    @property
    def parallel(self) -> bool:
        return self.kind == BRANCH_PARALLEL

    def __str__(self) -> str:
        return f"branch-parallel, {self.workers} ranks" if self.parallel else "single process"


def backend_from_ui(kind=SINGLE, workers=WORKER_RANGE[0]) -> Backend:
    """Backend from the panel's (backend, workers). Raises ValueError with a message for the page.
    Workers are read whatever the backend (every input of an endpoint is), used by branch-parallel."""
    kind = choice("backend", kind, (SINGLE, BRANCH_PARALLEL))
    workers = whole("workers (ranks of the branch-parallel backend)", workers, *WORKER_RANGE)
    return Backend() if kind == SINGLE else Backend(BRANCH_PARALLEL, workers)


class LiveRun:
    """A decode running behind the GPU boundary (app/serving/boundary.py), assembled from its chunks: the
    header of its first chunk (or the run it continues), its records, its token names."""

    def __init__(self, job: dict, header: dict | None = None, records=(), names: dict | None = None):
        self.job, self.header, self.records = job, header, list(records)
        self.names = names if names is not None else {}      # shared with the run list entry
        self.run: RunResult | None = None
        self.finished = False

    def apply(self, chunk: dict):
        """Take one chunk; returns its record (None if it has none). An error chunk raises ValueError
        (the user's input, or a decode worker that stopped: a message for the page) or RuntimeError (a
        branch-parallel fault)."""
        if "error" in chunk:
            raise (RuntimeError if chunk.get("kind") == "fault" else ValueError)(chunk["error"])
        self.header = self.header or chunk.get("header")
        new = [RoundRecord.from_dict(r) for r in chunk["records"]]
        self.records += new
        self.names.update({int(i): text for i, text in chunk["names"]})
        self.finished = bool(chunk["finished"])
        if self.header is not None and self.records:
            self.run = RunResult(**self.header, records=list(self.records), tokens=list(chunk["tokens"]),
                                 text=chunk["text"], stopped=not self.finished)
        return new[-1] if new else None


@dataclass
class Session:
    """One browser session: its runs and the decode it may continue. Holds plain data only; the
    model runs behind app/serving/boundary.py, which gets a job (plain values) and gives chunks back."""
    run: RunResult | None = None          # what the page shows: live snapshot or loaded trace
    names: dict = field(default_factory=dict)   # token id -> string for the figures
    source: str = "idle"                  # "idle" | "live" | "replay"
    live: LiveRun | None = None           # the unfinished decode (paused, or streaming right now)
    key: tuple | None = None              # (prompt, settings, backend) the live decode decodes
    streaming: bool = False               # a Run callback is draining the decode right now
    searching: bool = False               # the best-order search (app/panels/best_order.py) runs from this session's run
    stop_requested: bool = False
    elapsed_before: float = 0.0           # wall clock spent in earlier Run/Step calls of this decode
    active_since: float | None = None
    # When each kind of heavy output ("html", "plots") was last sent while streaming; never yet.
    last_render: dict = field(default_factory=lambda: {"html": float("-inf"), "plots": float("-inf")})
    compare: tuple | None = None          # (baseline RunResult, LoPA RunResult) of the last comparison
    backend: Backend = field(default_factory=Backend)   # of the live decode
    runs: RunTree = field(default_factory=RunTree)      # every run of this session, forks under their parent
    current: str | None = None            # id of the run the page shows
    runs_changed: bool = False            # the run list needs redrawing
    model: str | None = None              # the folder of the model this visitor picked (app/serving/models.py); None: the default
    canvas_model: str | None = None       # the DiffusionGemma folder this visitor picked (app/panels/denoise/ decodes it)
    # The settings inputs this visitor set (by hand, a preset, a link): their request (app/serving/request.py); the others
    # show the model's own values. None until the page loads: a caller with no page sets every input it sends.
    touched: frozenset | None = None
    shown_arriving: bool = False          # the first fast Run's rounds were shown again (callbacks.show_rounds_arriving)
    # A page (not an API caller: share.on_load sets it) gets a Run's final figures when it scrolls to them
    # (callbacks.draw_figures); figures_stale: the figures shown are not the run's last ones yet.
    page: bool = False
    figures_stale: bool = False
    view_moves: int = 0                   # the visitor moved the slider or pressed Play this many times ...
    moves_at_end: int = 0                 # ... and this many when the last Run ended: none since, the replay may run

    # -- lifecycle of one decode -----------------------------------------------------------
    def begin(self, model: str, prompt: str, settings: DecodeSettings, backend: Backend = Backend(),
              keep_states: bool = False, rounds: int | None = None) -> dict:
        """Start a new decode of the model in folder `model` (any previous live one is dropped); returns
        its job for the boundary."""
        self.close()
        job = {"model": model, "prompt": prompt, "settings": settings.to_dict(), "workers": backend.workers,
               "rounds": rounds, "keep_states": keep_states, "resume": None}
        self.key, self.source, self.backend = (prompt, settings, backend), "live", backend
        note = (f"{settings.order}" + (f" (seed {settings.order_seed})" if settings.order == "random" else "")
                + (f", floor {settings.lookahead_min_prob:g}" if settings.lookahead_min_prob else "")
                + (f", commit {settings.commit}" if settings.commit != "threshold" else ""))
        entry = self.runs.add(f"{note}, k = {settings.k}")
        entry.model = model
        self._new_entry(entry)
        self.live = LiveRun(job, names=entry.names)
        return job

    def resume(self, rounds: int | None = None) -> dict:
        """The job that continues the live decode (matches() said there is one)."""
        run = self.run
        job = {**self.live.job, "rounds": rounds,
               "resume": {"kind": "continue", "run_id": run.run_id, "trace": trace_of(run)}}
        self.live = LiveRun(job, self.live.header, self.live.records, self.live.names)
        return job

    def begin_fork(self, parent_id: str, at_round: int, commit: dict, hold: list, note: str,
                   keep_states: bool = False, model: str | None = None) -> dict:
        """Start a fork of run `parent_id`: identical through `at_round`, the forced decisions in the
        next round, then the run's own policy (lopa.engine.Decoder.stream_fork). `model`: the folder of
        the model that made the run (default: the one its entry names). Returns its job."""
        parent = self.runs[parent_id]
        model = model or parent.model
        self.close()
        job = {"model": model, "prompt": parent.run.prompt, "settings": parent.run.settings,
               "workers": 1, "rounds": None, "keep_states": keep_states,
               "resume": {"kind": "fork", "trace": trace_of(parent.run), "at_round": at_round,
                          "commit": {str(p): t for p, t in commit.items()}, "hold": list(hold)}}
        self.source, self.backend = "live", Backend()
        self.key = ("fork", parent_id, at_round, tuple(commit.items()), tuple(hold))   # Run never continues it
        entry = self.runs.add(note, parent=parent_id, at_round=at_round, names=parent.names)
        entry.model = model
        self._new_entry(entry)
        self.live = LiveRun(job, records=parent.run.records[:at_round + 1], names=entry.names)
        return job

    def _new_entry(self, entry) -> None:
        self.current, self.runs_changed = entry.id, True
        self.run, self.names, self.elapsed_before = None, entry.names, 0.0
        self.last_render = {kind: float("-inf") for kind in self.last_render}

    def _sync(self) -> None:
        """The current run list entry follows the live snapshot."""
        entry = self.runs.entries.get(self.current)
        if entry is not None and self.run is not None and self.source == "live" and entry.run is not self.run:
            self.runs_changed |= entry.run is None
            entry.run = self.run

    def apply(self, chunk: dict):
        """Take one chunk of the live decode (app/serving/boundary.py). Returns its RoundRecord (None if it
        has none). Raises ValueError (empty / over-long prompt, from the first round) or RuntimeError
        (a branch-parallel fault) from an error chunk; the decode is then over."""
        live = self.live
        if live is None:            # a view event beside the model slot (a trace opened, a run picked) closed it
            raise ValueError("another action on this page ended this decode (a trace opened, a run picked or "
                             "Reset): press Run to decode again")
        try:
            record = live.apply(chunk)
        except ValueError:          # raised before any round: nothing to keep
            entry = self.runs.entries.get(self.current)
            if entry is not None and entry.run is None:
                self.runs.remove(entry.id)
                self.current = None
            self.close()
            self.source = "idle" if self.run is None else self.source
            raise
        self.run = live.run if live.run is not None else self.run
        self._sync()
        if live.finished:
            self.live, self.runs_changed = None, True
        return record

    def check_free(self) -> None:
        """ValueError while this session's best-order search runs. The search runs beside the model slot
        (app/panels/events.py, LONG), so this session's Run, Step, forks, Compare and model choice could start
        meanwhile; they would share its stop flag and run list."""
        if self.searching:
            raise ValueError("this session's best-order search is still running: wait for it or press its Stop")

    def select(self, run_id: str) -> None:
        """Show another run of the list (a paused decode is stopped first; it stays in the list)."""
        self.check_free()
        if not isinstance(run_id, str) or run_id not in self.runs or self.runs[run_id].run is None:
            raise ValueError(f"no run {shown(run_id)} in the run list")
        self.cancel()
        self.close()
        entry = self.runs[run_id]
        self.current, self.run, self.names, self.source = run_id, entry.run, entry.names, entry.source
        self.elapsed_before = 0.0

    def matches(self, prompt: str, settings: DecodeSettings, backend: Backend = Backend()) -> bool:
        """Is there a live decode of exactly this prompt, these settings and backend to continue?"""
        return self.live is not None and self.live.run is not None and self.key == (prompt, settings, backend)

    def cancel(self) -> None:
        """Stop the live decode after the round already computed; the snapshot says stopped."""
        if self.live is not None:
            self.live = None
            if self.run is not None and self.source == "live":
                self.run = dataclasses.replace(self.run, stopped=True)
                self._sync()
                self.runs_changed = True

    def close(self) -> None:
        self.live, self.key = None, None

    def replay(self, run: RunResult, names: dict, read: Read | None = None) -> None:
        """Show a loaded trace; no model involved. ValueError, with the session unchanged, when it is
        over the memory budget (app/serving/budget.py). `read`: the read that built it, whose charge it takes."""
        entry = self.runs.add("loaded trace", names=names, source="replay", run=run, read=read)
        self.close()
        self.current, self.runs_changed = entry.id, True
        self.run, self.names, self.source, self.elapsed_before = run, names, "replay", 0.0

    # -- wall clock -------------------------------------------------------------------------
    def start_clock(self) -> None:
        self.active_since = time.perf_counter()

    def stop_clock(self) -> None:
        if self.active_since is not None:
            self.elapsed_before += time.perf_counter() - self.active_since
            self.active_since = None

    @property
    def elapsed(self) -> float:
        running = time.perf_counter() - self.active_since if self.active_since is not None else 0.0
        return self.elapsed_before + running

    @property
    def n_rounds(self) -> int:
        return len(self.run.records) if self.run is not None else 0

    def run_choices(self) -> list[tuple[str, str]]:
        """The run list's choices, the live decode (paused after Step, or streaming) named as such, not
        "stopped" (its snapshot is unfinished, but nobody stopped it)."""
        live = self.current if self.live is not None else None
        return self.runs.choices(live, "running" if self.streaming else "paused")

    def status(self) -> str:
        """One word for the counters' badge."""
        if self.source == "replay":
            return "replay"
        if self.streaming:                   # from its start, before its first round
            return "running"
        if self.run is None:
            return "idle"
        if self.live is not None:
            return "paused"
        return "stopped" if self.run.stopped else "done"


# A session's model events run one at a time, in the order they came, as when the server had one model slot:
# with decode workers it has one per worker (app/panels/events.py MODEL), and two events of one page (Run and a run's
# selection, a Step, a model pick, a tour step and its Close) would otherwise race on its run list and
# snapshots. Other sessions' events run beside them.
TURN_WAIT_S = 600.0


class Turn:
    """A first-come first-served lock: each acquire() takes a ticket and waits for it to be served."""

    def __init__(self):
        self._changed = threading.Condition()
        self._next = self._serving = 0
        self._gone: set[int] = set()          # tickets whose holder stopped waiting

    def acquire(self, timeout: float) -> bool:
        with self._changed:
            ticket, self._next = self._next, self._next + 1
            if self._changed.wait_for(lambda: self._serving == ticket, timeout=timeout):
                return True
            self._gone.add(ticket)
            return False

    def release(self) -> None:
        with self._changed:
            self._serving += 1
            while self._serving in self._gone:
                self._gone.remove(self._serving)
                self._serving += 1
            self._changed.notify_all()


_turns: dict[int, Turn] = {}
_turns_lock = threading.Lock()


def take_turn(session) -> Turn | None:
    """Wait (at most TURN_WAIT_S) for `session`'s earlier model events to end, and hold its turn: the caller
    releases what this returns (None for a value that is not a Session: an API caller's missing state).
    Raises gr.Error when the wait runs out."""
    if not isinstance(session, Session):
        return None
    with _turns_lock:
        turn = _turns.get(id(session))
        if turn is None:
            turn = _turns[id(session)] = Turn()
            weakref.finalize(session, _turns.pop, id(session), None)
    if not turn.acquire(timeout=TURN_WAIT_S):
        raise gr.Error(f"this page's previous action on the model is still running after {TURN_WAIT_S:.0f} s: "
                       "press Stop, or wait for it", print_exception=False)
    return turn


def forkable(loaded, backend: Backend) -> bool:
    """Keep per-round states (forks resume from them) for a mid-sized model in this process."""
    n = getattr(loaded, "n_params", 0)
    return not backend.parallel and KEEP_STATES_MIN_PARAMS <= n <= KEEP_STATES_MAX_PARAMS


# A session lives this long after its last change, then Gradio drops it and end_session frees
# what it holds (a closed page sooner: end_page).
SESSION_TTL_S = 30 * 60


def end_session(session: Session) -> None:
    """Gradio's delete callback for an expired or closed session: stop its decode, drop its runs."""
    if isinstance(session, Session):
        runs = [entry.run for entry in session.runs.entries.values()] + [getattr(session.live, "run", None)]
        forget_runs({getattr(run, "run_id", "") for run in runs if run is not None})
        session.close()
        session.runs, session.run, session.compare, session.names = RunTree(), None, None, {}
        return_freed_memory()                    # the runs just freed: back to the system, not kept by malloc
