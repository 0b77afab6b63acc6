"""Run-level charts: tokens committed per round, and the TFO map (round in which each position filled)."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go

from .compare import DIFF_COLOUR
from .heatmap import MIN_HEIGHT
from .labels import token_text
from .palette import ANCHOR_COLOUR, LOOKAHEAD_COLOUR, VIRIDIS, text_on, viridis
from .timeline import committed_per_round, fills, n_positions

# A TFO map's row holds at most this many positions (a longer block folds into rows of it): two-digit round
# numbers fit their cells in the ~300 px a map gets beside the other at a laptop's width.
TFO_ROW = 16


def title_lines(text: str, width: int = 40) -> str:
    """A figure title broken into lines of at most `width` characters: plotly never wraps a title, and on a
    phone the figure is about 320 px wide (40 characters at its 13 px)."""
    return "<br>".join(textwrap.wrap(text, width)) if text else ""


def tokens_per_round_chart(run, current: int | None = None) -> go.Figure:
    """Stacked bars: tokens the anchor committed and the winning lookahead token, per round. Built in one
    go.Figure call, like every figure drawn per round: plotly's add_trace / update_layout re-validate the figure
    at each call (11 ms for this chart on this CPU; 2 ms in one call, the same figure)."""
    per_round = committed_per_round(run.records)
    rounds = list(range(len(per_round)))
    shaded = current is not None and bool(run.records)
    # The legend at the foot of the figure (container coordinates, under the x axis's title): at the top right it
    # ran into the title on a phone.
    layout = dict(barmode="stack", height=300, margin=dict(l=10, r=10, t=36, b=84),
                  title=dict(text="Tokens committed per round" + (f"<br><sup>shaded: round {current}</sup>" if shaded else ""),
                             font=dict(size=13)),
                  xaxis=dict(title=dict(text="round"), rangemode="tozero"), yaxis=dict(title=dict(text="tokens")),
                  legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0), plot_bgcolor="white")
    if shaded:
        layout["shapes"] = [dict(type="rect", xref="x", yref="y domain", x0=current - 0.5, x1=current + 0.5, y0=0, y1=1,
                                 fillcolor="rgba(0,0,0,0.08)", line=dict(width=0))]
    return go.Figure(data=[go.Bar(x=rounds, y=[a for a, _ in per_round], name="anchor commits", marker_color=ANCHOR_COLOUR),
                           go.Bar(x=rounds, y=[b for _, b in per_round], name="winning lookahead token",
                                  marker_color=LOOKAHEAD_COLOUR, marker_pattern_shape="/")],
                     layout=layout)


def tfo_map(run, names: dict[int, str] | None = None, title: str = "", zmax: int | None = None,
            highlight=None) -> go.Figure:
    """Token filling order: one row per block (folded into rows of TFO_ROW positions when longer), one cell per
    position, colour = round it was filled.

    zmax: shared top of the colour scale, so two runs side by side read on the same scale.
    highlight: positions to outline (those another run fills in a different round).
    """
    if not run.records:
        return go.Figure(layout=dict(
            annotations=[dict(text="No rounds yet.", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")],
            height=MIN_HEIGHT, xaxis=dict(visible=False), yaxis=dict(visible=False),
            title=dict(text=title_lines(title), font=dict(size=13))))
    N = int(run.settings["block_size"])
    W = TFO_ROW if N > TFO_ROW and N % TFO_ROW == 0 else N          # positions a row: a block folds into N / W rows
    done = fills(run.records)
    n_blocks = n_positions(run.records[-1], N) // N
    n_rows = n_blocks * N // W
    z, text, hover = [], [], []       # [n_rows, W] each
    for h in range(n_rows):
        z.append([]), text.append([]), hover.append([])
        for i in range(W):
            fill = done.get(h * W + i)
            z[h].append(fill.round if fill else None)
            text[h].append(str(fill.round) if fill else "")
            hover[h].append(f"position {h * W + i}<br>filled in round {fill.round} by the {fill.how}<br>"
                            f"token {token_text(fill.token, names)!r}" if fill else f"position {h * W + i}<br>masked")
    # zmin < zmax always: a colour bar over an empty range makes plotly.js throw on every relayout.
    top = max(zmax or max((f.round for f in done.values()), default=1), 2)
    data = [go.Heatmap(z=z, customdata=hover, hovertemplate="%{customdata}<extra></extra>", colorscale=VIRIDIS,
                       zmin=1, zmax=top, xgap=1, ygap=1,
                       colorbar=dict(title=dict(text="round filled", side="right"), thickness=12))]
    # The round numbers, each in black or white by its cell's fill (text_on: >= 4.5:1); plotly's own heatmap
    # text picks one by a brightness rule that gave 3.7:1 on viridis's middle.
    cells = [(i, h, row[i]) for h, row in enumerate(z) for i in range(W) if row[i] is not None]
    data.append(go.Scatter(x=[i for i, _, _ in cells], y=[b for _, b, _ in cells], mode="text",
                           text=[str(v) for _, _, v in cells], hoverinfo="skip", showlegend=False,
                           textfont=dict(size=12, color=[text_on(viridis((v - 1) / (top - 1))) for _, _, v in cells])))
    marked = sorted(p for p in (highlight or ()) if p < n_blocks * N)
    rows = [f"{h * W // N} · {h * W % N}–{h * W % N + W - 1}" if W < N else str(h) for h in range(n_rows)]
    layout = dict(yaxis=dict(autorange="reversed", title=dict(text="block · positions" if W < N else "block"),
                             tickvals=list(range(n_rows)), ticktext=rows),
                  xaxis=dict(title=dict(text="position in the row" if W < N else "position in block")),
                  title=dict(text=title_lines(title) if title else
                             "Token filling order<br><sup>the round each position was committed</sup>",
                             font=dict(size=13)),
                  # Room for the colour bar: plotly.js throws when a colour bar is longer than the plot.
                  height=max(MIN_HEIGHT, 200 + (26 if W == N else 20) * n_rows) + (30 if marked else 0),
                  margin=dict(l=10, r=10, t=56, b=66 if marked else 36), plot_bgcolor="#f2f2f2")
    if marked:
        data.append(go.Scatter(x=[p % W for p in marked], y=[p // W for p in marked], mode="markers",
                               name="filled in a different round than the other run", hoverinfo="skip",
                               marker=dict(symbol="square-open", size=15, color=DIFF_COLOUR, line=dict(width=2.5))))
        layout["legend"] = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0)
    return go.Figure(data=data, layout=layout)        # one call: tokens_per_round_chart says why
