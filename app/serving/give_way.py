"""The long jobs give way to the visitors' decodes: a study or the best-order search waits between two of its
decodes while a visitor's Run, Step, fork or Compare is under way (app/serving/boundary.py counts them), at most
GIVE_WAY_S each time, so a Run has the CPU to itself and the long job still moves on under a stream of Runs."""

from __future__ import annotations

import threading

# A long job (a study, the best-order search) waits at most this long between two of its decodes for the
# visitors' own decodes to end (GiveWay).
GIVE_WAY_S = 3.0


class GiveWay:
    """The decodes a visitor waits on (Run, Step, a fork, Compare: decode_rounds) under way in this process,
    and the long jobs' turn after them. A long job runs beside them in a slot of its own (app/panels/events.py,
    LONG), and on a small CPU a Run that shares the cores with a search took twice as long; between two of
    its decodes a long job now waits for them to end, at most GIVE_WAY_S each time, so it still moves on
    under a stream of Runs. On ZeroGPU each call runs in a worker process of its own and never waits here."""

    def __init__(self):
        self._running = 0
        self._ended = threading.Condition()

    def start(self) -> None:
        with self._ended:
            self._running += 1

    def end(self) -> None:
        with self._ended:
            self._running -= 1
            self._ended.notify_all()

    def busy(self) -> bool:
        """Whether a visitor's decode runs right now."""
        with self._ended:
            return self._running > 0

    def wait(self, bound_s: float = GIVE_WAY_S) -> bool:
        """Until no visitor's decode runs, at most bound_s; True when none does."""
        with self._ended:
            return self._ended.wait_for(lambda: self._running == 0, timeout=bound_s)

    def steps(self, steps):
        """`steps` (a long job's generator), waiting for the visitors' decodes before each step."""
        for step in steps:
            yield step
            self.wait()


TURNS = GiveWay()
