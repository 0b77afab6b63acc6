"""Studies of the token filling order (TFO): each answers one question the paper leaves open, on any
model the engine loads, and writes a table, an interactive plot, a PNG and a JSON of what ran where.

    python -m lopa.study orders        LoPA's orders against random and left-to-right orders (orders.py)
    python -m lopa.study calibration   does the branch score predict the next round; other scores (calibration.py)
    python -m lopa.study adaptive      an adaptive branch budget against fixed k (adaptive.py)

Beside them, not in the app: `python -m lopa.study.oracle`, a perfect model of the synthetic family as
an executor, for what the family itself leaves to the filling order (oracle.py).

Shared pieces: common.py (problems, settings, files), stats.py (correlations, bootstrap, AFP, Kendall's
tau, AUP), figures.py (plotly figures the app shows too, and the PNGs). docs/studies.md has the findings.

Layer: with lopa.bench (imports the core, lopa.models and lopa.bench); the app imports it.
"""

STUDIES = ("orders", "calibration", "adaptive")
