"""scripts/edit_gain.py: what token editing did to the same problems, from the bench's per-problem rows."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))


def _row(problem, correct, edits=0, post=0, tokens=40, forwards=10):
    return {"problem": problem, "correct": correct, "edits": edits, "post_rounds": post,
            "tokens_useful": tokens, "forwards": forwards, "tokens_paper": tokens, "rounds": forwards,
            "latency_s": 0.1, "token_forwards": forwards * 32}


def test_fixed_broken_and_the_share_edited_are_counted_per_problem():
    from edit_gain import gain

    off = [_row(0, False), _row(1, True), _row(2, True), _row(3, False)]
    on = [_row(0, True, edits=2), _row(1, False, edits=1, post=1, forwards=12), _row(2, True), _row(3, False, edits=1)]
    g = gain(off, on)
    assert (g["fixed"], g["broken"], g["fixed_problems"], g["broken_problems"]) == (1, 1, [0], [1])
    assert g["acc_off"] == g["acc_on"] == 0.5
    assert g["edited_share"] == 0.75 and g["edits_per_answer"] == 1.0 and g["post_rounds_per_answer"] == 0.25
    assert g["tpf_off"] == pytest.approx(160 / 40) and g["tpf_on"] == pytest.approx(160 / 42)


def test_rows_of_other_problems_are_refused():
    from edit_gain import gain

    with pytest.raises(ValueError, match="same problems"):
        gain([_row(0, True)], [_row(1, True)])
