"""Studies of the token filling order (TFO) and of the model: each answers one question the paper or
the model card leaves open, on any model the engine loads, and writes its numbers (a table and a JSON
of what ran where) and, where plotly / matplotlib are installed, its plots.

    python -m lopa.study --help          the studies, each with its title (python -m lopa.study NAME --help: its flags)

Each study is one module here that declares itself at the top (`STUDY = Study(...)`,
lopa/study/declaration.py): its name, title, knobs and what it emits. STUDIES is found from those
declarations (discover(): every module of this folder with a top-level `STUDY =`), so a new study is one
new file and its test. The command line dispatches on STUDIES, and the app shows (and runs live, behind
its GPU boundary) the studies declared `app`, each through the same functions of its module: live()
yields its decodes, live_summary() makes its tables, figure() and png() draw them, report() says them.
Every step of live() but a {"summary"} carries "done" and "total", its units of work (every decode it
runs: the headroom search's rollouts, the adaptive study's calibration and timing sweeps too), at most
one unit a step so a Stop read between steps ends it within one; the step that completes a problem
carries "complete": its id, and the app summarizes and plots complete problems only.

Beside them, not in the app: `python -m lopa.study.oracle`, a perfect model of the synthetic family as
an executor, for what the family itself leaves to the filling order (oracle.py).

Shared pieces: lopa.tasks (the tasks' problems, prompts and grading, the verify-forward timing, the
bundled model's layout, the hardware line, result files), common.py (the studies' flags, settings and start), stats.py (correlations, bootstrap,
AFP, Kendall's tau, AUP), figures.py (plotly figures the app shows too, and the PNGs). docs/studies.md
has the findings.

Layer: a harness beside lopa.bench, lopa.eval and lopa.train, importing none of them (the core,
lopa.models and lopa.tasks); the app imports it.
"""

from __future__ import annotations

import sys

from lopa.study.declaration import Knob, Study, discover

__all__ = ["Knob", "Study", "discover", "main"]


def __getattr__(name: str):
    """STUDIES ({name: Study}) and APP_STUDIES (the names the app shows), found on first use."""
    if name == "STUDIES":
        return discover()
    if name == "APP_STUDIES":
        return tuple(n for n, s in discover().items() if s.app)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def usage(studies: dict[str, Study]) -> str:
    return (f"usage: python -m lopa.study {{{','.join(studies)}}} [options]   "
            "(--help after the name for its options)")


def main(argv=None) -> int:
    """`python -m lopa.study NAME [options]`: the study's own main(); --help lists the studies."""
    argv = sys.argv[1:] if argv is None else list(argv)
    studies = discover()
    if argv and argv[0] in ("-h", "--help"):
        width = max(map(len, studies), default=0)
        print(usage(studies) + "\n\nstudies:\n" + "\n".join(f"  {name:<{width}}  {s.title}" for name, s in studies.items()))
        return 0
    if not argv or argv[0] not in studies:
        print(usage(studies), file=sys.stderr)
        return 2
    return studies[argv[0]].load().main(argv[1:])
