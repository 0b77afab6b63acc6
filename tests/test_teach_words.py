"""Issue 58's points about what the explorer says (the words; the layout is tests/test_layout_browser.py's), as plain
functions: Compare says which side needed fewer forwards, token-forwards and seconds and what that means on the
device; the arrival names the other decoders; the glossary has chain and lookahead depth; the depth study is in
the studies menu and the live cost table keeps k apart; the counters' gloss shows once after a Compare; every
default example is one the bundled model answers; a paused run is listed as paused; the round's kind in words."""

import re

import pytest
from tiny import LIVELY, PROMPT, app_model, tiny_qwen2, tiny_spec, tiny_tokenizer

from app.panels import compare
from app.panels.round_view import callbacks as cb
from app.panels.round_view import views
from app.panels.studies import callbacks as studies
from app.panels.tour import callbacks as tour
from app.serving.examples import check_answer, checkpoint_examples, example_groups
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session
from lopa import Decoder, DecodeSettings, decoder_settings
from visualizations import comparison_summary, glossary_html, token_canvas
from visualizations.compare import expectation
from visualizations.glossary import PEER_RULES, rule_name

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def pair():
    runs = [Decoder(tiny_qwen2(seed=1), tiny_spec(), DecodeSettings(k=k, **LIVELY), tiny_tokenizer()).run(PROMPT)
            for k in (0, 4)]
    return runs[0], runs[1]


def test_compare_says_which_side_needed_fewer_forwards_token_forwards_and_seconds(pair):
    d2f, lopa = pair
    summary = comparison_summary(d2f, lopa, "D2F", "LoPA")
    ma, mb = d2f.metrics(), lopa.metrics()
    for what, key in (("forwards", "forwards"), ("token-forwards", "token_forwards")):
        few, many = sorted((ma[key], mb[key]))
        side = "LoPA" if mb[key] < ma[key] else "D2F"
        assert (f"{side} needed fewer {what} ({few} against {many})" in summary if few != many
                else f"as many {what}" in summary), what
    assert "needed fewer seconds" in summary or "as many seconds" in summary
    assert "On a CPU (these runs' device) every token-forward is paid for" in summary       # the traces say cpu
    assert "design note, last section" not in summary


def test_the_expectation_reads_the_numbers_and_the_device():
    a = {"forwards": 20, "token_forwards": 600, "latency_s": 0.5, "device": ""}
    b = {"forwards": 12, "token_forwards": 1800, "latency_s": 0.7, "device": ""}
    text = expectation(a, b, "D2F", "LoPA")
    assert text.startswith("LoPA needed fewer forwards (12 against 20), D2F needed fewer token-forwards (600 against "
                           "1800), and D2F needed fewer seconds (0.50 s against 0.70 s).")
    assert "Here the seconds went with the token-forwards, not the forwards." in text
    assert "Neither trace says which device" in text
    gpu = expectation(a, {**b, "latency_s": 0.3, "device": "cuda:0 (NVIDIA H200)"}, "D2F", "LoPA")
    assert "went with the forwards" in gpu and "On cuda:0 (NVIDIA H200), a GPU" in gpu
    same = expectation(a, dict(a), "A", "B")
    assert "Both needed as many forwards (20)" in same and "went with" not in same


def test_the_counters_gloss_shows_once_after_a_compare(pair):
    d2f, lopa = pair
    out = dict(zip(compare.COMPARE_OUTPUTS, compare.compare_outputs("done", d2f, lopa, "D2F", "LoPA")))
    assert "lopa-counters-gloss" not in out["base_counters"] + out["lopa_counters"]
    assert out["base_counters"].count('data-counter="forwards"') == 1          # the numbers stay
    session = Session()
    session.run = lopa
    assert views.counters_now(session).count("lopa-counters-gloss") == 1      # the round view's counters keep it


def test_the_arrival_names_the_other_decoders():
    html = tour.arrival()
    if "lopa-empty" in html:
        pytest.skip("no shipped traces: python -m app.panels.tour --record")
    assert "D2F and LoPA are two decoders of several" in html and "single-block D2F" in html
    for rule in PEER_RULES:
        assert f'href="#term-rule-{rule}"' in html and rule_name(rule).split()[0] in html


def test_the_glossary_has_chain_and_lookahead_depth():
    html = glossary_html()
    chain = re.search(r'<dt id="term-chain">chain</dt><dd>([^<]*)</dd>', html).group(1)
    depth = re.search(r'<dt id="term-lookahead-depth">lookahead depth</dt><dd>([^<]*)</dd>', html).group(1)
    assert "cut" in chain and "one row per chain" in chain and "lookahead_depth" in depth


def test_the_depth_study_is_in_the_menu_and_the_live_table_keeps_k_apart():
    assert "depth" in dict((name, title) for title, name in studies.study_choices())
    rows = [{"problem": p, "rule": "threshold", "k": k, "tokens": 10, "forwards": 5 if k else 10,
             "token_forwards": 100, "latency_s": 1.0} for p in (0, 1) for k in (0, 4)]
    table = studies.cost_table(rows)
    assert 'data-decoder="threshold, k = 0"' in table and 'data-decoder="threshold, k = 4"' in table
    assert 'data-decoder="threshold"' not in table
    one_k = studies.cost_table([r for r in rows if r["k"] == 4])
    assert 'data-decoder="threshold"' in one_k                                  # one k: nothing to tell apart


def test_every_default_example_is_answered_by_the_bundled_model():
    """A newcomer's first pick succeeds: each default example, decoded as the app decodes it (LoPA at the app's
    defaults, and D2F), gets its reference answer; the GSM8K ones are apart, for a real checkpoint."""
    from lopa.models import load
    loaded = load()
    settings = DecodeSettings(**APP_DEFAULTS)
    (label, prompts), = example_groups()
    assert prompts and not set(prompts) & set(checkpoint_examples()[1])
    for prompt in prompts:
        assert check_answer(prompt, loaded.decoder(settings).run(prompt).text) == (True, check_answer(prompt, "")[1])
    first = prompts[0]
    assert check_answer(first, loaded.decoder(decoder_settings("d2f", settings)).run(first).text)[0]


@pytest.fixture
def tiny_app(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def test_a_paused_run_is_listed_as_paused_and_the_round_s_kind_is_in_words(tiny_app, every_round):
    given = dict(APP_DEFAULTS, k=2, **LIVELY)
    session = Session()
    out = dict(zip(views.LIVE_OUTPUTS, cb.step_once(session, PROMPT, *[given[n] for n in SETTING_NAMES])))
    assert "Paused after round 0 (the prompt's forward: nothing committed yet)." in out["status"]
    out = dict(zip(views.LIVE_OUTPUTS, cb.step_once(session, PROMPT, *[given[n] for n in SETTING_NAMES])))
    assert "Paused after round 1. Step" in out["status"] and "(round)" not in out["status"]
    (line, _), = session.run_choices()
    assert line.endswith(" · paused") and "stopped" not in line
    canvas = token_canvas(session.run, 1)
    assert "Round 1 — " in canvas and "(round)" not in canvas
    assert "Round 0 (the prompt&#x27;s forward" in token_canvas(session.run, 0)
    cb.stop_run(session)
    (line, _), = session.run_choices()
    assert line.endswith(" · stopped")                                          # stopped by Stop: it says so
