"""The studies' figures: plotly (the app and the HTML files) and matplotlib (the PNGs), from the
studies' tables and summaries only; nothing here runs a model. The app reaches the plotly ones
through visualizations/studies.py."""

from __future__ import annotations

import html
import textwrap

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from lopa.settings import BRANCH_SCORE_RULES

# What the legends call each order (its name in the tables is for code).
ORDER_NAMES = {"lopa": "LoPA", "vanilla": "vanilla D2F", "left_to_right": "left to right", "random": "random orders"}
COLOURS = {"lopa": "#0072B2", "vanilla": "#E69F00", "left_to_right": "#009E73", "random": "#999999",
           "adaptive": "#D55E00"}
RULE_COLOURS = dict(zip(BRANCH_SCORE_RULES, ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")))
BINS = 10


def _order_name(order: str) -> str:
    return ORDER_NAMES.get(order, order.replace("_", " "))


def title_lines(title: str, width: int = 70) -> list[str]:
    """A title as lines of at most `width` characters (broken at spaces): a plot's title does not wrap
    by itself and ran off the panel."""
    return [line for part in str(title).split("\n") for line in textwrap.wrap(part, width, break_long_words=False)]


def shipped_title(study: str, meta: dict) -> str:
    """The title of a shipped result's plots, from its metadata: model, problems, k (unless the study's rows
    each set their own: its declaration's varies_k), hardware."""
    from lopa.study import STUDIES
    problems = (meta.get("summary") or {}).get("problems")
    k = (meta.get("settings") or {}).get("k")
    parts = [str(meta.get("model", "")), f"{problems} problems" if isinstance(problems, int) else "",
             f"k = {k}" if k is not None and not STUDIES[study].varies_k else ""]
    return ", ".join(p for p in parts if p) + (f"; {meta['hardware']}" if meta.get("hardware") else "")


def _layout(fig, title: str, height: int = 460, legend_rows: int = 1):
    """Title lines escaped one by one and joined with <br> (escaping the joined text showed a literal <br>);
    room above the subplot titles for every title line, and the legend below the x axis title."""
    lines = title_lines(title, 40)     # a phone gives the figure about 320 px
    # Subplot titles wrapped too, each to its own panel's share of a phone's width (about 44 characters of a
    # 12 px title across the figure): side by side they ran into each other, a narrow panel's off the figure.
    domains = [ax["domain"] for name, ax in fig.layout.to_plotly_json().items() if name.startswith("xaxis") and
               isinstance(ax, dict) and ax.get("domain")]
    extra = 0
    for note in fig.layout.annotations:
        share = min((d[1] - d[0] for d in domains if d[0] <= (note.x or 0) <= d[1]), default=1.0)
        fits = max(8, int(44 * share))
        if note.text and "<br>" not in note.text and len(note.text) > fits:
            wrapped = textwrap.wrap(note.text, fits, break_long_words=False)
            note.text, extra = "<br>".join(wrapped), max(extra, len(wrapped) - 1)
    top = 50 + 18 * len(lines) + 16 * extra
    fig.update_layout(title=dict(text="<br>".join(html.escape(line) for line in lines), font=dict(size=13),
                                 x=0, xanchor="left", y=1, yanchor="top", pad=dict(t=14, l=8)),   # t: its first line whole
                      height=height + 18 * len(lines), template="plotly_white",
                      margin=dict(l=50, r=20, t=top, b=70 + 22 * legend_rows),
                      legend=dict(orientation="h", x=0, y=-0.22, yanchor="top"))
    return fig


# -- orders -------------------------------------------------------------------------------------------
def orders_figure(df, summary: dict, title: str = "") -> go.Figure:
    """Left: per problem, TPF of every random order (box) with LoPA, left-to-right and vanilla marked
    (hover: LoPA's percentile among the random orders). Right: accuracy per order."""
    fig = make_subplots(1, 2, column_widths=[0.78, 0.22], horizontal_spacing=0.08,
                        subplot_titles=("TPF per problem: random orders (box) vs LoPA", "accuracy per order"))
    if len(df):
        pct = {r["problem"]: r["lopa_percentile"] for r in summary.get("per_problem", [])}
        rand = df[df.order == "random"]
        fig.add_trace(go.Box(x=rand.problem.astype(str), y=rand.tpf, name="random orders", marker_color=COLOURS["random"],
                             boxpoints="all", jitter=0.4, pointpos=0, marker_size=3, line_width=1), 1, 1)
        for order, symbol in (("vanilla", "square"), ("left_to_right", "diamond"), ("lopa", "star")):
            rows = df[df.order == order]
            text = [f"problem {p}: LoPA at percentile {pct.get(p, float('nan')):.0f} of random orders" for p in rows.problem]
            fig.add_trace(go.Scatter(x=rows.problem.astype(str), y=rows.tpf, mode="markers", name=ORDER_NAMES[order],
                                     marker=dict(symbol=symbol, size=11 if order == "lopa" else 8, color=COLOURS[order]),
                                     hovertext=text if order == "lopa" else None), 1, 1)
        acc = {o: s["accuracy"] for o, s in summary.get("per_order", {}).items() if s["accuracy"] is not None}
        fig.add_trace(go.Bar(x=[_order_name(o) for o in acc], y=[a * 100 for a in acc.values()], showlegend=False,
                             marker_color=[COLOURS.get(o, "#999") for o in acc],
                             text=[f"{a * 100:.0f}%" for a in acc.values()], textposition="outside",
                             cliponaxis=False), 1, 2)
    fig.update_xaxes(title_text="problem", row=1, col=1)
    fig.update_yaxes(title_text="tokens per forward", row=1, col=1)
    fig.update_yaxes(title_text="exact match (%)", range=[0, 112], row=1, col=2)
    return _layout(fig, title)


def orders_png(df, summary: dict, title: str, path) -> None:
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, gridspec_kw={"width_ratios": [4, 1]})
    problems = sorted(df.problem.unique())
    rand = df[df.order == "random"]
    ax.boxplot([rand[rand.problem == p].tpf for p in problems], positions=range(len(problems)), widths=0.6,
               showfliers=False, label=["random orders (box)"] + [None] * (len(problems) - 1) if problems else None)
    for order, marker in (("vanilla", "s"), ("left_to_right", "D"), ("lopa", "*")):
        rows = df[df.order == order].set_index("problem").reindex(problems)
        ax.scatter(range(len(problems)), rows.tpf, marker=marker, s=70 if order == "lopa" else 25,
                   color=COLOURS[order], label=ORDER_NAMES[order], zorder=3)
    _problem_axis(ax, problems)
    ax.set_ylabel("tokens per forward")
    _legend_above(ax)
    acc = {o: s["accuracy"] for o, s in summary.get("per_order", {}).items() if s["accuracy"] is not None}
    bx.bar(range(len(acc)), [a * 100 for a in acc.values()], color=[COLOURS.get(o, "#999") for o in acc])
    bx.set_xticks(range(len(acc)), [_order_name(o) for o in acc], rotation=45, ha="right", fontsize=7)
    bx.set_ylabel("exact match (%)")
    _suptitle(fig, title)
    _save(fig, path)


# -- calibration --------------------------------------------------------------------------------------
def binned(rounds, metric: str, rule: str, bins: int = BINS):
    """(decile centres 0..1, mean target per score decile) of one rule's finite scores."""
    d = rounds[(rounds.metric == metric)]
    d = d[[abs(v) != float("inf") for v in d[f"score_{rule}"]]]
    if len(d) < bins:
        return [], []
    q = d[f"score_{rule}"].rank(method="first", pct=True)
    idx = ((q * bins).clip(upper=bins - 0.001)).astype(int)
    means = d.target.groupby(idx).mean()
    return [(i + 0.5) / bins for i in means.index], list(means.values)


def _default_metric(rounds) -> str:
    """The settings' default Conf (neg_entropy, the paper's for D2F-Dream) when the table has it."""
    if not len(rounds):
        return ""
    return "neg_entropy" if (rounds.metric == "neg_entropy").any() else str(rounds.metric.iloc[0])


def calibration_figure(runs, rounds, summary: dict, title: str = "", metric: str | None = None) -> go.Figure:
    """Left: next round's committable tokens (target) per score decile, one line per candidate score,
    for one Conf metric. Right: each rule as the selection rule: TPF against accuracy, per metric."""
    metric = metric or _default_metric(rounds)
    fig = make_subplots(1, 2, horizontal_spacing=0.1, subplot_titles=(
        f"positions over τ next round, by score decile (Conf = {html.escape(str(metric))})",
        "each score as the selection rule (colour: the rule, as on the left)"))
    for rule in BRANCH_SCORE_RULES:
        if len(rounds):
            x, y = binned(rounds, metric, rule)
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=rule, line_color=RULE_COLOURS[rule]), 1, 1)
    symbols = {"max_prob": "circle", "neg_entropy": "square", "margin": "diamond"}
    for s in summary.get("selection", []):
        if s["accuracy"] is None:
            continue
        # No text labels: rules with equal accuracy sat on one another; colour says the rule (as on the left).
        fig.add_trace(go.Scatter(x=[s["tpf"]], y=[s["accuracy"] * 100], mode="markers", showlegend=False,
                                 marker=dict(size=10, color=RULE_COLOURS.get(s["rule"], "#999"),
                                             symbol=symbols.get(s["metric"], "circle")),
                                 hovertext=f"{s['rule']} under {s['metric']}: TPF {s['tpf']:.2f}, "
                                           f"accuracy {s['accuracy'] * 100:.1f}%, AUP {s['aup']:.2f}"), 1, 2)
    fig.update_xaxes(title_text="score quantile (0 = lowest)", row=1, col=1)
    fig.update_yaxes(title_text="mean positions over τ_conf", row=1, col=1)
    fig.update_xaxes(title_text="TPF (○ max_prob, □ neg_entropy, ◇ margin)", row=1, col=2)
    fig.update_yaxes(title_text="exact match (%)", row=1, col=2)
    return _layout(fig, title)


def calibration_png(runs, rounds, summary: dict, title: str, path, metric: str | None = None) -> None:
    plt = _pyplot()
    metric = metric or _default_metric(rounds)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    for rule in BRANCH_SCORE_RULES:
        x, y = binned(rounds, metric, rule) if len(rounds) else ([], [])
        ax.plot(x, y, marker="o", label=rule, color=RULE_COLOURS[rule])
    ax.set_xlabel("score quantile (0 = lowest)")
    ax.set_ylabel("mean positions over tau_conf next round")
    ax.set_title(f"Conf = {metric}", fontsize=9)
    ax.legend(fontsize=8)
    markers = {"max_prob": "o", "neg_entropy": "s", "margin": "D"}
    for s in summary.get("selection", []):
        if s["accuracy"] is None:
            continue
        bx.scatter(s["tpf"], s["accuracy"] * 100, marker=markers.get(s["metric"], "o"),
                   color=RULE_COLOURS.get(s["rule"], "#999"))
    # Colour is the rule (the left plot's legend); the marker is the Conf metric. Per-point labels overlapped.
    for metric, marker in markers.items():
        bx.scatter([], [], marker=marker, color="#777", label=f"Conf = {metric}")
    bx.legend(fontsize=7, loc="lower right")
    bx.set_title("each score as the selection rule (colour: the rule, as on the left)", fontsize=9)
    bx.set_xlabel("TPF")
    bx.set_ylabel("exact match (%)")
    _suptitle(fig, title)
    _save(fig, path)


# -- adaptive -----------------------------------------------------------------------------------------
def adaptive_figure(df, summary: dict, title: str = "") -> go.Figure:
    """Left: TPF against tokens/s per configuration, the Pareto front joined. Right: the cost curve."""
    fig = make_subplots(1, 2, column_widths=[0.65, 0.35], horizontal_spacing=0.1,
                        subplot_titles=("TPF vs tokens/s (Pareto front joined)", "measured cost of a round"))
    rows = summary.get("configs", [])
    for r in rows:
        colour = COLOURS["adaptive"] if r["config"] == "adaptive" else COLOURS["lopa"]
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy'] * 100:.1f}%"
        fig.add_trace(go.Scatter(x=[r["tps"]], y=[r["tpf"]], mode="markers+text", text=[r["config"]], showlegend=False,
                                 textposition="bottom center" if r["config"] == "adaptive" else "top center",
                                 marker=dict(size=12 if r["pareto"] else 8, color=colour,
                                                                        symbol="star" if r["config"] == "adaptive" else "circle"),
                                 hovertext=f"{r['config']}: accuracy {acc}, mean k {r['mean_k']:.2f}"), 1, 1)
    front = sorted((r["tps"], r["tpf"]) for r in rows if r["pareto"])
    if front:
        fig.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines", showlegend=False,
                                 line=dict(color="#bbbbbb", dash="dot")), 1, 1)
    cost = summary.get("cost_s", [])
    fig.add_trace(go.Scatter(x=list(range(1, len(cost) + 1)), y=[c * 1e3 for c in cost], mode="lines+markers",
                             showlegend=False, line_color="#444"), 1, 2)
    fig.update_xaxes(title_text="tokens per second", row=1, col=1)
    fig.update_yaxes(title_text="tokens per forward", row=1, col=1)
    fig.update_xaxes(title_text="branches B = k + 1", row=1, col=2)
    fig.update_yaxes(title_text="ms per round (verify + bookkeeping)", rangemode="tozero", row=1, col=2)
    return _layout(fig, title)


def adaptive_png(summary: dict, title: str, path) -> None:
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, gridspec_kw={"width_ratios": [2, 1]})
    for r in summary.get("configs", []):
        adaptive = r["config"] == "adaptive"
        ax.scatter(r["tps"], r["tpf"], marker="*" if adaptive else "o", s=120 if adaptive else 40,
                   color=COLOURS["adaptive"] if adaptive else COLOURS["lopa"], edgecolor="k" if r["pareto"] else None)
        ax.annotate(r["config"], (r["tps"], r["tpf"]), fontsize=8, xytext=(4, -10 if adaptive else 4),
                    textcoords="offset points")
    front = sorted((r["tps"], r["tpf"]) for r in summary.get("configs", []) if r["pareto"])
    ax.plot([p[0] for p in front], [p[1] for p in front], ls=":", color="#999")
    ax.set_xlabel("tokens per second")
    ax.set_ylabel("tokens per forward")
    cost = summary.get("cost_s", [])
    bx.plot(range(1, len(cost) + 1), [c * 1e3 for c in cost], marker="o", color="#444")
    bx.set_xlabel("branches B = k + 1")
    bx.set_ylabel("ms per round (verify + bookkeeping)")
    bx.set_ylim(bottom=0)
    _suptitle(fig, title)
    _save(fig, path)


# -- headroom -------------------------------------------------------------------------------------------
HEADROOM_MARKS = (("vanilla", "square", "s", COLOURS["vanilla"]), ("lopa", "star", "*", COLOURS["lopa"]),
                  ("best", "diamond", "D", "#CC79A7"))


def _headroom_rows(df, config: str, k):
    rows = df[df.config == config]
    return rows[rows.k == k] if config == "lopa" else rows


def _random_name(k) -> str:
    return "random orders" if k is None else f"random orders (k = {k})"


def _headroom_name(config: str, k) -> str:
    """A headroom row's name in a legend: words, and no "k = None" when the summary has no k."""
    lopa = "LoPA" if k is None else f"LoPA (k = {k})"
    return {"lopa": lopa, "best": "best order found", "vanilla": "vanilla D2F"}.get(config, config)


def headroom_figure(df, summary: dict, title: str = "") -> go.Figure:
    """Left: per problem, TPF of the random orders (box), vanilla, LoPA at the search's k and the best order
    found. Right: pooled TPF and accuracy of every order."""
    fig = make_subplots(1, 2, column_widths=[0.7, 0.3], horizontal_spacing=0.1,
                        subplot_titles=("TPF per problem: random orders (box), LoPA and the best order found",
                                        "pooled TPF (bars) and accuracy"))
    k = summary.get("k")
    if len(df):
        rand = df[df.config == "random"]
        if len(rand):
            fig.add_trace(go.Box(x=rand.problem.astype(str), y=rand.tpf, name=_random_name(k),
                                 marker_color=COLOURS["random"], boxpoints="all", jitter=0.4, pointpos=0,
                                 marker_size=3, line_width=1), 1, 1)
        for config, symbol, _, colour in HEADROOM_MARKS:
            rows = _headroom_rows(df, config, k)
            name = _headroom_name(config, k)
            fig.add_trace(go.Scatter(x=rows.problem.astype(str), y=rows.tpf, mode="markers", name=name,
                                     marker=dict(symbol=symbol, size=10, color=colour),
                                     hovertext=[f"problem {p}: {f} forwards" for p, f in zip(rows.problem, rows.forwards)]),
                          1, 1)
        configs = summary.get("per_config", {})
        fig.add_trace(go.Bar(x=list(configs), y=[c["tpf"] for c in configs.values()], showlegend=False,
                             marker_color="#56B4E9",
                             text=["" if c["accuracy"] is None else f"{c['accuracy'] * 100:.0f}%" for c in configs.values()],
                             textposition="outside", cliponaxis=False,
                             hovertext=[f"{n}: TPF {c['tpf']:.2f}" for n, c in configs.items()]),
                      1, 2)
    fig.update_xaxes(title_text="problem", row=1, col=1)
    fig.update_yaxes(title_text="tokens per forward", row=1, col=1)
    fig.update_yaxes(title_text="pooled TPF (label: accuracy)", row=1, col=2)
    share = summary.get("gap_share")
    if share is not None:
        lo, hi = summary["gap_share_ci95"]
        title = f"{title}\nLoPA closes {share * 100:.0f}% (95% CI {lo * 100:.0f}..{hi * 100:.0f}%) of the gap to the best order found"
    return _layout(fig, title)


def headroom_png(df, summary: dict, title: str, path) -> None:
    plt = _pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, gridspec_kw={"width_ratios": [3, 1.3]})
    k = summary.get("k")
    problems = sorted(df.problem.unique())
    rand = df[df.config == "random"]
    if len(rand):
        ax.boxplot([rand[rand.problem == p].tpf for p in problems], positions=range(len(problems)), widths=0.6,
                   showfliers=False)
    for config, _, marker, colour in HEADROOM_MARKS:
        rows = _headroom_rows(df, config, k).set_index("problem").reindex(problems)
        label = _headroom_name(config, k)
        ax.scatter(range(len(problems)), rows.tpf, marker=marker, s=45, color=colour, label=label, zorder=3)
    _problem_axis(ax, problems)
    ax.set_ylabel("tokens per forward")
    _legend_above(ax)
    configs = summary.get("per_config", {})
    bars = bx.bar(range(len(configs)), [c["tpf"] for c in configs.values()], color="#56B4E9")
    for bar, c in zip(bars, configs.values()):
        if c["accuracy"] is not None:
            bx.annotate(f"{c['accuracy'] * 100:.0f}%", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=6)
    bx.set_xticks(range(len(configs)), list(configs), rotation=60, ha="right", fontsize=6)
    bx.set_ylabel("pooled TPF (label: accuracy)")
    share = summary.get("gap_share")
    if share is not None:
        lo, hi = summary["gap_share_ci95"]
        title = f"{title}\nLoPA closes {share * 100:.0f}% (95% CI {lo * 100:.0f}..{hi * 100:.0f}%) of the gap to the best order found"
    _suptitle(fig, title)
    _save(fig, path)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _suptitle(fig, title: str) -> None:
    """The PNG's title, wrapped, the figure made taller by its lines so the plots keep their size below
    it (a long title ran off the picture)."""
    lines = title_lines(title, 110)
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + 0.16 * len(lines))
    fig.suptitle("\n".join(lines), fontsize=9)


def _problem_axis(ax, problems) -> None:
    """Problem numbers on the x axis, at most about 25 of them (more overlapped)."""
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 10**9) if len(problems) / s <= 25)
    ax.set_xticks(range(0, len(problems), step), [str(p) for p in problems][::step], fontsize=7)
    ax.set_xlabel("problem")


def _legend_above(ax) -> None:
    """The legend in a row above the plot: inside it, it covered the points."""
    ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.01), ncol=4, frameon=False, borderaxespad=0)


def _save(fig, path) -> None:
    # Constrained layout places the title and the legends above the plots (tight_layout left a second
    # title line on the subplots).
    fig.set_layout_engine("constrained")
    fig.savefig(path)
    fig.get_figure().clf()
    import matplotlib.pyplot as plt
    plt.close(fig)


# -- frontier -----------------------------------------------------------------------------------------
FRONTIER_PANELS = (("tpf", "tokens per forward", "accuracy vs TPF"),
                   ("token_forwards", "token-forwards per answer (fewer is better)", "accuracy vs token-forwards"),
                   ("tps", "tokens per second", "accuracy vs tokens/s"))
RULE_COLOURS_COMMIT = {"threshold": "#E69F00", "eb": "#0072B2", "factor": "#009E73", "frechet": "#CC79A7",
                       "joint": "#56B4E9", "stable": "#D55E00", "learned": "#882255", "dawn": "#332288"}


def _frontier_label(r: dict) -> str:
    return (f"{r['rule']} {r['knob'].replace('_', ' ')} {r['value']:g}, k = {r['k']}"
            + (", token editing" if r.get("editing") else ""))


def frontier_figure(summary: dict, title: str = "") -> go.Figure:
    """Accuracy against TPF, token-forwards per answer and tokens/s, one point per decoder (colour: its
    commit rule; circle: k = 0, diamond: with lookahead; larger and outlined: on that panel's front,
    which is joined); D2F and LoPA labelled."""
    fig = make_subplots(1, 3, horizontal_spacing=0.07, subplot_titles=[p[2] for p in FRONTIER_PANELS])
    rows = summary.get("cells", [])
    refs = {summary["goal"][role]: name for role, name in (("d2f", "D2F"), ("lopa", "LoPA"))} if summary.get("goal") else {}
    shown = set()
    for col, (measure, axis, _) in enumerate(FRONTIER_PANELS, 1):
        for r in rows:
            acc = (r["accuracy"] or 0.0) * 100
            on = r[f"front_{measure}"]
            legend = r["rule"] not in shown
            shown.add(r["rule"])
            fig.add_trace(go.Scatter(
                x=[r[measure]], y=[acc], mode="markers+text" if r["cell"] in refs else "markers",
                text=[refs.get(r["cell"], "")], textposition="top center", name=r["rule"], legendgroup=r["rule"],
                showlegend=legend, hovertext=_frontier_label(r),
                marker=dict(size=12 if on else 7, color=RULE_COLOURS_COMMIT.get(r["rule"], "#999999"),
                            symbol=("diamond" if r["k"] else "circle") + ("-open" if r.get("editing") else ""),
                            line=dict(color="black" if on else RULE_COLOURS_COMMIT.get(r["rule"], "#999999"),
                                      width=1.5 if on or r.get("editing") else 0))), 1, col)
        front = sorted((r[measure], (r["accuracy"] or 0.0) * 100) for r in rows if r[f"front_{measure}"])
        if front:
            fig.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines", showlegend=False,
                                     line=dict(color="#bbbbbb", dash="dot")), 1, col)
        fig.update_xaxes(title_text=axis, row=1, col=col)
    fig.update_yaxes(title_text="accuracy, %", row=1, col=1)
    return _layout(fig, title, height=480)


def frontier_png(summary: dict, title: str, path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4), dpi=110, sharey=True)
    rows = summary.get("cells", [])
    refs = {summary["goal"][role]: name for role, name in (("d2f", "D2F"), ("lopa", "LoPA"))} if summary.get("goal") else {}
    for ax, (measure, axis, name) in zip(axes, FRONTIER_PANELS):
        for r in rows:
            on = r[f"front_{measure}"]
            colour = RULE_COLOURS_COMMIT.get(r["rule"], "#999999")
            ax.scatter(r[measure], (r["accuracy"] or 0.0) * 100, marker="D" if r["k"] else "o", s=70 if on else 25,
                       color="none" if r.get("editing") else colour, linewidths=1.2,
                       edgecolor="k" if on else colour if r.get("editing") else "none")
            if r["cell"] in refs:
                ax.annotate(refs[r["cell"]], (r[measure], (r["accuracy"] or 0.0) * 100), fontsize=8, xytext=(4, 4),
                            textcoords="offset points")
        front = sorted((r[measure], (r["accuracy"] or 0.0) * 100) for r in rows if r[f"front_{measure}"])
        ax.plot([p[0] for p in front], [p[1] for p in front], ls=":", color="#999")
        ax.set_xlabel(axis)
        ax.set_title(name, fontsize=9)
    axes[0].set_ylabel("accuracy, %")
    from matplotlib.lines import Line2D
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    handles = ([Line2D([], [], ls="", marker="o", color=RULE_COLOURS_COMMIT.get(rule, "#999999"), label=rule) for rule in rules]
               + [Line2D([], [], ls="", marker="o", color="#666", label="k = 0"),
                  Line2D([], [], ls="", marker="D", color="#666", label="with lookahead"),
                  Line2D([], [], ls="", marker="o", color="white", markeredgecolor="k", markersize=9, label="on the front")]
               + ([Line2D([], [], ls="", marker="o", color="white", markeredgecolor="#666", label="token editing")]
                  if any(r.get("editing") for r in rows) else []))
    fig.legend(handles=handles, fontsize=8, loc="outside lower center", ncol=len(handles), frameon=False)
    _suptitle(fig, title)
    _save(fig, path)
