"""The depth study's figures (lopa/study/depth.py): pooled TPF and the share of chains cut, against the lookahead
depth, one line per branch count k, D2F (k = 0) as a level line. The headroom search's cells (best-d1, best-d2) run on
a subset of the problems, so they are left to the report's table."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lopa.study.figures import _layout, _pyplot, _save, _suptitle

PANELS = (("tpf", "tokens per forward (pooled)", "TPF by lookahead depth"),
          ("cut_share", "chains cut, %", "chains cut, by depth"))
K_COLOURS = ("#E69F00", "#0072B2", "#009E73", "#CC79A7", "#D55E00", "#56B4E9")


def _lines(summary: dict) -> tuple[dict, dict | None]:
    """({k: [(depth, row), ...]} of the decoded cells with lookahead, D2F's row or None)."""
    rows = [r for r in summary.get("cells", []) if not r["cell"].startswith("best-")]
    by_k: dict = {}
    for r in rows:
        if r["k"]:
            by_k.setdefault(r["k"], []).append((r["depth"], r))
    return {k: sorted(v, key=lambda x: x[0]) for k, v in sorted(by_k.items())}, next((r for r in rows if not r["k"]), None)


def _value(r: dict, measure: str) -> float | None:
    v = r.get(measure)
    return None if v is None else (100 * v if measure == "cut_share" else v)


def depth_figure(summary: dict, title: str = "") -> go.Figure:
    fig = make_subplots(1, 2, horizontal_spacing=0.12, subplot_titles=[p[2] for p in PANELS])
    by_k, d2f = _lines(summary)
    depths = sorted({d for line in by_k.values() for d, _ in line}) or [1]
    for col, (measure, axis, _) in enumerate(PANELS, 1):
        for i, (k, line) in enumerate(by_k.items()):
            points = [(d, _value(r, measure)) for d, r in line if _value(r, measure) is not None]
            fig.add_trace(go.Scatter(x=[d for d, _ in points], y=[v for _, v in points], mode="lines+markers",
                                     name=f"LoPA k = {k}", legendgroup=f"k{k}", showlegend=col == 1,
                                     marker=dict(color=K_COLOURS[i % len(K_COLOURS)], size=8)), 1, col)
        if measure == "tpf" and d2f is not None:
            fig.add_trace(go.Scatter(x=[depths[0], depths[-1]], y=[d2f["tpf"]] * 2, mode="lines", name="D2F (k = 0)",
                                     line=dict(color="#666666", dash="dash")), 1, col)
        fig.update_xaxes(title_text="lookahead depth", tickvals=depths, row=1, col=col)
        fig.update_yaxes(title_text=axis, rangemode="tozero", row=1, col=col)
    return _layout(fig, title, height=440)


def depth_png(summary: dict, title: str, path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    by_k, d2f = _lines(summary)
    for ax, (measure, axis, name) in zip(axes, PANELS):
        for i, (k, line) in enumerate(by_k.items()):
            points = [(d, _value(r, measure)) for d, r in line if _value(r, measure) is not None]
            ax.plot([d for d, _ in points], [v for _, v in points], marker="o", label=f"LoPA k = {k}",
                    color=K_COLOURS[i % len(K_COLOURS)])
        if measure == "tpf" and d2f is not None:
            ax.axhline(d2f["tpf"], ls="--", color="#666", label="D2F (k = 0)")
        ax.set_xlabel("lookahead depth")
        ax.set_xticks(sorted({d for line in by_k.values() for d, _ in line}) or [1])
        ax.set_ylabel(axis)
        ax.set_title(name, fontsize=9)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8, frameon=False)
    _suptitle(fig, title)
    _save(fig, path)
