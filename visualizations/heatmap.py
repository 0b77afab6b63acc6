"""Confidence heatmap of one round: branches x masked window positions (plotly).

Top strip: the anchor's Conf at every masked position (viridis). Below: for each lookahead
branch B_j, Conf_j - Conf_anchor at the same positions (RdBu, 0 = white): blue where the one
extra token made the model surer, red where it made it less sure. The cell where B_j placed its
extra token has no Conf of its own (it is no longer masked) and carries an X marker. The winning
row is outlined. This is the paper's observation (Sec. 2) made visible: one well-chosen token
lifts the confidence of many others.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from .labels import token_label, token_text
from .palette import DIVERGING, VIRIDIS, WINNER_COLOUR

NAN = float("nan")
MIN_HEIGHT = 260        # px: every figure of the page is at least this tall, a phone's included


def _message_figure(text: str) -> go.Figure:
    return go.Figure(layout=dict(      # one call: visualizations.charts.tokens_per_round_chart says why
        annotations=[dict(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font=dict(size=14))],
        height=MIN_HEIGHT, xaxis=dict(visible=False, range=[0, 1]), yaxis=dict(visible=False, range=[0, 1]),
        margin=dict(l=10, r=10, t=30, b=10), plot_bgcolor="white"))


def stacked_rows(row_heights: list[float], spacing: float = 0.04) -> dict:
    """The layout of len(row_heights) rows, top first, sharing one x axis: the axes
    plotly.subplots.make_subplots(rows, 1, shared_xaxes=True, vertical_spacing=spacing, row_heights=...)
    lays out, without its cost (about 7 ms of the heatmap's 18 on this CPU: it builds and validates a
    grid of every subplot property). Row i's axes are x{i}, y{i} ('' for the first)."""
    n, total = len(row_heights), sum(row_heights)
    free = 1.0 - spacing * (n - 1)
    layout, bottom = {}, 0.0
    for i in reversed(range(n)):                      # bottom-up, as plotly lays the rows out
        name, height = "" if i == 0 else str(i + 1), free * row_heights[i] / total
        layout[f"xaxis{name}"] = dict(anchor=f"y{name}", domain=[0.0, 1.0])
        if i < n - 1:
            layout[f"xaxis{name}"].update(matches=f"x{n}", showticklabels=False)
        layout[f"yaxis{name}"] = dict(anchor=f"x{name}", domain=[bottom, min(bottom + height, 1.0)])
        bottom += height + spacing
    return layout


def _row_label(record, j: int, names, mask_id) -> str:
    score = record.branch_scores[j]
    score_text = "∞" if math.isinf(score) else f"{score:.2f}"
    if j == 0:
        text = f"B0 anchor  C={score_text}"
    else:
        fills = "+".join(f"{token_label(t, names, mask_id)}@{p}" for p, t in record.row_fills(j))
        text = f"B{j} +{fills}  C={score_text}"
    return ("★ " + text) if j == record.winner else text


def confidence_heatmap(run, r: int, names: dict[int, str] | None = None) -> go.Figure:
    """Figure for round r of `run` (a RunResult)."""
    if not run.records:
        return _message_figure("No rounds yet.")
    r = max(0, min(r, len(run.records) - 1))
    rec = run.records[r]
    if rec.kind == "final" or not rec.branch_positions or not rec.branch_positions[0]:
        return _message_figure(f"Round {r}: nothing left masked,<br>so no forward and no confidence to show.<br>"
                               "Scrub back to an earlier round<br>to see its branches.")
    mask_id, metric = int(run.spec["mask_token_id"]), run.settings["confidence"]
    conf = [dict(zip(p, c)) for p, c in zip(rec.branch_positions, rec.branch_conf)]      # per branch: pos -> Conf
    argmax = [dict(zip(p, t)) for p, t in zip(rec.branch_positions, rec.branch_argmax)]
    columns = sorted(set().union(*map(set, rec.branch_positions), rec.lookahead_positions,
                                 *map(set, rec.chain_positions)))                          # [M] positions
    x = [str(p) for p in columns]
    # Anchor strip: [1, M]
    anchor_z = [[conf[0].get(p, NAN) for p in columns]]
    anchor_hover = [[f"position {p}<br>anchor predicts {token_text(argmax[0][p], names)!r}<br>Conf {conf[0][p]:.3f}"
                     if p in conf[0] else f"position {p}<br>not in the anchor's window" for p in columns]]
    finite = [v for v in anchor_z[0] if not math.isnan(v)]
    # A colour bar needs zmin < zmax (plotly.js throws on an empty range): widen a single value.
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    lo, hi = (lo - 0.5, hi + 0.5) if hi - lo < 1e-6 else (lo, hi)
    k = len(rec.branch_scores) - 1
    rows = 2 if k else 1
    layout = stacked_rows([1, max(k, 1)] if k else [1])
    shapes = []
    data = [go.Heatmap(z=anchor_z, x=x, y=[_row_label(rec, 0, names, mask_id)], colorscale=VIRIDIS, zmin=lo, zmax=hi,
                             text=anchor_hover, hoverinfo="text", xgap=1, ygap=1, name="anchor Conf",
                             colorbar=dict(title=dict(text=f"anchor<br>{metric}", side="right"), len=0.34 if k else 0.9,
                                           y=1.0, yanchor="top", thickness=12), xaxis="x", yaxis="y")]
    if k:
        # Lookahead rows: [k, M] of Conf_j - Conf_anchor; nan where either side has no masked position.
        delta, hover, marks = [], [], ([], [])
        labels = [_row_label(rec, j, names, mask_id) for j in range(1, k + 1)]
        for j in range(1, k + 1):
            row_z, row_h = [], []
            placed = dict(rec.row_fills(j))                  # position -> token this row filled beyond the anchor
            for p in columns:
                if p in placed:
                    row_z.append(NAN)
                    row_h.append(f"position {p}<br>B{j} placed its lookahead token "
                                 f"{token_text(placed[p], names)!r} here")
                    marks[0].append(str(p))
                    marks[1].append(labels[j - 1])
                elif p in conf[j] and p in conf[0]:
                    d = conf[j][p] - conf[0][p]
                    row_z.append(d)
                    row_h.append(f"position {p}<br>B{j} predicts {token_text(argmax[j][p], names)!r}<br>"
                                 f"Conf {conf[j][p]:.3f} (anchor {conf[0][p]:.3f}, Δ {d:+.3f})")
                else:
                    row_z.append(NAN)
                    row_h.append(f"position {p}<br>masked in only one of B{j} and the anchor (a block was added "
                                 "or the position was committed)")
            delta.append(row_z)
            hover.append(row_h)
        finite = [abs(v) for row in delta for v in row if not math.isnan(v)]
        bound = max(finite, default=0.0) or 1e-3
        data.append(go.Heatmap(z=delta, x=x, y=labels, colorscale=DIVERGING, zmid=0, zmin=-bound, zmax=bound,
                                 text=hover, hoverinfo="text", xgap=1, ygap=1, name="Δ Conf vs anchor",
                                 colorbar=dict(title=dict(text="Δ Conf<br>vs anchor", side="right"), len=0.58,
                                               y=0.0, yanchor="bottom", thickness=12), xaxis="x2", yaxis="y2"))
        # No legend: the title says what ✕ is, and a legend under the plot sat on the x axis's title on a phone.
        data.append(go.Scatter(x=marks[0], y=marks[1], mode="markers", name="lookahead token",
                                 marker=dict(symbol="x", size=10, color="black", line=dict(width=1, color="white")),
                                 hoverinfo="skip", showlegend=False, xaxis="x2", yaxis="y2"))
        layout["yaxis2"]["autorange"] = "reversed"
        if rec.winner > 0:
            shapes.append(dict(type="rect", xref="x2 domain", yref="y2", x0=0, x1=1, y0=rec.winner - 1.5,
                               y1=rec.winner - 0.5, line=dict(color=WINNER_COLOUR, width=3), fillcolor="rgba(0,0,0,0)"))
    if rec.winner == 0 and rec.kind == "round":
        shapes.append(dict(type="rect", xref="x domain", yref="y", x0=0, x1=1, y0=-0.5, y1=0.5,
                           line=dict(color=WINNER_COLOUR, width=3), fillcolor="rgba(0,0,0,0)"))
    # Categories fill the width exactly (the marker trace would otherwise pad the range).
    for axis in [name for name in layout if name.startswith("xaxis")]:
        layout[axis].update(type="category", range=[-0.5, len(columns) - 0.5])
    layout[f"xaxis{rows if rows > 1 else ''}"]["title"] = dict(text="masked window position")
    if shapes:
        layout["shapes"] = shapes
    # One go.Figure call (visualizations.charts.tokens_per_round_chart says why). Short title lines: plotly
    # never wraps a title, and a phone gives the figure about 320 px.
    layout.update(
        title=dict(text=f"Round {r}: the anchor's Conf (top row)<br>and each branch's Conf − the anchor's<br>"
                        "<sup>blue: its one extra token (✕) raised the others' Conf,<br>red: lowered it; "
                        "outline and ★: the winner</sup>", font=dict(size=13)),
        height=min(max(MIN_HEIGHT, 250 + 26 * (k + 1)), 700), margin=dict(l=10, r=10, t=96, b=40),
        plot_bgcolor="#f2f2f2", showlegend=False)
    return go.Figure(data=data, layout=layout)
