"""Figures and HTML views on a real trace made by the engine (tiny random Qwen2, word-level tokenizer).

The checks tie every drawn value back to the trace: cells per state, heatmap deltas, bar heights,
TFO rounds. Nothing here depends on the model being any good.
"""

import dataclasses
import html as html_lib
import math
import re

import pytest
from tiny import LIVELY, tiny_qwen2, tiny_spec, tiny_tokenizer

from lopa import Decoder, DecodeSettings, RunResult
from lopa.trace import metrics
from visualizations import (
    branches_table,
    comparison_summary,
    confidence_heatmap,
    counters_html,
    detail_note,
    detail_round,
    explain_round,
    tfo_map,
    token_canvas,
    tokens_per_round_chart,
)
from visualizations.labels import token_label
from visualizations.palette import text_on, viridis
from visualizations.timeline import commits, fills

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
# Low thresholds so that a random model commits several tokens per round and lookahead matters.


def decode(k: int) -> tuple[RunResult, dict]:
    tokenizer = tiny_tokenizer()
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=k, **LIVELY), tokenizer).run(PROMPT)
    names = {i: tokenizer.decode([i]) for i in range(len(tokenizer))}
    return run, names


@pytest.fixture(scope="module")
def lopa():
    return decode(3)


@pytest.fixture(scope="module")
def vanilla():
    return decode(0)


def rounds_with_forward(run):
    return [r for r, rec in enumerate(run.records) if rec.kind == "round"]


def test_fills_rebuild_the_final_tokens_and_per_round_commits(lopa):
    run, _ = lopa
    done, mask = fills(run.records), run.spec["mask_token_id"]
    assert {p: f.token for p, f in done.items()} == {p: t for p, t in enumerate(run.tokens) if t != mask}
    for r, rec in enumerate(run.records):
        assert len(commits(rec)) == rec.committed
        assert sum(f.round == r for f in done.values()) == rec.committed
    assert all(0.0 <= f.max_prob <= 1.0 for f in done.values())


def test_canvas_shows_every_position_with_its_state(lopa):
    run, names = lopa
    for r in range(len(run.records)):
        html = token_canvas(run, r, names)
        rec = run.records[r]
        states = re.findall(r'data-state="(\w+)"', html)
        assert len(states) == len(rec.block_states) * 8
        assert states.count("anchor") == len(rec.anchor_positions)
        assert states.count("lookahead") == int(rec.winner > 0)
        committed = {p for p, f in fills(run.records, r).items()}
        assert states.count("masked") == len(states) - len(committed)
        assert f'data-round="{r}"' in html
    assert "cached" in token_canvas(run, len(run.records) - 1, names)
    hover = html_lib.unescape(re.search(r'data-state="anchor" title="([^"]*)"', token_canvas(run, 1, names)).group(1))
    assert "committed by this round's anchor" in hover and "max prob" in hover and "token '" in hover


def test_canvas_cells_carry_their_colour_and_the_stylesheet_their_look(lopa):
    """A live Run re-sends the canvas at every round: each cell holds only its colour, the states' look is
    CANVAS_CSS, on the page once."""
    from visualizations import CANVAS_CSS
    from visualizations.canvas import STATE_STYLE
    run, names = lopa
    for r in range(len(run.records)):
        styles = re.findall(r'<div class="lopa-cell[^>]*style="([^"]*)"', token_canvas(run, r, names))
        assert styles and all({d.split(":")[0] for d in st.split(";")} <= {"background", "color", "--fill"}
                              for st in styles), styles[:3]
    for state, (border, _, _) in STATE_STYLE.items():
        assert f".lopa-{state}{{border:{border};" in CANVAS_CSS
    from app.page import LAUNCH_KWARGS
    assert CANVAS_CSS in LAUNCH_KWARGS["css"]


def test_canvas_text_is_what_the_canvas_holds_at_each_round(lopa):
    """"output so far" at round r: the tokens committed by r, in place, ▢ where one is still masked before the
    last committed; the final round gives the run's own text."""
    from visualizations import canvas_text
    run, names = lopa
    eos, last = set(run.spec["eos_token_ids"]), len(run.records) - 1
    assert canvas_text(run, last, names) == run.text
    for r in range(last):
        done = fills(run.records, r)
        end = next((p for p in sorted(done) if done[p].token in eos), max(done, default=-1) + 1)
        expected = "".join(names[done[p].token] if p in done else "▢" for p in range(end))
        assert canvas_text(run, r, names) == expected
    assert canvas_text(run, 0, names) != run.text                  # the prefill's commits only
    # the latest round of a run still decoding (read from its tokens) is what its rounds' commits give
    mask = run.spec["mask_token_id"]
    for r in range(1, last):
        done = fills(run.records, r)
        live = dataclasses.replace(run, records=run.records[:r + 1],
                                   tokens=[done[p].token if p in done else mask for p in range(len(run.tokens))])
        assert canvas_text(live, r, names) == canvas_text(run, r, names)
    assert canvas_text(RunResult(prompt="", prompt_ids=[], settings={}, spec={}, records=[], tokens=[]), 0) == ""


def test_canvas_escapes_token_strings_and_falls_back_to_ids(lopa):
    run, _ = lopa
    evil = {t: "<script>x</script>" for t in run.tokens}
    assert "<script>" not in token_canvas(run, 2, evil)
    assert "#" in token_canvas(run, 2, None)                  # replay without a tokenizer: ids
    assert token_label(5, None) == "#5" and token_label(0, {0: " "}, mask_id=9) == "␣"


def test_branches_table_and_explanation_name_the_winner(lopa):
    from visualizations.timeline import predictions

    run, names = lopa
    said = 0
    for r in rounds_with_forward(run):
        rec = run.records[r]
        html = branches_table(run, r, names)
        assert html.count('<tr class="lopa-branch') == len(rec.branch_scores)
        assert re.search(rf'lopa-winner" data-branch="{rec.winner}"', html)
        text = explain_round(run, r, names)
        assert (f"Winner: B{rec.winner}" if rec.winner else "Winner: the anchor") in text
        if rec.winner:       # the winning token's own max prob, which the score never checks, is said
            own = predictions(run.records[r - 1])[rec.lookahead_positions[rec.winner - 1]].max_prob
            said += f"max prob {own:.2f} when it was proposed" in text
    assert said >= 1
    assert "prompt forward" in explain_round(run, 0, names)
    if run.records[-1].kind == "final":
        assert "no forward" in branches_table(run, len(run.records) - 1, names)
        # the final round's detail views show the last round with branches, and say so
        end = len(run.records) - 1
        last = max(i for i, x in enumerate(run.records) if x.kind == "round" and x.lookahead_positions)
        assert detail_round(run.records, end) == last and detail_round(run.records, last) == last
        assert f"below are round {last}'s, the last round with lookahead branches" in explain_round(run, end, names)
        assert f'data-detail-round="{last}"' in detail_note(run, end) and detail_note(run, last) == ""


def test_heatmap_shows_each_branch_minus_the_anchor_with_the_lookahead_cell_marked(lopa):
    run, names = lopa
    r = next(r for r in rounds_with_forward(run) if len(run.records[r].lookahead_positions) == 3)
    rec = run.records[r]
    fig = confidence_heatmap(run, r, names)
    anchor, delta, marks = fig.data[0], fig.data[1], fig.data[2]
    columns = [int(x) for x in anchor.x]
    assert len(anchor.z) == 1 and len(delta.z) == 3 and all(len(row) == len(columns) for row in delta.z)
    conf = [dict(zip(p, c)) for p, c in zip(rec.branch_positions, rec.branch_conf)]
    for j in range(1, 4):
        look = rec.lookahead_positions[j - 1]
        for x, value in zip(columns, delta.z[j - 1]):
            if x == look or x not in conf[j] or x not in conf[0]:
                assert math.isnan(value)
            else:
                assert value == pytest.approx(conf[j][x] - conf[0][x])
    assert sorted(int(x) for x in marks.x) == sorted(rec.lookahead_positions)
    assert delta.zmid == 0
    assert any(s.type == "rect" for s in fig.layout.shapes)           # the winner is outlined
    assert "★" in (anchor.y[0] if rec.winner == 0 else delta.y[rec.winner - 1])


def test_heatmap_of_prefill_and_final_rounds(lopa):
    run, names = lopa
    assert len(confidence_heatmap(run, 0, names).data) == 1              # prefill: anchor strip only
    if run.records[-1].kind == "final":
        fig = confidence_heatmap(run, len(run.records) - 1, names)
        assert not fig.data and "nothing left masked" in fig.layout.annotations[0].text


def test_tokens_per_round_chart_matches_commits(lopa):
    run, _ = lopa
    fig = tokens_per_round_chart(run, current=2)
    anchor, look = fig.data
    assert [a + b for a, b in zip(anchor.y, look.y)] == [rec.committed for rec in run.records]
    assert len(fig.layout.shapes) == 1


def test_tfo_maps_share_one_colour_scale(lopa, vanilla):
    run, names = lopa
    base, _ = vanilla
    top = max(len(run.records), len(base.records))
    fig = tfo_map(run, names, zmax=top)
    z = fig.data[0].z
    done = fills(run.records)
    assert len(z) == len(run.tokens) // 8
    assert all(z[p // 8][p % 8] == done[p].round for p in done)
    assert fig.data[0].zmax == top == tfo_map(base, names, zmax=top).data[0].zmax


def test_counters_and_comparison_summary(lopa, vanilla):
    run, _ = lopa
    base, _ = vanilla
    m = run.metrics()
    html = counters_html(run, 1.5, "done")
    assert f'data-counter="rounds" data-value="{m["rounds"]}"' in html
    assert f'data-value="{m["tpf_useful"]:.2f}"' in html and 'data-status="done"' in html
    assert 'data-rounds="0"' in counters_html(None, 0.0, "idle")
    summary = comparison_summary(base, run, "D2F")
    speedup = base.metrics()["forwards"] / m["forwards"]
    assert f"{speedup:.2f}× fewer forwards" in summary and "| TPF (useful) |" in summary
    assert f"| {base.metrics()['fill_spread']:.2f} | {m['fill_spread']:.2f} |" in summary   # how uneven each order was


def test_counters_and_summary_show_the_cost_beside_tpf(lopa, vanilla):
    """Forwards, token-forwards and wall-clock (with the device it ran on) sit beside TPF in the counters and
    the comparison, with the sentence saying why fewer forwards can still be slower; the old keys stay."""
    from visualizations.glossary import FEWER_FORWARDS_SLOWER
    run, _ = lopa
    base, _ = vanilla
    m, mb = run.metrics(), base.metrics()
    assert m["token_forwards"] > 0 and m["device"] == "cpu"
    html = counters_html(run, 1.5, "done")
    assert f'data-counter="token-forwards" data-value="{m["token_forwards"]}"' in html
    assert f'data-counter="forwards" data-value="{m["forwards"]}"' in html
    assert f'data-counter="latency" data-value="{m["latency_s"]:.2f} s"' in html and ">wall-clock<" in html
    assert 'data-counter="device" data-value="cpu"' in html and 'data-counter="elapsed"' in html
    assert html_lib.escape(FEWER_FORWARDS_SLOWER) in html and 'href="#term-token-forwards"' in html
    assert 'data-counter="commit"' not in html                     # D2F's threshold: the default, not a box
    summary = comparison_summary(base, run, "D2F")
    assert f"| token-forwards (positions all forwards processed) | {mb['token_forwards']} | {m['token_forwards']} |" in summary
    assert f"({mb['token_forwards']} → {m['token_forwards']})" in summary and "on cpu" in summary
    assert FEWER_FORWARDS_SLOWER in summary and "| wall-clock (s) |" in summary


def peer_run(rule: str, k: int) -> RunResult:
    tokenizer = tiny_tokenizer()
    settings = DecodeSettings(k=k, commit=rule, **{**LIVELY, "confidence": "neg_entropy"})
    return Decoder(tiny_qwen2(seed=1), tiny_spec(), settings, tokenizer).run(PROMPT)


@pytest.mark.parametrize("rule", ["eb", "factor", "frechet", "joint", "stable"])
def test_a_peer_s_rounds_show_on_the_same_canvas_heatmap_and_counters(rule):
    from visualizations.glossary import rule_name
    run = peer_run(rule, 0)
    r = rounds_with_forward(run)[0]
    assert run.records[r].anchor_positions and 'data-state="anchor"' in token_canvas(run, r)
    assert confidence_heatmap(run, r).data
    assert f'data-counter="commit" data-value="{rule_name(rule)}"' in counters_html(run, 1.0, "done")
    # k = 0: one line says there is no branch to compare, in place of the table
    line = branches_table(run, r)
    assert "<table" not in line and "lopa-no-branches" in line and f'data-round="{r}"' in line
    assert "k = 0" in line and f"the {rule_name(rule)} rule committed {len(run.records[r].anchor_positions)} token" \
        in html_lib.unescape(re.sub(r"<[^>]+>", "", line))
    assert "No branches" in branches_table(run, 0) and f"k = 0 ({rule_name(rule)} alone)" in explain_round(run, r)
    lopa = peer_run(rule, 2)              # lookahead over the rule: the table again
    assert "<table" in branches_table(lopa, rounds_with_forward(lopa)[0])


def test_the_glossary_names_each_commit_rule_in_one_line():
    from lopa.settings import COMMIT_RULES
    from visualizations import glossary_html
    from visualizations.glossary import COMMIT_RULE_NAMES, PEER_RULES
    assert tuple(COMMIT_RULE_NAMES) == COMMIT_RULES and PEER_RULES == COMMIT_RULES[2:]
    page = glossary_html()
    for rule in PEER_RULES:
        name, _, words = COMMIT_RULE_NAMES[rule]
        assert f'<dt id="term-rule-{rule}">{html_lib.escape(name)}</dt><dd>{html_lib.escape(f"commit = {rule}: {words}")}</dd>' \
            in page
    assert 'id="term-token-forwards"' in page and 'id="term-wall-clock"' in page and 'id="term-commit-rule"' in page


def test_live_counters_count_committed_tokens_not_masks(lopa):
    run, _ = lopa
    assert metrics(run) == run.metrics()                     # finished: the engine's own metrics
    mask = run.spec["mask_token_id"]
    after = RunResult(prompt=run.prompt, prompt_ids=run.prompt_ids, settings=run.settings, spec=run.spec,
                      records=run.records[:3], tokens=[fills(run.records, 2).get(p).token if p in fills(run.records, 2)
                                                       else mask for p in range(16)], stopped=True)
    m = metrics(after)
    committed = sum(rec.committed for rec in run.records[:3])
    assert m["tokens_paper"] == committed and m["tpf_paper"] == pytest.approx(committed / 3)
    assert metrics(None)["rounds"] == 0


def test_replayed_trace_renders_without_names(lopa, tmp_path):
    run, _ = lopa
    back = RunResult.load(run.save(tmp_path / "t.parquet"))
    r = rounds_with_forward(back)[0]
    assert token_canvas(back, r) == token_canvas(run, r)
    assert confidence_heatmap(back, r).to_json() == confidence_heatmap(run, r).to_json()


def test_palette_is_viridis_with_readable_text():
    assert viridis(0.0) == "#440154" and viridis(1.0) == "#fde725" and viridis(2.0) == "#fde725"
    assert viridis(float("nan")) == "#999999"
    assert text_on("#440154") == "#ffffff" and text_on("#fde725") == "#000000"


def test_every_colour_bar_spans_a_real_range(lopa, vanilla):
    """plotly.js throws on a colour bar over an empty range (zmin == zmax), and in the app such an
    exception stopped the browser from applying other outputs."""
    run, names = lopa
    base, _ = vanilla
    partial = RunResult(prompt=run.prompt, prompt_ids=run.prompt_ids, settings=run.settings, spec=run.spec,
                        records=run.records[:1], tokens=run.tokens[:8])
    figures = [confidence_heatmap(r, i, names) for r in (run, base) for i in range(len(r.records))]
    figures += [tfo_map(partial), tfo_map(run, zmax=1), tfo_map(base)]
    for fig in figures:
        for trace in fig.data:
            if trace.type == "heatmap" and trace.zmin is not None:
                assert trace.zmax > trace.zmin


def test_round_view_splits_the_winners_gain_into_removal_and_change(lopa):
    from lopa.rules import score_split
    run, names = lopa
    won = [r for r, rec in enumerate(run.records) if rec.kind == "round" and rec.winner > 0]
    assert won
    r = won[0]
    rec = run.records[r]
    parts = score_split(rec.branch_positions[0], rec.branch_conf[0], rec.branch_positions[rec.winner],
                        rec.branch_conf[rec.winner], rec.lookahead_positions[rec.winner - 1])
    table = branches_table(run, r, names)
    assert "removal + change" in table and f"{parts['removal']:+.3f} removal, {parts['change']:+.3f} change" in table
    text = explain_round(run, r, names)
    assert "Why it won" in text and f"{parts['removal']:+.3f}" in text and "*removal*" in text
    other = dict(run.settings, branch_score="min")                  # another rule: no split is claimed
    assert "Why it won" not in explain_round(type(run)(**{**run.__dict__, "settings": other}), r, names)


def test_lookahead_chains_show_as_chain_rows_and_the_winner_s_kept_chain():
    """lookahead_depth > 1: every chain is a row at its kept prefix (labelled as a chain with its tokens), every round explains its winner, and the heatmap marks every position a row filled."""
    tokenizer = tiny_tokenizer()
    s = DecodeSettings(k=3, lookahead_depth=3, **LIVELY)
    run = Decoder(tiny_qwen2(seed=1), tiny_spec(), s, tokenizer).run(PROMPT)
    names = {i: tokenizer.decode([i]) for i in range(len(tokenizer))}
    rounds = [r for r, rec in enumerate(run.records) if rec.kind == "round"]
    assert any(len(run.records[r].branch_scores) > s.k + 1 for r in rounds)
    for r in rounds:
        rec = run.records[r]
        table = branches_table(run, r, names)
        # one row per chain (its kept prefix), not one per verified prefix (issue 58)
        assert table.count('<tr class="lopa-branch') == 1 + (len(rec.chain_rows) or len(rec.branch_scores) - 1)
        assert ("chain" in table) == bool(rec.chain_rows)          # a round with chains has their column
        kept = {rows[n - 1] for rows, n in zip(rec.chain_rows, rec.chain_kept)}
        assert all(f"B{j} chain" in table for j in kept) and rec.winner in kept | {0}
        text = explain_round(run, r, names)
        assert f"Winner: B{rec.winner}" in text or (rec.winner == 0 and "Winner: the anchor" in text)
        if len(rec.row_fills(rec.winner)) > 1:
            assert f"a chain of {len(rec.row_fills(rec.winner))} tokens" in text
        fig = confidence_heatmap(run, r, names)
        marked = [(x, y) for t in fig.data if t.name == "lookahead token" for x, y in zip(t.x, t.y)]
        assert len(marked) == sum(len(rec.row_fills(j)) for j in range(1, len(rec.branch_scores)))
    assert [rec.row_fills(j) for rec in run.records if rec.kind == "round" for j in (0, 1)][:2] == \
        [[], [(run.records[rounds[0]].lookahead_positions[0], run.records[rounds[0]].lookahead_tokens[0])]]


@pytest.mark.parametrize("row_heights", [[1], [1, 1], [1, 4], [1, 14], [2, 3, 5]])
def test_stacked_rows_lay_out_as_make_subplots_does(row_heights):
    """visualizations.heatmap.stacked_rows, the heatmap's grid made directly, against plotly's make_subplots."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from visualizations.heatmap import stacked_rows
    ref = make_subplots(rows=len(row_heights), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        row_heights=row_heights).to_dict()["layout"]
    mine = go.Figure(layout=stacked_rows(row_heights)).to_dict()["layout"]
    ref.pop("template", None), mine.pop("template", None)
    assert mine.keys() == ref.keys()
    for name, axis in ref.items():
        assert {k: v for k, v in mine[name].items() if k != "domain"} == {k: v for k, v in axis.items() if k != "domain"}
        assert mine[name]["domain"] == pytest.approx(axis["domain"], abs=1e-12)
