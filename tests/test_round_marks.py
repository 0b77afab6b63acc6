"""Post-edit rounds on the round slider: the strip under it (visualizations/round_marks.py) marks where a run's
token editing sits, and the round view shows it with the round's explanation saying a post-edit round is one."""

import sys
from types import SimpleNamespace

import torch
from test_editing import FLIP, decode
from test_editing_views import NAMES

from visualizations.round_marks import round_marks, spans


def hand_made(kinds: str, edited=()):
    """A trace of one record per letter of `kinds` (p: prefill, r: round, e: post, f: final), with one edit in
    each round of `edited`."""
    kind = {"p": "prefill", "r": "round", "e": "post", "f": "final"}
    return SimpleNamespace(records=[SimpleNamespace(round=i, kind=kind[c], edit_positions=[1] if i in edited else [])
                                    for i, c in enumerate(kinds)])


def test_spans_group_consecutive_rounds():
    assert spans([9, 3, 4, 5, 4]) == [(3, 5), (9, 9)] and spans([]) == []


def test_the_strip_bands_post_edit_rounds_at_their_slider_stops_and_ticks_each_edit():
    html = round_marks(hand_made("prrrree", edited=(3, 5, 6)))        # 7 rounds: the slider runs 0..6
    assert 'data-post-rounds="2"' in html and 'data-edit-rounds="3"' in html
    # rounds 5-6 cover 4.5/6 .. 6.5/6 of the slider (between the thumb's centres at its ends), clipped at its end
    assert 'data-rounds="5-6"' in html and "left:calc(8px + (100% - 16px) * 0.7500);width:calc((100% - 16px) * 0.2500)" in html
    assert 'data-round="3"' in html and "left:calc(8px + (100% - 16px) * 0.5000)" in html     # round 3's edit
    assert "rounds 5–6: post-edit (only editing, nothing filled); edits in rounds 3, 5, 6 (ticks)" in html
    one = round_marks(hand_made("prre"))
    assert "round 3: post-edit (only editing, nothing filled)" in one and "edits in" not in one
    assert round_marks(hand_made("prrf")) == "" and round_marks(SimpleNamespace(records=[])) == ""


def test_the_strip_escapes_what_it_writes(monkeypatch):
    monkeypatch.setattr(sys.modules["visualizations.round_marks"], "POST_WORDS", '<b onclick="x">&')
    html = round_marks(hand_made("prree", edited=(3,)))
    assert "<b" not in html and 'onclick="x"' not in html
    assert html.count("&lt;b onclick=&quot;x&quot;&gt;&amp;") == 2            # the band's title and the line


def test_an_engine_run_with_post_rounds_shows_them_on_the_slider_and_in_the_explanation(tmp_path):
    """A decode with edit_post_steps > 0 (the scripted model of test_editing: an edit every round until the
    budget stops it), loaded as a trace the way the page opens one: the round view's strip names its post-edit
    rounds, and the explanation of each says it is one; a round before them does not."""
    from app.panels.round_view.callbacks import show_round
    from app.panels.round_view.views import LIVE_OUTPUTS, VIEW_OUTPUTS
    from app.panels.traces import load_trace
    from app.serving.session import Session
    torch.set_num_threads(1)
    run = decode(FLIP, edit_threshold=0.9, edit_post_steps=2)
    post = [i for i, rec in enumerate(run.records) if rec.kind == "post"]
    assert post, [rec.kind for rec in run.records]
    (a, b), = spans(post)
    words = f"round {a}" if a == b else f"rounds {a}–{b}"
    path = tmp_path / "post.json"
    run.save(path)
    session = Session()
    live = dict(zip(LIVE_OUTPUTS, load_trace(session, str(path))))
    assert f"{words}: post-edit (only editing, nothing filled)" in live["round_marks"]
    shown = dict(zip(VIEW_OUTPUTS + ("answer",), show_round(session, a)))
    assert f"**Round {a} — post-edit round.**" in shown["explanation"]
    assert shown["round_marks"] == live["round_marks"]
    before = dict(zip(VIEW_OUTPUTS + ("answer",), show_round(session, a - 1)))
    assert "post-edit round" not in before["explanation"]
    plain = Session()
    plain.run, plain.names = decode(FLIP), NAMES                   # editing off: nothing under the slider
    assert dict(zip(VIEW_OUTPUTS + ("answer",), show_round(plain, 1)))["round_marks"] == ""
