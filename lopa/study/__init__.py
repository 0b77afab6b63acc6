"""Studies of the token filling order (TFO) and of the model: each answers one question the paper or
the model card leaves open, on any model the engine loads, and writes its numbers (a table and a JSON
of what ran where) and, where plotly / matplotlib are installed, its plots.

    python -m lopa.study orders          LoPA's orders against random and left-to-right orders (orders.py)
    python -m lopa.study calibration     does the branch score predict the next round; other scores (calibration.py)
    python -m lopa.study adaptive        an adaptive branch budget against fixed k (adaptive.py; its cost
                                         curve and gain model: adaptive_fit.py)
    python -m lopa.study headroom        LoPA against the best filling order a search finds (headroom.py)
    python -m lopa.study errors          where answers go wrong, line by line, and who wrote each wrong name (errors.py)
    python -m lopa.study teacher-forced  what the model predicts with only some answer slots masked (teacher_forced.py)
    python -m lopa.study departures      what the engine's departures from the authors' loop change (departures.py)

STUDIES is the one list: the command line dispatches on it, and the app shows (and runs live, behind
its GPU boundary) the studies marked `app`, each through the same functions of its module: live()
yields its decodes, live_summary() makes its tables, figure() and report() show them. Every step of
live() but a {"summary"} carries "done" and "total", its units of work (every decode it runs: the
headroom search's rollouts, the adaptive study's calibration and timing sweeps too), at most one unit a step
so a Stop read between steps ends it within one; the step that completes a problem carries
"complete": its id, and the app summarizes and plots complete problems only.

Beside them, not in the app: `python -m lopa.study.oracle`, a perfect model of the synthetic family as
an executor, for what the family itself leaves to the filling order (oracle.py).

Shared pieces: lopa.tasks (problems, prompts, grading, the hardware line, result files), common.py
(the studies' flags, settings and start), stats.py (correlations, bootstrap, AFP, Kendall's
tau, AUP), figures.py (plotly figures the app shows too, and the PNGs). docs/studies.md has the findings.

Layer: above lopa.bench (imports the core, lopa.models, lopa.tasks and lopa.bench's measurements); the
app imports it.
"""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Study:
    """A study: its command name, its title, its module in lopa.study (with main(argv)) and whether the
    app shows it (then the module also has live, live_summary, figure and report)."""
    name: str
    title: str
    module: str
    app: bool = False

    def load(self):
        return importlib.import_module(f"lopa.study.{self.module}")


STUDIES = {s.name: s for s in (
    Study("orders", "1. LoPA's orders against random orders", "orders", app=True),
    Study("calibration", "2. What the branch score measures", "calibration", app=True),
    Study("adaptive", "3. An adaptive branch budget", "adaptive", app=True),
    Study("headroom", "5. How far LoPA is from the best order found", "headroom", app=True),
    Study("errors", "Where answers go wrong, line by line", "errors"),
    Study("teacher-forced", "Teacher-forced probes of the answers", "teacher_forced"),
    Study("departures", "What the engine's departures from the authors' loop change", "departures"),
)}
APP_STUDIES = tuple(name for name, study in STUDIES.items() if study.app)
