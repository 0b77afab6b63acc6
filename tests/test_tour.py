"""The arrival view and the guided tour: every claim a step makes is recomputed here from the records
of the trace it shows, by code independent of app/panels/tour/steps.py, on the shipped traces, on traces
decoded now by the bundled default model, on the same traces replayed from JSON without their token
strings, and on a tiny random model whose lookahead branches win often. Then the callbacks, the
recording script and the arrival HTML."""

import html
import json
import re

import gradio as gr
import pytest
from tiny import LIVELY, PROMPT, save_tiny_model_dir, tiny_qwen2, tiny_spec, tiny_tokenizer

from app.panels.tour import callbacks as tour
from app.panels.tour.steps import tour_steps
from app.serving.session import APP_DEFAULTS, Session
from lopa import Decoder, DecodeSettings, RunResult, decoder_settings
from lopa.models import load
from visualizations import arrival_html, story_sentence


def _pair_on(loaded, prompt, settings):
    runs = [loaded.decoder(s).run(prompt) for s in (decoder_settings("d2f", settings), settings)]
    ids = {t for run in runs for t in run.tokens}
    names = {i: loaded.tokenizer.decode([i]) for i in ids}
    return runs[0], runs[1], names


@pytest.fixture(scope="module")
def default_pair():
    from app.serving.models import example_prompts
    return _pair_on(load(), example_prompts()[0], DecodeSettings(**APP_DEFAULTS))


@pytest.fixture(scope="module")
def tiny_pair():
    tokenizer = tiny_tokenizer()
    runs = [Decoder(tiny_qwen2(seed=1), tiny_spec(), s, tokenizer).run(PROMPT)
            for s in (DecodeSettings(k=0, **LIVELY), DecodeSettings(k=4, **LIVELY))]
    return runs[0], runs[1], {i: tokenizer.decode([i]) for i in range(len(tokenizer))}


def _pairs(request):
    pairs = {"default model": request.getfixturevalue("default_pair"), "tiny": request.getfixturevalue("tiny_pair")}
    d2f, lopa, _ = pairs["default model"]
    # Replayed: through the JSON a user uploads, with no token strings (a trace of a model not here).
    pairs["replayed"] = (RunResult.from_json(d2f.to_json()), RunResult.from_json(lopa.to_json()), {})
    shipped = tour.shipped()
    if not isinstance(shipped, str):
        pairs["shipped"] = (shipped.d2f, shipped.lopa, shipped.names)
    return pairs


# -- independent readings of a trace ---------------------------------------------------------------
def fill_round_of(records) -> dict:
    """position -> round that committed it, from the raw anchor / winner fields."""
    out = {}
    for rec in records[1:]:
        for p in rec.anchor_positions:
            out[p] = rec.round
        if rec.winner > 0:
            out[rec.lookahead_positions[rec.winner - 1]] = rec.round
    return out


def forwards(run) -> int:
    return sum(rec.kind != "final" for rec in run.records)


def winner_preds(rec) -> dict:
    """position -> (max prob, conf) of the winner's forward."""
    w = rec.winner
    return {p: (mp, c) for p, mp, c in zip(rec.branch_positions[w], rec.branch_max_prob[w], rec.branch_conf[w])}


def plain(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text))


def check_steps(d2f, lopa, names):
    steps = {s.key: s for s in tour_steps(d2f, lopa, names)}
    assert list(steps) == ["fill", "anchor", "branches", "winner", "order", "try"]
    tau = float(lopa.settings["tau_conf"])
    N = int(d2f.settings["block_size"])

    # 1. The round of D2F that commits the most tokens at once (earliest), and what is still masked.
    s = steps["fill"]
    rounds = [rec for rec in d2f.records if rec.kind == "round"]
    most = max(len(rec.anchor_positions) for rec in rounds)
    r = min(rec.round for rec in rounds if len(rec.anchor_positions) == most)
    rec = d2f.records[r]
    filled = {p for p, rr in fill_round_of(d2f.records).items() if rr <= r}
    masked = len(rec.block_states) * N - len(filled)
    text = plain(s.text)
    assert (s.run, s.round, s.target) == ("d2f", r, "#canvas")
    assert f"Round {r} of vanilla D2F commits {most} tokens at once" in text
    assert f"the {masked} pale cells are still masked" in text
    assert f"D2F needed {forwards(d2f)} forwards" in text

    # 2-3. The first LoPA round with lookahead branches: its anchor and its branches.
    first = next(rec for rec in lopa.records if rec.kind == "round" and rec.lookahead_positions)
    r = first.round
    before = winner_preds(lopa.records[r - 1])
    s = steps["anchor"]
    assert (s.run, s.round) == ("lopa", r) and f"In round {r} it commits" in plain(s.text)
    n = len(first.anchor_positions)
    assert n == 0 or f"it commits {n} token" in plain(s.text)
    for p in first.anchor_positions[:8]:                    # the first eight by name, then a count
        assert f"{p} ←" in plain(s.text)
    if all(before[p][0] > tau for p in first.anchor_positions):
        assert "each had max prob above τ_conf" in plain(s.text)
    s = steps["branches"]
    assert (s.run, s.round, s.target) == ("lopa", r, "#branches")
    assert f"All {len(first.lookahead_positions) + 1} branches" in plain(s.text)
    for p in first.lookahead_positions:
        assert f"{p} ←" in plain(s.text)
    if lopa.settings["order"] == "confidence" and not lopa.settings.get("lookahead_min_prob"):
        # "the k most confident positions still masked": no other candidate beats the weakest chosen one
        candidates = {p: c for p, (_, c) in before.items() if p not in first.anchor_positions}
        weakest = min(candidates[p] for p in first.lookahead_positions)
        assert sum(c > weakest for c in candidates.values()) < len(first.lookahead_positions)
        assert "most confident positions still masked" in plain(s.text)

    # 4. The round where a lookahead branch won and made the most extra positions confident.
    s = steps["winner"]
    ready = lambda rec, j: sum(mp > tau for mp in rec.branch_max_prob[j])       # noqa: E731
    won = [rec for rec in lopa.records if rec.kind == "round" and rec.winner > 0]
    if not won:
        assert "the anchor won every round" in plain(s.text)
    else:
        best = max(ready(rec, rec.winner) - ready(rec, 0) for rec in won)
        rec = next(rec for rec in won if ready(rec, rec.winner) - ready(rec, 0) == best)
        w, text = rec.winner, plain(s.text)
        assert (s.run, s.round, s.target) == ("lopa", rec.round, "#heatmap")
        assert rec.branch_scores[w] == max(rec.branch_scores)                    # "the highest of k + 1"
        assert f"In round {rec.round}, branch B{w} (position {rec.lookahead_positions[w - 1]} ←" in text
        assert f"the highest of {len(rec.branch_scores)}" in text
        for x in (rec.branch_scores[w], rec.branch_scores[0]):
            assert ("∞" if x == float("inf") else f"{x:.3f}") in text
        assert f"{ready(rec, w)} positions clear τ_conf = {tau}, against {ready(rec, 0)} without it" in text
        if rec.round + 1 < len(lopa.records):
            assert f"anchor then committed {len(lopa.records[rec.round + 1].anchor_positions)} tokens" in text

    # 5. The filling orders compared: positions of the answer LoPA filled earlier.
    s = steps["order"]
    fd, fl = fill_round_of(d2f.records), fill_round_of(lopa.records)
    n = min(len(d2f.useful_tokens), len(lopa.useful_tokens))
    both = [p for p in range(n) if p in fd and p in fl]
    earlier = [p for p in both if fl[p] < fd[p]]
    text = plain(s.text)
    assert s.run is None and "#base-tfo" in s.target
    assert f"needed {forwards(lopa)} forwards where D2F needed {forwards(d2f)}" in text
    if earlier:
        assert f"{len(earlier)} of the answer's {len(both)} positions earlier" in text
        gain = max(fd[p] - fl[p] for p in earlier)
        p = min(p for p in earlier if fd[p] - fl[p] == gain)
        assert f"position {p}," in text and f"round {fd[p]} → {fl[p]}" in text

    # 6. Try it: a still-masked position of the first branch round, the model's least sure guess there.
    s = steps["try"]
    rec = lopa.records[first.round]
    preds = winner_preds(rec)
    p = min(preds, key=lambda q: (preds[q][0], q))
    assert p not in {q for q, rr in fill_round_of(lopa.records).items() if rr <= first.round}
    assert (s.run, s.round) == ("lopa", first.round)
    assert f"position {p}, where round {first.round}'s forward guesses" in plain(s.text)
    assert f"max prob {preds[p][0]:.2f}" in plain(s.text)

    # The arrival sentence.
    sentence = story_sentence(d2f, lopa)
    assert f"LoPA needed {forwards(lopa)} forwards" in sentence and str(forwards(d2f)) in sentence
    wins = sum(rec.winner > 0 for rec in lopa.records if rec.kind == "round" and rec.lookahead_positions)
    assert ("no lookahead branch ever beat the anchor" in sentence) == (wins == 0)


@pytest.mark.parametrize("which", ["default model", "replayed", "tiny", "shipped"])
def test_every_step_claim_is_true_of_the_trace_it_shows(request, which):
    pairs = _pairs(request)
    if which not in pairs:
        pytest.skip("no shipped traces: python -m app.panels.tour --record")
    check_steps(*pairs[which])


def test_the_anchor_step_names_each_peer_in_one_line(tiny_pair):
    """The anchor is D2F's commit rule; the step names every peer's rule, one line each, linked to the glossary."""
    from visualizations.glossary import COMMIT_RULE_NAMES, PEER_RULES
    d2f, lopa, names = tiny_pair
    text = {s.key: s for s in tour_steps(d2f, lopa, names)}["anchor"].text
    lines = re.findall(r"<li>(.*?)</li>", text)
    assert len(lines) == len(PEER_RULES)
    for line, rule in zip(lines, PEER_RULES):
        name, short, _ = COMMIT_RULE_NAMES[rule]
        assert f'href="#term-rule-{rule}"' in line and plain(line) == f"{name} (commit = {rule}) {short}"


def test_the_tiny_model_exercises_a_lookahead_win(tiny_pair):
    """So that the winner step's main branch is checked even when a bundled model never needs one."""
    assert any(rec.winner > 0 for rec in tiny_pair[1].records)


# -- callbacks --------------------------------------------------------------------------------------
@pytest.fixture
def traces(tmp_path, monkeypatch, tiny_pair):
    """The tour reading a pair written as the recording script writes it."""
    d2f, lopa, names = tiny_pair
    d2f.save(tmp_path / "d2f.json"), lopa.save(tmp_path / "lopa.json")
    (tmp_path / tour.MANIFEST).write_text(json.dumps({"model": "tiny", "runs": {"d2f": "d2f.json", "lopa": "lopa.json"},
                                                      "names": {str(i): s for i, s in names.items()}}))
    monkeypatch.setattr(tour, "TRACES", tmp_path)
    tour.shipped.cache_clear()
    data = tour.load_shipped(tmp_path)
    monkeypatch.setattr(tour, "shipped", lambda: data)
    return tmp_path


def test_each_step_puts_the_page_in_its_state(traces):
    data = tour.load_shipped(traces)
    steps = tour_steps(data.d2f, data.lopa, data.names)
    session, state = Session(), tour.new_tour_state()
    out = dict(zip(tour.TOUR_OUTPUTS, tour.start_tour(session, state)))
    for i, step in enumerate(steps):
        state = out["tour_state"]
        assert state["step"] == i and f'data-step="{i}"' in out["tour_card"]
        assert html.escape(step.target) in out["tour_card"]
        assert out["tour_prev"]["interactive"] == (i > 0) and out["tour_next"]["interactive"] == (i < len(steps) - 1)
        if step.run is not None:
            assert session.run.run_id == data.runs[step.run].run_id
            assert f'data-round="{step.round}"' in out["canvas"] and out["round_slider"]["value"] == step.round
        else:
            assert out["compare_status"].startswith("Tour") and "lopa-diff" in out["compare_diff"]
            assert (out["compare_a"]["value"], out["compare_b"]["value"]) == (state["ids"]["d2f"], state["ids"]["lopa"])
        out = dict(zip(tour.TOUR_OUTPUTS, tour.next_step(session, state)))
    assert out["tour_state"]["step"] == len(steps) - 1                      # Next on the last step stays there
    assert len(session.runs.entries) == 2                                   # the recorded runs were added once
    out = dict(zip(tour.TOUR_OUTPUTS, tour.previous_step(session, out["tour_state"])))
    assert out["tour_state"]["step"] == len(steps) - 2
    shown = session.current
    out = dict(zip(tour.TOUR_OUTPUTS, tour.end_tour(session, out["tour_state"])))
    assert out["tour_dock"]["visible"] is False and out["tour_card"] == "" and out["tour_state"]["step"] is None
    # the recorded runs leave the visitor's run list, and the view they filled empties
    assert session.runs.entries == {} and shown not in out["run_list"]["choices"] and session.current is None
    assert "Tour closed" in out["status"]


def test_next_after_close_keeps_the_tour_closed(traces):
    """Next then Close at once: the Next can reach the server after Close; it must not reopen the tour."""
    session, state = Session(), tour.new_tour_state()
    out = dict(zip(tour.TOUR_OUTPUTS, tour.start_tour(session, state)))
    closed = dict(zip(tour.TOUR_OUTPUTS, tour.end_tour(session, out["tour_state"])))
    for late in (tour.next_step, tour.previous_step):
        again = dict(zip(tour.TOUR_OUTPUTS, late(session, closed["tour_state"])))
        assert again["tour_dock"]["visible"] is False and again["tour_state"]["step"] is None
        assert again["tour_card"] == "" and all(v == gr.skip() for name, v in again.items()
                                                 if name not in ("tour_dock", "tour_card", "tour_state"))
    out = dict(zip(tour.TOUR_OUTPUTS, tour.start_tour(session, closed["tour_state"])))
    assert out["tour_state"]["step"] == 0 and out["tour_dock"]["visible"] is True      # and it opens again


def test_closing_keeps_a_recorded_run_the_visitor_forked(traces):
    session, state = Session(), tour.new_tour_state()
    out = dict(zip(tour.TOUR_OUTPUTS, tour.start_tour(session, state)))
    ids = out["tour_state"]["ids"]
    lopa = session.runs[ids["lopa"]]
    session.runs.add("fork", parent=ids["lopa"], at_round=1, run=lopa.run)
    session.select(ids["d2f"])
    out = dict(zip(tour.TOUR_OUTPUTS, tour.end_tour(session, out["tour_state"])))
    assert ids["lopa"] in session.runs and ids["d2f"] not in session.runs
    assert out["tour_state"]["ids"] == {"lopa": ids["lopa"]}


def test_the_tours_runs_leave_the_visitors_own_numbered_from_one(traces):
    session, state = Session(), tour.new_tour_state()
    ids = dict(zip(tour.TOUR_OUTPUTS, tour.start_tour(session, state)))["tour_state"]["ids"]
    assert sorted(ids.values()) == ["tour 1", "tour 2"]
    own = session.runs.add("confidence, k = 4")
    assert own.id == "1"                                   # not "run 3"
    assert session.runs.add("fork", parent=ids["lopa"]).id == ids["lopa"] + ".1"


def test_a_missing_trace_says_how_to_record_it(tmp_path, monkeypatch):
    tour.shipped.cache_clear()
    monkeypatch.setattr(tour, "TRACES", tmp_path)
    monkeypatch.setattr(tour, "shipped", lambda: "no recorded tour traces; record them with `python -m app.panels.tour --record`")
    out = dict(zip(tour.TOUR_OUTPUTS, tour.start_tour(Session(), tour.new_tour_state())))
    assert "python -m app.panels.tour --record" in out["tour_card"] and "--record" in tour.arrival()
    with pytest.raises(ValueError, match="python -m app.panels.tour --record"):
        tour.load_shipped(tmp_path)


def test_the_recording_script_writes_what_the_tour_reads(tmp_path):
    model = save_tiny_model_dir(tmp_path / "tiny-dllm")
    tour.main(["--record", "--model", str(model), "--out", str(tmp_path / "traces")])
    data = tour.load_shipped(tmp_path / "traces")
    assert data.model == "tiny-dllm" and data.d2f.settings["k"] == 0 and data.lopa.settings["k"] == APP_DEFAULTS["k"]
    assert data.d2f.prompt == data.lopa.prompt and data.names
    check_steps(data.d2f, data.lopa, data.names)


def test_arrival_html_escapes_token_strings_and_shows_both_runs(tiny_pair):
    d2f, lopa, names = tiny_pair
    hostile = {i: "<script>window.__pwned=1</script>" for i in names}
    page = arrival_html(d2f, lopa, hostile, note="<img src=x>")
    assert "<script>" not in page and "<img" not in page
    assert f'data-d2f-forwards="{forwards(d2f)}"' in page and f'data-lopa-forwards="{forwards(lopa)}"' in page
    assert page.count('class="lopa-story-side"') == 2
    assert html.escape(story_sentence(d2f, lopa)) in page


@pytest.mark.parametrize("which", ["tiny", "shipped"])
def test_every_box_of_a_step_holds_what_its_canvas_holds(which, request, monkeypatch):
    """Issue 58: each step's boxes (output so far, counters, branches, figures, round in words) are what the
    round slider shows at the step's round (the same code path), not the finished run's; the counters count
    the rounds up to it."""
    from app.panels.round_view.callbacks import show_round
    from app.panels.round_view.views import VIEW_OUTPUTS
    if which == "tiny":
        request.getfixturevalue("traces")
    elif isinstance(tour.shipped(), str):
        pytest.skip("no shipped traces: python -m app.panels.tour --record")
    data = tour.shipped()
    steps = tour_steps(data.d2f, data.lopa, data.names)
    session, state = Session(), tour.new_tour_state()
    shown = 0
    for i, step in enumerate(steps):
        out = dict(zip(tour.TOUR_OUTPUTS, tour.show_step(session, state, i)))
        state = out["tour_state"]
        if step.run is None:
            continue
        shown += 1
        slider = dict(zip(VIEW_OUTPUTS + ("answer",), show_round(session, step.round)))
        for name in ("canvas", "branches", "explanation", "answer"):
            assert out[name] == slider[name], (i, name)
        if step.round < session.n_rounds - 1:
            assert out["answer"] != session.run.text or "▢" not in out["canvas"]     # not the finished answer
            assert f'data-rounds="{step.round + 1}"' in out["counters"]
            assert f"at round {step.round} of {session.n_rounds - 1}" in out["counters"]
    assert shown == sum(s.run is not None for s in steps) >= 4
