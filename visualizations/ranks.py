"""Rank lanes of one round: which process computed which branch, and where the round's time went.

One horizontal lane per rank of a branch-parallel group (lopa.distributed.parallel), on a time axis in ms:
rank 0 sends the control message, every rank runs the forward of its own branches, rank 0
gathers the small per-position summaries (the peers wait at the collective), then the winner's
new cache entries are broadcast from the rank that holds them when another rank does not
(extra["commit_broadcast"]). Only rank 0's control / gather / commit times are measured; a peer's
lane shows its own forward and the shared collectives. A single-process record has no such
extras: one lane with the forward time, noted "single process".
"""

from __future__ import annotations

import plotly.graph_objects as go

from .heatmap import MIN_HEIGHT, _message_figure
from .palette import OKABE_ITO, WINNER_COLOUR

PHASES = {   # phase -> (legend name, colour): Okabe-Ito, colour-blind safe
    "control": ("control message (rank 0)", OKABE_ITO["grey"]),
    "forward": ("forward of its branches", OKABE_ITO["blue"]),
    "gather": ("gather summaries", OKABE_ITO["sky_blue"]),
    "commit": ("commit (cache the winner)", OKABE_ITO["green"]),
}
BROADCAST_COLOUR = OKABE_ITO["purple"]


def _bytes(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _branch_label(j: int, winner: int) -> str:
    name = "B0 anchor" if j == 0 else f"B{j}"
    return f"★{name}" if j == winner else name


def lane_segments(record) -> tuple[list[dict], bool]:
    """Per-rank phase segments of a round, ms: ([{rank, phase, start, length}], parallel?).
    Pure data behind rank_lanes, so it is testable without reading a figure."""
    extra = record.extra or {}
    if "rank_forward_s" not in extra:
        return [dict(rank=0, phase="forward", start=0.0, length=1e3 * float(record.forward_seconds or 0.0))], False
    ms = {k: 1e3 * float(extra.get(k, 0.0) or 0.0) for k in ("control_s", "gather_s", "commit_s")}
    rank_forward = [1e3 * float(f) for f in extra["rank_forward_s"]]
    control = ms["control_s"]
    gather_end = control + rank_forward[0] + ms["gather_s"]      # measured on rank 0: when the collective ended
    segments = [dict(rank=0, phase="control", start=0.0, length=control)]
    for rank, forward in enumerate(rank_forward):
        segments.append(dict(rank=rank, phase="forward", start=control, length=forward))
        start = control + forward
        end = max(gather_end, start)
        segments.append(dict(rank=rank, phase="gather", start=start, length=end - start))
        segments.append(dict(rank=rank, phase="commit", start=end, length=ms["commit_s"]))
    return segments, True


def rank_lanes(run, r: int | None = None, names: dict | None = None) -> go.Figure:
    """Lanes for round r (default: the latest) of a RunResult; see the module docstring.
    names is unused (the figures' common signature)."""
    if not run.records:
        return _message_figure("Rank lanes appear once a round is recorded.")
    r = len(run.records) - 1 if r is None else max(0, min(int(r), len(run.records) - 1))
    record = run.records[r]
    extra = record.extra or {}
    segments, parallel = lane_segments(record)
    world = int(extra.get("world") or max(len(extra.get("rank_forward_s", [])), max(record.branch_rank, default=0) + 1))
    winner_rank = record.branch_rank[record.winner] if record.winner < len(record.branch_rank) else 0
    lanes = [f"rank {q}" + (" ★ winner" if q == winner_rank else "") for q in range(world)]
    data = []
    for phase, (label, colour) in PHASES.items():
        mine = [s for s in segments if s["phase"] == phase]
        if not mine:
            continue
        data.append(go.Bar(
            orientation="h", y=[lanes[s["rank"]] for s in mine], x=[s["length"] for s in mine],
            base=[s["start"] for s in mine], name=label if parallel else "forward (all k+1 branches, one batch)",
            marker=dict(color=colour, line=dict(color=[WINNER_COLOUR if s["rank"] == winner_rank else colour
                                                       for s in mine],
                                                width=[3 if s["rank"] == winner_rank else 0 for s in mine])),
            hovertemplate="%{y}: " + phase + " %{x:.2f} ms<extra></extra>"))
    end = max((s["start"] + s["length"] for s in segments), default=0.0) or 1.0
    # The branches each rank computed, at the end of its lane; the winner's starred.
    annotations = []
    for q in range(world):
        mine = [_branch_label(j, record.winner) for j, rank in enumerate(record.branch_rank) if rank == q]
        annotations.append(dict(x=end, y=lanes[q], xanchor="left", showarrow=False, font=dict(size=11),
                                text="  " + (", ".join(mine) if mine else "(no branch)")))
    notes = []
    if extra.get("commit_broadcast"):
        t = next(s["start"] for s in segments if s["phase"] == "commit") + 0.5 * 1e3 * float(extra.get("commit_s", 0))
        others = [lanes[q] for q in range(world) if q != winner_rank]
        data.append(go.Scatter(
            x=[t] * (len(others) + 1), y=[lanes[winner_rank]] + others, mode="lines+markers",
            line=dict(color=BROADCAST_COLOUR, width=2, dash="dot"),
            marker=dict(symbol=["circle"] + ["arrow-down"] * len(others), size=11, color=BROADCAST_COLOUR),
            name=f"winner's cache broadcast ({_bytes(extra.get('commit_bytes'))})",
            hovertemplate=f"broadcast of the winner's new cache entries: {_bytes(extra.get('commit_bytes'))}"
                          "<extra></extra>"))
    if parallel:
        notes.append(f"{world} ranks; exchanged {_bytes(extra.get('bytes'))}")
        notes.append(f"(full logits would be {_bytes(extra.get('full_logits_bytes'))})")
        if "ipc_s" in extra:
            notes.append(f"app ↔ rank 0 {1e3 * float(extra['ipc_s']):.1f} ms")
    else:
        notes.append("single process")
    # One go.Figure call (visualizations.charts.tokens_per_round_chart says why).
    return go.Figure(data=data, layout=dict(
        yaxis=dict(autorange="reversed", categoryorder="array", categoryarray=lanes, title=dict(text="")),
        xaxis=dict(title=dict(text="time in the round (ms)"), range=[0, end * 1.35], rangemode="tozero"),
        annotations=annotations, barmode="overlay", height=max(MIN_HEIGHT, 210 + 46 * world) + 14 * len(notes),
        margin=dict(l=10, r=10, t=36 + 14 * len(notes), b=90),
        # One note a line, small: plotly never wraps a title, and a phone gives it about 320 px.
        title=dict(text=f"Rank lanes, round {record.round}{' (the prompt)' if record.kind == 'prefill' else ''}<br><sup>" + "<br>".join(notes) + "</sup>",
                   font=dict(size=13)),
        legend=dict(orientation="h", yanchor="top", y=-0.3, x=0), plot_bgcolor="white"))
