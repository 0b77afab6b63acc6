"""The branch-parallel backend in the app, and the rank lanes figure, on a tiny random model."""

import os
import signal
import time

import gradio as gr
import plotly.graph_objects as go
import pytest
from tiny import app_model

from app.panels.compare import COMPARE_OUTPUTS, compare_stream
from app.panels.round_view import callbacks as cb
from app.panels.round_view import views
from app.serving.model_cache import MODELS
from app.serving.request import read_request
from app.serving.session import (
    APP_DEFAULTS,
    BRANCH_PARALLEL,
    SETTING_NAMES,
    SINGLE,
    Backend,
    Session,
    backend_from_ui,
)
from lopa import DecodeSettings
from lopa.distributed.group import BPGroup
from visualizations.ranks import lane_segments, rank_lanes

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"),   # gr.Warning outside a request
              pytest.mark.distributed, pytest.mark.timeout(300)]

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = dict(APP_DEFAULTS, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32, confidence="max_prob",
                attention="block_causal", temperature=0.0, seed=0)
DECODE = DecodeSettings(**{n: SETTINGS[n] for n in ("k", "tau_conf", "tau_add", "tau_act", "block_size",
                                                     "max_new_tokens", "confidence")})


def values(backend=SINGLE, workers=2):
    return [SETTINGS[n] for n in SETTING_NAMES] + [backend, workers]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    with app_model(tmp_path_factory) as path:
        yield path
        MODELS.close_bp()


@pytest.fixture(scope="module")
def bp_run(tiny_model_dir):
    group = BPGroup.start(tiny_model_dir, workers=2, timeout_s=60)
    try:
        yield group.decoder(DECODE).run(PROMPT)
    finally:
        group.close()


@pytest.fixture(scope="module")
def single_run(tiny_model_dir):
    return MODELS.get().decoder(DECODE).run(PROMPT)


def _lane_names(fig):
    return {y for trace in fig.data for y in trace.y}


def test_rank_lanes_of_a_branch_parallel_round(bp_run):
    r = next(i for i, rec in enumerate(bp_run.records) if len(set(rec.branch_rank)) > 1)
    record = bp_run.records[r]
    fig = rank_lanes(bp_run, r)
    assert isinstance(fig, go.Figure)
    winner_rank = record.branch_rank[record.winner]
    assert _lane_names(fig) >= {"rank 0" + (" ★ winner" if winner_rank == 0 else ""),
                                "rank 1" + (" ★ winner" if winner_rank == 1 else "")}
    names = {t.name for t in fig.data}
    assert {"forward of its branches", "gather summaries", "commit (cache the winner)"} <= names
    labels = " ".join(a.text for a in fig.layout.annotations)
    assert "B0 anchor" in labels and f"★B{record.winner}" in labels.replace("★B0 anchor", "★B0")
    assert "single process" not in fig.layout.title.text and "2 ranks" in fig.layout.title.text
    segments, parallel = lane_segments(record)
    assert parallel and {s["rank"] for s in segments} == {0, 1}
    forward = {s["rank"]: s["length"] for s in segments if s["phase"] == "forward"}
    assert forward == pytest.approx({q: 1e3 * f for q, f in enumerate(record.extra["rank_forward_s"])})


def test_rank_lanes_mark_the_commit_broadcast_with_its_bytes(bp_run):
    for i in range(len(bp_run.records)):
        assert isinstance(rank_lanes(bp_run, i), go.Figure)
    broadcasts = [i for i, rec in enumerate(bp_run.records) if rec.extra.get("commit_broadcast")]
    quiet = [i for i, rec in enumerate(bp_run.records) if "rank_forward_s" in rec.extra
             and not rec.extra.get("commit_broadcast")]
    for i in broadcasts:
        names = [t.name for t in rank_lanes(bp_run, i).data]
        assert any(n.startswith("winner's cache broadcast (") for n in names)
    for i in quiet[:1]:
        assert not any("broadcast" in t.name for t in rank_lanes(bp_run, i).data)
    assert broadcasts and quiet          # this prompt on the tiny model broadcasts once (round 12)


def test_rank_lanes_of_a_single_process_round(single_run):
    fig = rank_lanes(single_run, 1)
    assert "single process" in fig.layout.title.text
    assert _lane_names(fig) == {"rank 0 ★ winner"}
    assert fig.data[0].x[0] == pytest.approx(1e3 * single_run.records[1].forward_seconds)
    empty = rank_lanes(single_run.__class__(prompt="", prompt_ids=[], settings={}, spec={}, records=[], tokens=[]))
    assert "once a round is recorded" in empty.layout.annotations[0].text


def test_backend_values_are_parsed_with_clear_messages():
    assert read_request(values()[:len(SETTING_NAMES)]).backend == Backend()          # backend inputs are optional
    assert backend_from_ui(BRANCH_PARALLEL, 3.0) == Backend(BRANCH_PARALLEL, 3)
    for bad in (1, 5, 2.5, None):
        with pytest.raises(ValueError, match="workers"):
            backend_from_ui(BRANCH_PARALLEL, bad)


def test_run_callback_on_the_branch_parallel_backend(tiny_model_dir):
    session = Session()
    outs = [dict(zip(views.LIVE_OUTPUTS, o)) for o in cb.run_stream(session, PROMPT, *values(BRANCH_PARALLEL, 2))]
    last = outs[-1]
    assert last["status"].startswith("Done"), last["status"]
    ranks = {q for rec in session.run.records for q in rec.branch_rank}
    assert ranks == {0, 1}
    assert isinstance(last["ranks"], go.Figure) and "2 ranks" in last["ranks"].layout.title.text
    assert MODELS.bp is not None and MODELS.bp.world == 2
    group = MODELS.bp
    # Step on the same group continues; a different worker count restarts it.
    step = dict(zip(views.LIVE_OUTPUTS, cb.step_once(session, PROMPT, *values(BRANCH_PARALLEL, 3))))
    assert step["status"].startswith("Paused"), step["status"]
    assert MODELS.bp is not group and MODELS.bp.world == 3
    assert {q for rec in session.run.records for q in rec.branch_rank} <= {0, 1, 2}


def test_a_bad_worker_count_is_a_message(tiny_model_dir):
    out = dict(zip(views.LIVE_OUTPUTS, cb.step_once(Session(), PROMPT, *values(BRANCH_PARALLEL, 9))))
    assert out["status"].startswith("**⚠ Error:**") and "workers" in out["status"]
    outs = list(compare_stream(Session(), PROMPT, "D2F vanilla (k = 0)", *values(BRANCH_PARALLEL, 1)))
    assert outs[-1][0].startswith("**⚠ Error:**") and "workers" in outs[-1][0]
    assert all(o == gr.skip() for o in outs[-1][1:len(COMPARE_OUTPUTS)])


def test_a_fault_becomes_a_message_and_the_next_run_restarts(tiny_model_dir):
    session = Session()
    cb.step_once(session, PROMPT, *values(BRANCH_PARALLEL, 2))
    group = MODELS.bp
    old = dict(group.pids)
    os.kill(group.pids[1], signal.SIGKILL)              # a rank dies mid-decode
    out = dict(zip(views.LIVE_OUTPUTS, cb.step_once(session, PROMPT, *values(BRANCH_PARALLEL, 2))))
    assert out["status"].startswith("**⚠ Error:** the branch-parallel backend failed"), out["status"]
    deadline = time.monotonic() + 120                   # a hang guard: the ranks go away, however busy the machine
    while any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
              for pid in old.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in old.values()
                if os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"]
    outs = [dict(zip(views.LIVE_OUTPUTS, o)) for o in cb.run_stream(session, PROMPT, *values(BRANCH_PARALLEL, 2))]
    assert outs[-1]["status"].startswith("Done"), outs[-1]["status"]


def test_compare_runs_the_lopa_side_on_the_branch_parallel_backend(tiny_model_dir):
    session = Session()
    outs = list(compare_stream(session, PROMPT, "D2F vanilla (k = 0)", *values(BRANCH_PARALLEL, 2)))
    assert outs[-1][0].startswith("Done"), outs[-1][0]
    base, lopa = session.compare
    assert {q for rec in lopa.records for q in rec.branch_rank} == {0, 1}
    assert {q for rec in base.records for q in rec.branch_rank} == {0}


def test_the_group_follows_the_model_of_the_job(tiny_model_dir, tmp_path):
    from tiny import save_tiny_model_dir

    from app.serving.model_cache import ModelCache
    from lopa.models import load
    other = save_tiny_model_dir(tmp_path / "tiny-other", seed=1)
    session = Session(model=str(other))                 # this session's own model, not the default
    last = dict(zip(views.LIVE_OUTPUTS, list(cb.run_stream(session, PROMPT, *values(BRANCH_PARALLEL, 2)))[-1]))
    assert last["status"].startswith("Done"), last["status"]
    assert MODELS.bp.model_dir == ModelCache.key(other) and session.run.spec["name"] == "tiny-other"
    alone = load(other).decoder(DecodeSettings.from_dict(session.run.settings)).run(PROMPT)
    assert session.run.tokens == alone.tokens
