"""The studies' figures (lopa.study.figures) under the visualizations package, where the app imports
its figures from (app/viz.py). They are built from a study's tables and summary; nothing runs a model."""

from lopa.study.figures import adaptive_figure, calibration_figure, orders_figure

__all__ = ["orders_figure", "calibration_figure", "adaptive_figure"]
