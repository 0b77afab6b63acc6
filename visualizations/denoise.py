"""A canvas sampler's trace (DiffusionGemma's entropy-bound sampler, `lopa-canvas-trace/1`) step by
step. Input: the trace as plain data (`CanvasRun.to_dict()`, or a file's validated JSON).

- denoise_heatmap: one canvas, steps x positions, the entropy of each position's prediction
  (viridis, dark = sure); a dot where the sampler accepted the draw; a square at the step from
  which each final token stayed accepted (the trace's `settled`, lopa.models.canvas_trace).
- denoise_step_html: one step as a row of cells: the token the forward saw, the token drawn, and
  whether the draw was kept (accepted, solid border) or replaced by noise (re-noised, faded).
- denoise_settled_html: the answer, each token under the step it settled at.
- denoise_counters_html: canvases, steps, forwards, tokens and tokens per forward of a run.

Nothing here is masked diffusion: no position is ever fixed, every step redraws every position.
"""

from __future__ import annotations

import plotly.graph_objects as go

from .labels import token_label, token_repr
from .markup import esc
from .palette import ANCHOR_COLOUR, VIRIDIS, faded, text_on, viridis


def _records(run: dict, canvas: int) -> list[dict]:
    return [r for r in run["records"] if r["canvas"] == canvas]


def denoise_heatmap(run: dict, canvas: int = 0, names: dict[int, str] | None = None) -> go.Figure:
    """Entropy of every position at every step of one canvas, accepted draws dotted."""
    records = _records(run, canvas)
    fig = go.Figure()
    if not records:
        fig.add_annotation(text=f"canvas {canvas} was not denoised in this run", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        return fig
    n = len(records[0]["entropy"])
    hover = [[f"step {r['step']} · position {p}<br>saw {token_repr(r['tokens_in'][p], names)}<br>"
              f"drew {token_repr(r['sampled'][p], names)} ({'kept' if p in r['accepted'] else 're-noised'})<br>"
              f"argmax {token_repr(r['argmax'][p], names)}<br>entropy {r['entropy'][p]:.3f} nats"
              for p in range(n)] for r in records]
    fig.add_trace(go.Heatmap(z=[r["entropy"] for r in records], x=list(range(n)), y=[r["step"] for r in records],
                             colorscale=VIRIDIS, colorbar=dict(title="entropy (nats)"), text=hover,
                             hovertemplate="%{text}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[p for r in records for p in r["accepted"]],
                             y=[r["step"] for r in records for _ in r["accepted"]], mode="markers",
                             marker=dict(symbol="circle", size=6, color="white", line=dict(color="black", width=1)),
                             name="accepted draw", hoverinfo="skip"))
    settled = run["settled"][canvas * n: (canvas + 1) * n]       # the step each final token settled at
    fig.add_trace(go.Scatter(x=[p for p, s in enumerate(settled) if s is not None],
                             y=[s for s in settled if s is not None], mode="markers",
                             marker=dict(symbol="square-open", size=14, color=ANCHOR_COLOUR, line=dict(width=2)),
                             name="final token settled", hoverinfo="skip"))
    answer = " ".join(token_label(t, names) for t in records[-1]["argmax"])
    fig.update_layout(title=f"canvas {canvas}: entropy per position and step (answer: {answer[:120]})",
                      xaxis_title="canvas position", yaxis_title="denoising step", yaxis=dict(autorange="reversed"),
                      height=120 + 22 * len(records), margin=dict(l=60, r=20, t=50, b=40),
                      legend=dict(orientation="h", y=-0.15))
    return fig


def denoise_step_html(run: dict, index: int, names: dict[int, str] | None = None) -> str:
    """Record `index` of the run as one row of cells: what the forward saw over what it drew."""
    r = run["records"][index]
    accepted = set(r["accepted"])
    cells = []
    for p, (seen, drawn) in enumerate(zip(r["tokens_in"], r["sampled"])):
        sure = 1.0 / (1.0 + r["entropy"][p])          # 1 at zero entropy, falls as the prediction spreads
        kept = p in accepted
        fill = viridis(sure) if kept else faded(viridis(sure))    # a re-noised draw muted by its fill (text stays AA)
        style = (f"background:{fill};color:{text_on(fill)};padding:2px 4px;margin:1px;display:inline-block;"
                 + ("border:2px solid #000;" if kept else "border:1px dotted #777;"))
        tip = f"position {p}: saw {token_repr(seen, names)}, drew {token_repr(drawn, names)}, " \
              f"entropy {r['entropy'][p]:.3f}, {'kept' if kept else 're-noised'}"
        cells.append(f'<span title="{esc(tip)}" style="{style}">{esc(token_label(drawn, names))}</span>')
    head = (f"canvas {esc(r['canvas'])} · step {esc(r['step'])} · temperature {r['temperature']:.2f} · "
            f"{len(accepted)} of {len(r['tokens_in'])} draws kept" + (" · stopped" if r["stopped"] else ""))
    return f'<div class="lopa-denoise"><div>{head}</div><div>{"".join(cells)}</div></div>'


def denoise_settled_html(run: dict, names: dict[int, str] | None = None) -> str:
    """The answer as a row of tokens, each under the step of its canvas from which the sampler kept
    accepting it (the trace's `settled`; "never" where the last step did not accept it: the answer is
    the last argmax, which need not have been drawn)."""
    settled = run.get("settled") or []
    n = int(run["settings"]["canvas_length"])
    cells = []
    for i, token in enumerate(run["tokens"]):
        step = settled[i] if i < len(settled) else None
        when = "never" if step is None else f"step {step}"
        tip = f"answer position {i} (canvas {i // n}, position {i % n}): {token_repr(token, names)}, settled {when}"
        cells.append(f'<span class="lopa-settled" data-step="{esc("" if step is None else step)}" title="{esc(tip)}" '
                     'style="display:inline-block;margin:1px;padding:1px 3px;border:1px solid #ccc;text-align:center">'
                     f'<span style="display:block">{esc(token_label(token, names))}</span>'
                     f'<span style="display:block;font-size:10px;color:#555">{esc(when)}</span></span>')
    return f'<div class="lopa-denoise-settled">{"".join(cells)}</div>'


def denoise_counters_html(summary: dict, status: str = "done") -> str:
    """Counters of a canvas run. summary: {"canvases", "steps", "forwards", "tokens", "tpf"} (the app takes
    them from CanvasRun, whose tokens_per_forward is generate()'s own figure)."""
    boxes = [("canvases", "canvases", f"{summary['canvases']}", "canvases denoised (each covers canvas_length answer positions)"),
             ("steps", "steps", f"{summary['steps']}", "the most denoising steps one canvas took"),
             ("forwards", "forwards", f"{summary['forwards']}", "denoising forwards, all canvases together (one a step)"),
             ("tokens", "tokens", f"{summary['tokens']}", "answer tokens that are not padding"),
             ("tpf", "tokens/forward", f"{summary['tpf']:.2f}", "generate()'s own figure: tokens over denoising forwards")]
    cells = "".join(
        f'<div class="lopa-counter" data-counter="{key}" data-value="{esc(value)}" title="{esc(tip)}" '
        'style="padding:4px 10px;border:1px solid #ccc;border-radius:6px;min-width:70px;text-align:center">'
        f'<div style="font-size:11px;color:#555">{label}</div><div style="font-size:18px;font-weight:600">{esc(value)}</div></div>'
        for key, label, value, tip in boxes)
    return (f'<div class="lopa-denoise-counters" data-status="{esc(status)}" style="display:flex;gap:6px;flex-wrap:wrap">'
            f'{cells}</div>')
