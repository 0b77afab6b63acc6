"""Compare a run with the best order found for its prompt (app/panels/best_order.py): the headroom search behind
the GPU boundary, as plain callbacks on a tiny random model; the order found joins the run list as a fork
and is compared with the run; Stop and the time limit keep the order found so far; bad starts say why."""

import pytest
from tiny import app_model

from app.panels import best_order
from app.panels.compare import COMPARE_OUTPUTS
from app.panels.round_view import callbacks as cb
from app.serving.session import APP_DEFAULTS, SETTING_NAMES, SINGLE, Session
from lopa.study.headroom import search
from lopa.trace import RunResult

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.usefixtures("every_round")]

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=1, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                confidence="max_prob", attention="block_causal", temperature=0.0, seed=0, order="confidence",
                order_seed=0, lookahead_min_prob=0.0)


def values(**changes):
    chosen = {**SETTINGS, **changes}
    return [chosen[n] for n in SETTING_NAMES] + [SINGLE, 2]


@pytest.fixture(scope="module", autouse=True)
def tiny_model(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path


def decoded(**changes) -> Session:
    session = Session()
    list(cb.run_stream(session, PROMPT, *values(**changes)))
    assert session.run is not None and not session.run.stopped
    return session


def named(outputs):
    assert len(outputs) == len(best_order.BEST_OUTPUTS)
    return dict(zip(best_order.BEST_OUTPUTS, outputs))


def test_the_best_order_found_joins_the_run_list_and_is_compared_with_the_run():
    session = decoded()
    run = session.run
    outs = [named(o) for o in best_order.compare_with_best(session)]
    assert "<progress" in outs[0]["best_status"] and all("<progress" in o["best_status"] for o in outs[1:-1])
    last = outs[-1]
    # The same search the headroom study runs, from the same run, in this process.
    replayed = RunResult.from_json(run.to_json())
    expected, choices, _ = search(_with_states(replayed))
    assert choices, "the tiny model's run should leave the search something to find"
    found = session.runs["1.1"]
    assert found.parent == "1" and found.run.tokens == expected.tokens
    assert found.run.metrics()["forwards"] == expected.metrics()["forwards"] < run.metrics()["forwards"]
    assert found.run.records[:choices[0]["round"]] == run.records[:choices[0]["round"]]
    assert "Best order found" in last["best_status"] and f"round {choices[0]['round']}**" in last["best_status"]
    assert f"first diverge in round {choices[0]['round']}" in last["compare_summary"]
    assert f'data-first-divergence="{choices[0]["round"]}"' in last["compare_diff"]
    assert (last["compare_a"]["value"], last["compare_b"]["value"]) == ("1", "1.1")
    assert session.current == "1" and session.run is run           # the round view stays on the run
    assert set(COMPARE_OUTPUTS) < set(last)


def _with_states(run):
    """`run` replayed with saved states (as the boundary does), so search() can fork it."""
    from app.serving.model_cache import MODELS
    from lopa.engine import fork_decoder
    decoder = fork_decoder(run, model=MODELS.get())
    for _ in decoder.stream_fork(run, max(r.round for r in run.records if r.kind != "final")):
        pass
    return decoder.result()


def test_stop_and_the_time_limit_keep_the_order_found_so_far(monkeypatch):
    session = decoded()
    gen = best_order.compare_with_best(session)
    while "Searched round 1 " not in named(next(gen))["best_status"]:     # started, rollouts, round 1 searched
        pass
    assert best_order.stop_search(session) == cb.stop_pending() and session.stop_requested
    last = named(list(gen)[-1])
    assert "searched rounds 1 to 1 (stopped" in last["best_status"]
    assert best_order.stop_search(session) == "Nothing is running."
    monkeypatch.setattr(best_order, "SEARCH_SECONDS", 0.0)
    last = named(list(best_order.compare_with_best(decoded()))[-1])
    assert "LoPA's order is the best found" in last["best_status"] and "the 0 s limit" in last["best_status"]
    assert "same decisions in every round" in last["compare_summary"]


def test_stop_reaches_the_search_within_one_decode(monkeypatch):
    """Stop in the middle of a round (after its first rollout, a decode of its own): no rollout starts
    after it, and nothing of the round under way is kept."""
    from lopa.study import headroom
    started = []
    real_rollout = headroom.rollout

    def counted(*args, **kwargs):
        started.append(args[1:3])                           # (round, position) of each decode
        return real_rollout(*args, **kwargs)

    monkeypatch.setattr(headroom, "rollout", counted)
    session = decoded()
    gen = best_order.compare_with_best(session)
    outs = [named(next(gen))]
    while "Searching round 1: rollout 1 of" not in outs[-1]["best_status"]:
        outs.append(named(next(gen)))
    of = int(outs[-1]["best_status"].split(" of ")[-1].rstrip("…"))
    assert of > 1, "the first round should need several rollouts, or Stop after one proves nothing"
    assert len(started) == 1
    best_order.stop_search(session)
    last = named(list(gen)[-1])
    assert len(started) == 1                                 # no decode ran after Stop
    assert last["best_status"] == "Stopped before the first round was searched."
    assert not session.streaming and [run_id for _, run_id in session.runs.choices()] == ["1"]


@pytest.mark.parametrize("changes, message", [({"k": 0}, "k (lookahead branches) 1 or more"),
                                              ({"temperature": 0.5}, "temperature 0")])
def test_the_search_says_why_it_cannot_start(changes, message):
    last = named(list(best_order.compare_with_best(decoded(**changes)))[-1])
    assert message in last["best_status"] and "Error" in last["best_status"]
    last = named(list(best_order.compare_with_best(Session()))[-1])
    assert "run a decode to the end first" in last["best_status"]


def test_while_the_search_runs_its_session_starts_nothing_else_and_keeps_its_stop():
    """The search runs beside the model slot (app/panels/events.py LONG): the session's Run, Step, forks, Compare, run
    choice and model choice are refused meanwhile, and none of them clears the search's Stop or its flags."""
    from app.panels import forks
    from app.panels.compare import compare_stream
    from app.panels.model import pick_model
    session = decoded()
    gen = best_order.compare_with_best(session)
    while "rollout" not in named(next(gen))["best_status"]:
        pass
    assert session.searching and session.streaming
    best_order.stop_search(session)                          # pressed; the search reads it after its rollout
    busy = "best-order search is still running"
    assert busy in list(cb.run_stream(session, PROMPT, *values()))[-1][0]
    assert busy in cb.step_once(session, PROMPT, *values())[0]
    assert busy in list(compare_stream(session, PROMPT, "D2F vanilla (k = 0)", *values()))[-1][0]
    assert busy in cb.select_run(session, "1")[0]
    assert busy in list(forks.hold_back(session, {"run": "1", "round": 0, "position": 20}))[-1][0]
    assert busy in pick_model(session, "sure-gsm-dllm")[1]
    assert session.stop_requested and session.streaming and session.searching
    last = named(list(gen)[-1])
    assert "Stopped" in last["best_status"] or "(stopped" in last["best_status"]
    assert not session.searching and not session.streaming


def test_the_search_does_not_start_while_its_sessions_decode_streams():
    session = decoded()
    session.streaming = True                                 # this session's Run, in the model slot beside it
    last = named(list(best_order.compare_with_best(session))[-1])
    assert "still running" in last["best_status"] and session.streaming and not session.searching


def test_where_the_order_found_parts_names_every_position_of_a_two_token_step():
    from app.panels.best_order import _where
    one = {"round": 3, "saved": 1, "position": 12, "positions": [12], "lopa_position": 9, "lopa_positions": [9],
           "conf_rank": 2, "free": 7, "max_prob": 0.61}
    assert "LoPA added position 9, the best order found filled position 12 (its first ranked 2" in _where(one)
    two = {**one, "positions": [12, 14], "lopa_positions": [9, 10]}          # a depth-2 search (lookahead_depth 2)
    assert "LoPA added positions 9 and 10, the best order found filled positions 12 and 14" in _where(two)
    assert "verified no extra token" in _where({**one, "lopa_position": None, "lopa_positions": []})
