"""What loaded traces may hold in memory: a byte budget per session and one for the whole app.

Each trace a visitor loads is charged the bytes its RunResult holds (`held_bytes`, measured on the
objects themselves, not estimated from counts). A session's budget, SESSION_BUDGET_BYTES, is two
halves: HOLD_BYTES for the loaded traces it keeps, and lopa.read_budget.READ_BYTES for reading the next
one, whose peak is bounded before each step that spends it (lopa.read_budget.check_read: read_cost for
JSON, lopa.parquet_trace for Parquet). So a read never needs the kept runs gone first (a file that
fails to load costs none of them), and the session's peak stays within its budget. Its loaded
traces stay within HOLD_BYTES: a new one first evicts the session's oldest loaded runs that it needs
room for (app/serving/runs.py), and one bigger than the whole budget is refused. All sessions together stay
within APP_BUDGET_BYTES, reads in progress included: a read is charged its bound for as long as it
runs (`Ledger.reading_trace`), so reads in several sessions at once cannot together overrun the app; a
read, or a trace that does not fit even after its own session's evictions, is refused with a
message giving the size and the limit. An evicted run gives its bytes back, and the allocator is
asked to return freed memory to the system, so the process's RSS comes down too.

    LOPA_SESSION_MEMORY_MB   per session (default 192: 96 to hold traces, 96 to read one)
    LOPA_APP_MEMORY_MB       all sessions together (default 1024)

The defaults fit a CPU Space (16 GB; the app itself, model included, takes ~0.4 GB). Live runs are
not charged: the settings' ranges and the run list's MAX_RUNS bound them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading

from lopa.read_budget import READ_BYTES, TRACE_MEMORY_BYTES

SESSION_BUDGET_BYTES = TRACE_MEMORY_BYTES
HOLD_BYTES = SESSION_BUDGET_BYTES - READ_BYTES
APP_BUDGET_BYTES = int(os.environ.get("LOPA_APP_MEMORY_MB", "1024")) << 20
if APP_BUDGET_BYTES < SESSION_BUDGET_BYTES:
    raise ValueError(f"LOPA_APP_MEMORY_MB ({APP_BUDGET_BYTES >> 20}) must be at least LOPA_SESSION_MEMORY_MB "
                     f"({SESSION_BUDGET_BYTES >> 20}): one session's trace must fit the app")


def held_bytes(obj) -> int:
    """Bytes held by `obj` and everything it reaches through containers and instance attributes,
    each object counted once (interned strings and small ints, shared by every run, count once), as
    the allocator lays them out: rounded up to its 16-byte blocks, and a container's item array is
    a block of its own (a float's 24 bytes take 32; RSS sees the 32)."""
    seen, total, stack = set(), 0, [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        size = sys.getsizeof(item)
        if isinstance(item, (list, dict, set, frozenset)):
            size += 16
        total += (size + 15) & ~15
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            stack.append(item.__dict__)
    return total


def mb(n: int) -> str:
    return f"{n / (1 << 20):.0f} MB" if n >= 1 << 20 else f"{n / 1024:.0f} KB"


class Ledger:
    """The bytes all sessions' loaded traces hold, and those their reads in progress may take, against
    APP_BUDGET_BYTES (thread-safe: Gradio runs callbacks of different sessions on different threads)."""

    def __init__(self, budget: int):
        self.budget, self.held, self.reading = budget, 0, 0
        self._lock = threading.Lock()

    def charge(self, nbytes: int, freed_first: int = 0, read: Read | None = None) -> None:
        """Take `nbytes` once `freed_first` bytes are given back; ValueError if that does not fit. The
        bytes of `read`, the read that built what is charged (its bound covers it), become this charge."""
        with self._lock:
            own = read.nbytes if read is not None and read.ledger is self else 0
            others = self.reading - own
            if self.held - freed_first + others + nbytes > self.budget:
                raise ValueError(f"the app holds {mb(self.held)} of loaded traces and {mb(others)} for reads in "
                                 f"progress, for all visitors, and may hold {mb(self.budget)}; this trace needs "
                                 f"{mb(nbytes)}: try again later, or load a shorter trace")
            self.held += nbytes
            if read is not None and read.ledger is self:
                self.reading, read.nbytes = others, 0

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.held = max(0, self.held - nbytes)

    @contextlib.contextmanager
    def reading_trace(self):
        """A read charged to the app while it runs: pass its `reserve` to RunResult.load, which calls it
        with the bound on the read's peak before each step; given back when the read ends, however."""
        read = Read(self)
        try:
            yield read
        finally:
            read.reserve(0)


class Read:
    """One read in progress and the bytes it is charged (Ledger.reading_trace)."""

    def __init__(self, ledger: Ledger):
        self.ledger, self.nbytes = ledger, 0

    def reserve(self, nbytes: int) -> None:
        """Charge this read `nbytes` from now on (more or less than before); ValueError, with the charge
        unchanged, where the app cannot cover it."""
        ledger = self.ledger
        with ledger._lock:
            more = nbytes - self.nbytes
            if more > 0 and ledger.held + ledger.reading + more > ledger.budget:
                raise ValueError(f"reading this trace may take {mb(nbytes)}; the app holds {mb(ledger.held)} of "
                                 f"loaded traces and {mb(ledger.reading - self.nbytes)} for other reads in progress, "
                                 f"for all visitors, and may hold {mb(ledger.budget)}: try again in a moment, or "
                                 "load a shorter trace")
            ledger.reading += more
            self.nbytes = nbytes


LEDGER = Ledger(APP_BUDGET_BYTES)


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):         # not glibc: freed memory goes back by the allocator's own rules
        return None


_TRIM = _malloc_trim()


def return_freed_memory() -> None:
    """Ask glibc to give freed heap back to the system: without it a run's lists, once freed, stay in
    the process's RSS as reusable space."""
    if _TRIM is not None:
        _TRIM(0)
