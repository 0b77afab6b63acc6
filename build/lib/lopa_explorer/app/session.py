"""Per-user session state (held in a gr.State) and the settings the panel describes.

A Session owns at most one live decode: the engine's `Decoder.stream` generator. Run drains it,
Step pulls one record from it, Stop closes it. Everything the figures read is `session.run`, a
RunResult snapshot (plain CPU data), so the UI never touches engine tensors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from lopa import DecodeSettings, RunResult

from .models import token_names

# Order of the settings inputs, shared by the panel (build_settings_panel) and the callbacks.
SETTING_NAMES = ("k", "tau_conf", "tau_add", "tau_act", "block_size", "max_new_tokens", "confidence", "attention",
                 "temperature", "seed")
INT_SETTINGS = {"k", "block_size", "max_new_tokens", "seed"}
# The app's own starting point: the paper's GSM8K row (Table 5) with k and length cut for a CPU.
APP_DEFAULTS = dict(k=4, tau_conf=0.9, tau_add=0.1, tau_act=0.95, block_size=32, max_new_tokens=64,
                    confidence="neg_entropy", attention="block_causal", temperature=0.0, seed=0)
# The backend inputs follow the settings inputs (optional: callers that leave them out get single process).
BACKEND_NAMES = ("backend", "workers")
SINGLE, BRANCH_PARALLEL = "single process", "branch-parallel"
WORKER_RANGE = (2, 4)        # ranks of a branch-parallel group (each holds a model replica)


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


def backend_from_ui(choice=SINGLE, workers=WORKER_RANGE[0]) -> Backend:
    """Backend from the panel's (backend, workers). Raises ValueError with a message for the page."""
    choice = str(choice or SINGLE)
    if choice == SINGLE:
        return Backend()
    if choice != BRANCH_PARALLEL:
        raise ValueError(f"unknown backend {choice!r}: choose {SINGLE!r} or {BRANCH_PARALLEL!r}")
    n = _as_int("workers", workers)
    lo, hi = WORKER_RANGE
    if not lo <= n <= hi:
        raise ValueError(f"workers must be between {lo} and {hi} ranks for the branch-parallel backend, got {n}")
    return Backend(BRANCH_PARALLEL, n)


def parse_ui(*values) -> tuple[DecodeSettings, Backend]:
    """(settings, backend) from the settings inputs, optionally followed by the backend inputs."""
    n = len(SETTING_NAMES)
    if len(values) not in (n, n + len(BACKEND_NAMES)):
        raise ValueError(f"expected {n} settings (and optionally {len(BACKEND_NAMES)} backend values), "
                         f"got {len(values)}")
    return settings_from_ui(*values[:n]), backend_from_ui(*values[n:])


def _as_int(name: str, value) -> int:
    if value is None or value == "":
        raise ValueError(f"{name} is empty: type a whole number")
    number = float(value)
    if not number.is_integer():
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(number)


def settings_from_ui(*values) -> DecodeSettings:
    """DecodeSettings from the panel's values (in SETTING_NAMES order). Raises ValueError with a
    message for the page when a value is missing or out of range (DecodeSettings validates)."""
    if len(values) != len(SETTING_NAMES):
        raise ValueError(f"expected {len(SETTING_NAMES)} settings, got {len(values)}")
    fields = {}
    for name, value in zip(SETTING_NAMES, values):
        if name in INT_SETTINGS:
            fields[name] = _as_int(name, value)
        elif name in ("confidence", "attention"):
            fields[name] = str(value)
        else:
            if value is None or value == "":
                raise ValueError(f"{name} is empty: type a number")
            fields[name] = float(value)
    return DecodeSettings(**fields)


@dataclass
class Session:
    run: RunResult | None = None          # what the page shows: live snapshot or loaded trace
    names: dict = field(default_factory=dict)   # token id -> string for the figures
    source: str = "idle"                  # "idle" | "live" | "replay"
    stream: object = None                 # the live Decoder.stream generator, None when none
    decoder: object = None
    tokenizer: object = None
    key: tuple | None = None              # (prompt, settings) the live stream decodes
    streaming: bool = False               # a Run callback is draining the stream right now
    stop_requested: bool = False
    elapsed_before: float = 0.0           # wall clock spent in earlier Run/Step calls of this decode
    active_since: float | None = None
    # When each kind of heavy output ("html", "plots") was last sent while streaming; never yet.
    last_render: dict = field(default_factory=lambda: {"html": float("-inf"), "plots": float("-inf")})
    compare: tuple | None = None          # (baseline RunResult, LoPA RunResult) of the last comparison
    backend: Backend = field(default_factory=Backend)   # of the live decode

    # -- lifecycle of one decode -----------------------------------------------------------
    def begin(self, loaded, prompt: str, settings: DecodeSettings, executor: str = "batched",
              backend: Backend = Backend()) -> None:
        """Start a new decode (any previous live one is closed first). `loaded`: a LoadedModel, or
        for a branch-parallel backend the BPGroup (anything with .decoder(settings) and .tokenizer)."""
        self.close()
        self.decoder = loaded.decoder(settings) if backend.parallel else loaded.decoder(settings, executor=executor)
        self.stream = self.decoder.stream(prompt)
        self.tokenizer, self.key, self.source = loaded.tokenizer, (prompt, settings, backend), "live"
        self.backend = backend
        self.run, self.names, self.elapsed_before = None, {}, 0.0
        self.last_render = {kind: float("-inf") for kind in self.last_render}

    def matches(self, prompt: str, settings: DecodeSettings, backend: Backend = Backend()) -> bool:
        """Is there a live decode of exactly this prompt, these settings and backend to continue?"""
        return self.stream is not None and self.key == (prompt, settings, backend)

    def pull(self):
        """Advance the live decode by one round. Returns the new RoundRecord, or None when it is
        finished. Raises ValueError (empty / over-long prompt) from the engine's first round."""
        try:
            record = next(self.stream)
        except StopIteration:
            self.stream = None
            self.run = self.decoder.result() if self.decoder.records else self.run
            return None
        except ValueError:          # raised before any round: nothing to keep
            self.close()
            self.source = "idle" if self.run is None else self.source
            raise
        self.run = self.decoder.result()
        new = {t for row in record.branch_argmax for t in row} | set(record.anchor_tokens) | set(record.lookahead_tokens)
        new -= self.names.keys()
        if new and self.tokenizer is not None:
            self.names.update(token_names(self.tokenizer, new))
        return record

    def cancel(self) -> None:
        """Stop the live decode after the round already computed; the snapshot says stopped."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None
            if self.decoder is not None and self.decoder.records:
                self.run = self.decoder.result()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        self.stream, self.decoder, self.key = None, None, None

    def replay(self, run: RunResult, names: dict) -> None:
        """Show a loaded trace; no model involved."""
        self.close()
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

    def status(self) -> str:
        """One word for the counters' badge."""
        if self.source == "replay":
            return "replay"
        if self.run is None:
            return "idle"
        if self.streaming:
            return "running"
        if self.stream is not None:
            return "paused"
        return "stopped" if self.run.stopped else "done"


def new_session() -> Session:
    return Session()
