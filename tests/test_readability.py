"""Readable figures and colours, checked without a browser (tests/test_readability_browser.py measures the page):
every text colour the palette picks meets WCAG AA (4.5:1), every figure is tall enough for a phone, and every
title line is short enough for one (plotly never wraps a title)."""

import re

import pytest
from tiny import LIVELY, tiny_qwen2, tiny_spec, tiny_tokenizer

from lopa import Decoder, DecodeSettings
from visualizations import confidence_heatmap, rank_lanes, tfo_map, tokens_per_round_chart
from visualizations.charts import title_lines
from visualizations.palette import (
    OKABE_ITO,
    PRIMARY_BUTTON,
    PRIMARY_BUTTON_HOVER,
    STATUS_COLOURS,
    SUBDUED_TEXT,
    VIRIDIS,
    contrast,
    swatch,
    text_on,
    viridis,
)

AA = 4.5
PHONE_PLOT_PX = 240
TITLE_CHARS, SMALL_CHARS = 42, 62      # what a 13 px title line and its <sup> lines hold in about 300 px
PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"


@pytest.fixture(scope="module")
def run():
    tokenizer = tiny_tokenizer()
    result = Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=3, **LIVELY), tokenizer).run(PROMPT)
    return result, {i: tokenizer.decode([i]) for i in range(len(tokenizer))}


def test_contrast_is_the_wcag_ratio():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#777777") == pytest.approx(1.0)
    assert contrast("#767676", "#ffffff") == pytest.approx(4.54, abs=0.01)       # WCAG's own example grey


def test_text_on_meets_aa_on_every_fill():
    fills = [viridis(i / 200) for i in range(201)] + VIRIDIS + list(OKABE_ITO.values())
    worst = min(contrast(text_on(f), f) for f in fills)
    assert worst >= AA, worst
    assert text_on("#440154") == "#ffffff" and text_on("#fde725") == "#000000"


def test_the_pages_own_colours_carry_white_or_sit_on_white_at_aa():
    for name, colour in STATUS_COLOURS.items():                # badges with white text
        assert contrast(colour, "#ffffff") >= AA, name
    for colour in (PRIMARY_BUTTON, PRIMARY_BUTTON_HOVER, SUBDUED_TEXT):
        assert contrast(colour, "#ffffff") >= AA, colour
    assert "■" not in swatch(OKABE_ITO["orange"])                # a key is a box, not a coloured glyph


def test_tfo_map_numbers_each_meet_aa_on_their_cell(run):
    result, names = run
    fig = tfo_map(result, names)
    heat, numbers = fig.data[0], fig.data[1]
    assert not heat.texttemplate                                # plotly's own pick gave 3.7:1 mid-scale
    top = heat.zmax
    for x, y, text, colour in zip(numbers.x, numbers.y, numbers.text, numbers.textfont.color):
        assert int(text) == heat.z[y][x]
        assert contrast(colour, viridis((int(text) - 1) / (top - 1))) >= AA, (x, y, text)
    assert numbers.textfont.size >= 11


def _titles(fig) -> list[str]:
    return [fig.layout.title.text or ""] + [a.text or "" for a in fig.layout.annotations]


def test_every_figure_is_tall_enough_and_its_title_lines_short_enough_for_a_phone(run):
    result, names = run
    branch_round = next(r for r, rec in enumerate(result.records) if rec.kind == "round" and rec.lookahead_positions)
    figures = [confidence_heatmap(result, branch_round, names), confidence_heatmap(result, len(result.records) - 1, names),
               tfo_map(result, names), tfo_map(result, names, title="Token filling order — " + "a long run title " * 4,
                                                highlight=[0, 1]),
               tokens_per_round_chart(result, current=1), rank_lanes(result, branch_round)]
    for fig in figures:
        assert fig.layout.height >= PHONE_PLOT_PX, _titles(fig)
        for text in _titles(fig):
            small = re.findall(r"<sup>(.*?)</sup>", text, flags=re.S)
            for part, limit in ((re.sub(r"<sup>.*?</sup>", "", text, flags=re.S), TITLE_CHARS),
                                *((s, SMALL_CHARS) for s in small)):
                for line in re.sub(r"<[^>]+>", "\n", part.replace("<br>", "\n")).split("\n"):
                    assert len(line.strip()) <= limit, line
    assert title_lines("a " * 40, 40).count("<br>") >= 1


def test_canvas_and_denoise_cells_never_fade_their_text(run):
    """A cached block's cell and a re-noised draw are muted by a faded fill with text_on it, not by an opacity
    (which fades the text too: black at 0.45 on viridis's middle is 2.6:1)."""
    from visualizations import token_canvas
    from visualizations.canvas import CANVAS_CSS
    from visualizations.denoise import denoise_step_html
    result, names = run
    html = "".join(token_canvas(result, r, names) for r in range(len(result.records)))
    assert "lopa-cached" in html and "opacity" not in html and "opacity" not in CANVAS_CSS
    for background, colour in re.findall(r"background:(#[0-9a-f]{6});color:(#[0-9a-f]{6})", html):
        assert contrast(background, colour) >= AA, (background, colour)
    record = {"accepted": [0], "tokens_in": [5, 6], "sampled": [7, 8], "entropy": [0.1, 0.9], "canvas": 0, "step": 0,
              "temperature": 1.0, "stopped": False}
    assert "opacity" not in denoise_step_html({"records": [record]}, 0, names)
