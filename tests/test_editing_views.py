"""Token editing in the explorer: edited cells on the canvas, the round's explanation naming each edit, the glossary."""

import re

import torch
from fake_model import MASK
from test_editing import FLIP, ONE_EDIT, decode

from visualizations.branches import explain_round
from visualizations.canvas import canvas_text, token_canvas
from visualizations.glossary import glossary_html

NAMES = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 1: "<eos>", MASK: "<mask>"}


def edited_run():
    torch.set_num_threads(1)
    return decode(ONE_EDIT, edit_threshold=0.9, edit_post_steps=3)


def test_the_canvas_marks_an_edit_with_its_old_and_new_token_and_its_round():
    run = edited_run()
    r = next(i for i, rec in enumerate(run.records) if rec.edit_positions)
    html = token_canvas(run, r, NAMES)
    cell = html.split('data-position="1"')[1].split("</div>")[0]
    assert 'data-state="edited"' in cell and ">six<" in cell
    assert "edited by this round: &#x27;five&#x27; (id 5) → &#x27;six&#x27; (id 6) (max prob 0.970)" in cell
    assert 'data-swatch="edited"' in html                                        # the legend names the state
    before = token_canvas(run, r - 1, NAMES).split('data-position="1"')[1].split("</div>")[0]
    assert 'data-state="edited"' not in before and before.endswith(">five")      # not yet edited
    assert canvas_text(run, r - 1, NAMES).startswith("fourfive")


def test_a_cell_edited_earlier_keeps_an_underline_and_a_run_without_editing_shows_no_edited_swatch():
    run = decode(FLIP, edit_threshold=0.9, edit_post_steps=2)
    edited = [i for i, rec in enumerate(run.records) if rec.edit_positions]
    assert len(edited) == 2
    first = token_canvas(run, edited[0], NAMES).split('data-position="1"')[1].split("</div>")[0]
    assert 'data-state="edited"' in first and "lopa-rewritten" not in first
    assert canvas_text(run, edited[0], NAMES).startswith("foursix")          # the answer as the canvas holds it
    # an edit inside the decode (block 1 still filling): the edited cell keeps an underline in later rounds
    slow = decode({**ONE_EDIT, 4: (9, 0.5), 5: (9, 0.5), 6: (9, 0.5), 7: (1, 0.5)}, edit_threshold=0.9)
    r = next(i for i, rec in enumerate(slow.records) if rec.edit_positions)
    assert slow.records[r].kind == "round" and r + 1 < len(slow.records)
    later = re.search(r'<div class="([^"]*)" data-position="1" ([^>]*)>', token_canvas(slow, r + 1, NAMES))
    assert "lopa-rewritten" in later[1] and 'data-state="cached"' in later[2] and f"edited in round {r}" in later[2]
    assert "*Edits:*" in explain_round(slow, r, NAMES) and "*Anchor:*" in explain_round(slow, r, NAMES)
    plain = token_canvas(decode(FLIP), 1, NAMES)
    assert 'data-swatch="edited"' not in plain and 'data-state="edited"' not in plain


def test_the_explanation_names_each_edit_and_its_probability_and_why_editing_stopped():
    run = edited_run()
    r = next(i for i, rec in enumerate(run.records) if rec.edit_positions)
    text = explain_round(run, r, NAMES)
    assert "*Edits:*" in text and "position 1: <code>five</code> → <code>six</code> (0.97)" in text
    assert "editing threshold 0.9" in text
    assert run.records[r].kind == "post" and "post-edit round" in text
    assert "Editing stopped: the last forward proposes no edit." in explain_round(run, len(run.records) - 1, NAMES)
    assert "*Edits:*" not in explain_round(decode(ONE_EDIT), 2, NAMES)


def test_the_glossary_explains_token_editing():
    html = glossary_html()
    assert 'id="term-token-editing"' in html and 'id="term-post-round"' in html


def test_compare_takes_editing_off_as_a_baseline():
    from types import SimpleNamespace

    from app.panels.compare import baseline_settings, lopa_title
    from lopa import DecodeSettings
    on = DecodeSettings(k=2, edit_threshold=0.5, edit_post_steps=4)
    off = baseline_settings("LoPA without token editing (same k)", on)
    assert off == on.replace(edit_threshold=1.0)
    backend = SimpleNamespace(parallel=False)
    assert lopa_title(on, backend) == "LoPA (k = 2, editing above 0.5)" and lopa_title(off, backend) == "LoPA (k = 2)"


def test_the_tour_has_a_step_on_editing_when_the_lopa_run_edits():
    from app.panels.tour.steps import tour_steps
    plain = decode(ONE_EDIT, k=2)
    edited = decode({**ONE_EDIT, 4: (9, 0.5), 5: (9, 0.5), 6: (9, 0.5), 7: (1, 0.5)}, k=2, edit_threshold=0.9)
    assert [s.key for s in tour_steps(plain, plain, NAMES)] == ["fill", "anchor", "branches", "winner", "order", "try"]
    steps = tour_steps(plain, edited, NAMES)
    assert [s.key for s in steps][-2:] == ["edit", "try"]
    step = steps[-2]
    first = next(r for r in edited.records if r.edit_positions)
    assert (step.run, step.round) == ("lopa", first.round)
    assert (step.facts["position"], step.facts["old"], step.facts["new"]) == (1, 5, 6)
    assert "<code>five</code>" in step.text and "<code>six</code>" in step.text and "max prob 0.97" in step.text
    assert f"{step.facts['edits']} edit(s)" in step.text


def test_the_settings_panel_shows_an_editing_model_s_own_values():
    """A model that asks for token editing (a LLaDA2.1 folder: spec.decode) shows its values in the settings inputs
    until the visitor touches them, as Run resolves them."""
    from app.serving.request import follow_model, shown_settings
    from app.serving.session import APP_DEFAULTS, SETTING_NAMES
    from lopa import ModelSpec
    spec = ModelSpec(mask_token_id=0, eos_token_ids=(1,), logit_shift=False, decode={"edit_threshold": 0.5,
                                                                                    "edit_post_steps": 4})
    shown = shown_settings(spec)
    assert (shown.edit_threshold, shown.edit_post_steps) == (0.5, 4)
    assert {"edit_threshold", "edit_post_steps"} <= set(SETTING_NAMES)
    values = [APP_DEFAULTS[n] for n in SETTING_NAMES]
    follow = dict(zip(SETTING_NAMES, follow_model(spec, (), *values)))
    assert (follow["edit_threshold"], follow["edit_post_steps"]) == (0.5, 4)
    kept = dict(zip(SETTING_NAMES, follow_model(spec, {"edit_threshold"}, *values)))
    assert kept["edit_threshold"] == APP_DEFAULTS["edit_threshold"] == 1.0          # the visitor's own stays
