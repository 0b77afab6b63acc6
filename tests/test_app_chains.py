"""The lookahead depth through the app (tiny random model): its input is read with the rest, a Run at depth 2
records chains and the round views show them, the share link and the command carry it, /decode takes it; the
default (depth 1) runs as LoPA and draws no chain."""

from urllib.parse import parse_qsl

import pytest
from tiny import app_model

from app.panels.round_view import callbacks as cb
from app.panels.settings import share
from app.serving import api
from app.serving.request import read_request
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, Session

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                confidence="max_prob", attention="block_causal", temperature=0.0, seed=0)


@pytest.fixture(scope="module", autouse=True)
def tiny_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def values(**changes):
    return [{**SETTINGS, **changes}[n] for n in SETTING_NAMES]


def run_views(depth: int) -> tuple:
    """A Run through the callbacks at `depth`, then the slider's views of each round with lookahead branches."""
    session = Session()
    outs = list(cb.run_stream(session, PROMPT, *values(lookahead_depth=depth)))
    assert outs[-1][0].startswith("Done")
    run = session.run
    rounds = [r for r, rec in enumerate(run.records) if rec.kind == "round" and rec.lookahead_positions]
    assert rounds
    return run, {r: dict(zip(cb.VIEW_OUTPUTS, cb.show_round(session, r))) for r in rounds}


def test_a_run_at_depth_2_records_chains_and_the_table_and_explanation_show_them():
    run, views = run_views(2)
    assert run.settings["lookahead_depth"] == 2
    for r, shown in views.items():
        rec = run.records[r]
        assert len(rec.chain_positions) == len(rec.lookahead_positions) and all(1 <= n <= 2 for n in rec.chain_kept)
        assert "<th>chain: kept ✓ / cut ✗, and why</th>" in shown["branches"]
        assert shown["branches"].count("<span data-chain=") == len(rec.chain_rows)          # one row per chain
        assert shown["branches"].count('class="lopa-chain-kept"') >= sum(rec.chain_kept)
        if rec.winner:
            assert "*Chain:* " in shown["explanation"]
        if sum(ahead for *_, ahead in rec.filled()) > 1:         # a winning chain kept two tokens: numbered cells
            assert shown["canvas"].count("lopa-chain") == 2
    assert any(sum(ahead for *_, ahead in run.records[r].filled()) > 1 for r in views)


def test_the_default_depth_runs_as_lopa_and_draws_no_chain():
    assert APP_DEFAULTS["lookahead_depth"] == 1
    run, views = run_views(1)
    assert all(not rec.chain_positions for rec in run.records)
    for shown in views.values():
        assert "chain" not in shown["branches"] + shown["canvas"] + shown["explanation"]


def test_the_link_the_command_and_decode_carry_the_depth():
    settings = read_request(values(lookahead_depth=3)).resolve()
    assert settings.lookahead_depth == 3
    query = dict(parse_qsl(share.share_query(PROMPT, settings)[1:]))
    assert query["lookahead_depth"] == "3"
    restored, notes = share.read_link(query, ["", *values()])
    assert restored[1 + SETTING_NAMES.index("lookahead_depth")] == 3 and not notes
    assert "--lookahead-depth 3" in share.command_line(PROMPT, settings)
    assert "lookahead_depth" not in share.share_query(PROMPT, read_request(values()).resolve())
    out = api.decode(PROMPT, "", k=2, lookahead_depth=2, block_size=8, max_new_tokens=16, tau_conf=0.12)
    assert out["settings"]["lookahead_depth"] == 2 and any(r["chain_kept"] for r in out["trace"]["records"])
