"""Examples that tell the truth: a known answer gets ✓ or ✗ with the reference; other prompts get nothing."""

import json

from app.serving import examples
from visualizations.answer_mark import answer_mark

LEO = "Leo has 7 stickers. He buys 2 more. How many stickers does Leo have now?"


def test_check_answer_right_wrong_and_unknown(monkeypatch, tmp_path):
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text(json.dumps({"question": LEO, "answer": "Leo now has <<7+2=9>>9 stickers.\n#### 9"}) + "\n")
    monkeypatch.setattr(examples, "HELDOUT", heldout)
    monkeypatch.setattr(examples, "ORDER_SENSITIVE", tmp_path / "none.jsonl")
    monkeypatch.setattr(examples, "GSM8K_TEST", tmp_path / "none.jsonl")
    examples._references.cache_clear()
    try:
        assert examples.check_answer(LEO, "Leo now has <<7+2=9>>9 stickers.\n#### 9") == (True, "9")
        assert examples.check_answer("  " + LEO.replace(" He", "\nHe"), "#### 10") == (False, "9")  # spacing ignored
        assert examples.check_answer(LEO, "no answer line") == (False, "9")
        assert examples.check_answer("What is 2 + 2?", "#### 4") is None   # nothing known: nothing claimed
    finally:
        examples._references.cache_clear()


def test_answer_mark_html():
    right, wrong = answer_mark((True, "9")), answer_mark((False, "9"))
    assert "✓" in right and 'data-correct="true"' in right and "reference answer is 9" in right
    assert "✗" in wrong and 'data-correct="false"' in wrong and "✓" not in wrong
    assert answer_mark(None) == ""
    assert "<b>" not in answer_mark((False, "<b>9</b>")) and "&lt;b&gt;" in answer_mark((False, "<b>9</b>"))


def test_bundled_examples_have_references_and_gsm8k_is_apart_for_a_real_checkpoint():
    groups = examples.example_groups()
    assert len(groups) == 1 and "synthetic" in groups[0][0]                 # the default list: what the models answer
    label, gsm8k = examples.checkpoint_examples()
    assert "not trained on" in label and "real D2F checkpoint" in label and "nonsense" not in label
    assert not set(gsm8k) & set(groups[0][1])
    for prompts in (groups[0][1], gsm8k):
        assert prompts and all(examples.reference_answer(p) is not None for p in prompts)


def test_finished_run_in_the_app_is_marked(monkeypatch):
    from app.panels.round_view import views
    from app.serving.session import Session
    from lopa import RunResult

    run = RunResult(prompt=LEO, prompt_ids=[1], settings={}, spec={}, records=[], tokens=[])
    run.text = "Leo now has <<7+2=9>>9 stickers.\n#### 9"
    session = Session()
    session.run = run
    monkeypatch.setattr(examples, "reference_answer", lambda p: "9" if p == LEO else None)
    monkeypatch.setattr(Session, "status", lambda self: "done")
    assert 'data-correct="true"' in views.live_outputs(session, "Done")[1]
    run.text = "#### 8"
    assert 'data-correct="false"' in views.live_outputs(session, "Done")[1]
    run.prompt = "something else"
    assert "lopa-answer-mark" not in views.live_outputs(session, "Done")[1]
    monkeypatch.setattr(Session, "status", lambda self: "running")
    run.prompt, run.text = LEO, "#### 9"
    assert "lopa-answer-mark" not in views.live_outputs(session, "Running")[1]   # only once the run ends


def test_comparison_marks_both_sides_once_done(monkeypatch, tmp_path):
    from tiny import save_tiny_model_dir

    from app.panels.compare import COMPARE_OUTPUTS, compare_stream
    from app.serving.model_cache import MODELS
    from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session

    settings = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=16,
                    confidence="max_prob", attention="block_causal", temperature=0.0, seed=0)
    saved = MODELS.default
    MODELS.default = save_tiny_model_dir(tmp_path / "tiny-dllm")
    try:
        monkeypatch.setattr(examples, "reference_answer", lambda p: "9" if p == LEO else None)
        outs = [dict(zip(COMPARE_OUTPUTS, o)) for o in
                compare_stream(Session(), LEO, "D2F vanilla (k = 0)", *[settings[n] for n in SETTING_NAMES])]
        assert all("lopa-answer-mark" not in o["base_counters"] for o in outs[:-1] if isinstance(o["base_counters"], str)
                   and 'data-status="running"' in o["base_counters"])
        for side in ("base_counters", "lopa_counters"):     # a random model: wrong, with the reference shown
            assert 'data-correct="false"' in outs[-1][side] and "reference answer is 9" in outs[-1][side]
        other = list(compare_stream(Session(), "Tom has 3 apples.", "D2F vanilla (k = 0)",
                                    *[settings[n] for n in SETTING_NAMES]))[-1]
        assert all("lopa-answer-mark" not in str(v) for v in other)
    finally:
        MODELS.default = saved


def test_picked_examples_must_be_sound_in_every_line():
    """scripts/pick_examples.py keeps a problem only where both answers are right in every line: a right
    final number over a wrong calculation, a mis-shown result or a spliced line does not qualify."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from pick_examples import sound

    good = " Mia keeps <<4/2=2>>2 cards.\nMia now has <<2+4=6>>6 cards.\nMia keeps <<6/2=3>>3 cards.\n#### 3"
    assert sound(good, "adverbs")
    assert not sound(good.replace("<<6/2=3>>3", "<<6/2=4>>4"), "adverbs")           # wrong calculation
    assert not sound(good.replace("<<2+4=6>>6", "<<2+4=6>>5"), "adverbs")           # result shown wrong
    assert not sound(good.replace("Mia now has", "Mia has has"), "adverbs")          # spliced line
    assert not sound(good.replace("6 cards.", "6 cards cards."), "adverbs")
    assert not sound(good.replace("<<4/2=2>>2", "<<5/2=2>>2"), "adverbs")            # not a whole division
