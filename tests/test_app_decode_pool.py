"""The decode workers (app/serving/decode_pool.py, app/serving/decode_worker.py): a worker decodes what this process decodes,
two workers decode two visitors' jobs at once, Stop leaves the decode paused in its worker and Step goes back
to it, a worker that dies ends its decode with a message and is replaced, and only the jobs they are for go
to them. The served app with workers runs two sessions' Runs at once, each session's model events in turn."""

import os
import signal
import threading
import time

import gradio as gr
import pytest

from app.panels.events import in_turn
from app.serving import boundary, decode_pool
from app.serving import session as session_module
from app.serving.decode_pool import DecodePool, decode_workers
from app.serving.session import APP_DEFAULTS, LiveRun, Session, take_turn
from lopa import DecodeSettings

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::UserWarning")]

PROMPT = "Tom has 3 apples and he buys 4 + 2 apples . how many apples does Tom have ?"
SETTINGS = DecodeSettings(**{**APP_DEFAULTS, "k": 3, "tau_conf": 0.12, "tau_add": 0.3, "tau_act": 0.6, "block_size": 8,
                             "max_new_tokens": 32, "confidence": "max_prob", "attention": "block_causal"})
TIMING = ("forward_seconds", "round_seconds")


@pytest.fixture(scope="module")
def pool(app_model_dir):
    pool = DecodePool(2)
    pool.start(app_model_dir, 1)
    end = time.monotonic() + 300
    while pool.ready() < 2 and time.monotonic() < end:
        time.sleep(0.2)
    assert pool.ready() == 2, "the decode workers did not start"
    yield pool
    pool.close()


def job(app_model_dir, **changes) -> dict:
    return {"model": str(app_model_dir), "prompt": PROMPT, "settings": SETTINGS.to_dict(), "workers": 1, "rounds": None,
            "keep_states": False, "resume": None, **changes}


def decided(chunks) -> list:
    """What the chunks of one job say, timings left out."""
    return [([{k: v for k, v in r.items() if k not in TIMING} for r in c["records"]], c["tokens"], c["finished"])
            for c in chunks]


def wait_ready(pool, n: int, bound_s: float = 300) -> None:
    end = time.monotonic() + bound_s
    while pool.ready() < n and time.monotonic() < end:
        time.sleep(0.2)
    assert pool.ready() == n


def test_a_worker_decodes_what_this_process_decodes(pool, app_model_dir):
    worker = pool.take([job(app_model_dir)])
    assert worker is not None
    there = [c for (c,) in pool.stream(worker, [job(app_model_dir)])]
    here = [c for (c,) in boundary.decode_rounds([job(app_model_dir)])]
    assert there[-1]["finished"] and len(there) > 3
    assert decided(there) == decided(here)
    assert there[-1]["text"] == here[-1]["text"]


def test_two_workers_decode_two_jobs_at_once(pool, app_model_dir):
    first, second = pool.take([job(app_model_dir)]), pool.take([job(app_model_dir)])
    assert first is not None and second is not None and first is not second
    a, b = pool.stream(first, [job(app_model_dir)]), pool.stream(second, [job(app_model_dir)])
    try:
        (a1,), (b1,) = next(a), next(b)          # both under way at once, in two processes
        assert a1["records"] and b1["records"] and not a1["finished"] and not b1["finished"]
        assert pool.take([job(app_model_dir)], bound_s=0.5) is None      # none idle: the caller decodes here
        rest = [c for (c,) in a]
        assert rest[-1]["finished"]
    finally:
        a.close()
        b.close()
    wait_ready(pool, 2, 10)


def test_steps_continue_in_the_worker_that_keeps_their_decode(pool, app_model_dir):
    whole = [c for (c,) in boundary.decode_rounds([job(app_model_dir)])]
    live = LiveRun(job(app_model_dir, rounds=1))
    worker = pool.take([live.job])
    for _ in range(2):                            # Step, Step: one round each, the decode kept paused between
        (chunk,) = [c for (c,) in pool.stream(worker, [live.job])]
        live.apply(chunk)
        run = live.run
        live.job = job(app_model_dir, rounds=1, resume={"kind": "continue", "run_id": run.run_id,
                                                    "trace": boundary.trace_of(run)})
        wait_ready(pool, 2, 10)
        assert pool.take([live.job]) is worker   # its home, though another worker is idle too
    resume = job(app_model_dir, resume=live.job["resume"])
    rest = [c for (c,) in pool.stream(worker, [resume])]
    assert rest[-1]["tokens"] == whole[-1]["tokens"]
    assert [r for c in rest for r in decided([c])[0][0]] == [r for c in whole[2:] for r in decided([c])[0][0]]


def test_a_stopped_run_continues_to_the_same_tokens_in_its_worker_or_another(pool, app_model_dir):
    """Stop while the worker ran ahead: the next Run replays the trace, in its home worker, or in another
    when someone else's job holds that one."""
    whole = [c for (c,) in boundary.decode_rounds([job(app_model_dir)])]
    for elsewhere in (False, True):
        live = LiveRun(job(app_model_dir))
        home = pool.take([live.job])
        passes = pool.stream(home, [live.job])
        for _ in range(2):
            live.apply(next(passes)[0])
        passes.close()
        resume = job(app_model_dir, resume={"kind": "continue", "run_id": live.run.run_id,
                                            "trace": boundary.trace_of(live.run)})
        wait_ready(pool, 2, 10)
        held = pool.take([job(app_model_dir)]) if elsewhere else None
        assert held in (None, home)
        worker = pool.take([resume])
        assert worker is not None and (worker is home) != elsewhere
        try:
            rest = [c for (c,) in pool.stream(worker, [resume])]
        finally:
            if held is not None:
                pool._give_back(held)
        assert rest[-1]["tokens"] == whole[-1]["tokens"]
        assert [r for c in rest for r in decided([c])[0][0]] == [r for c in whole[2:] for r in decided([c])[0][0]]


def test_a_worker_that_dies_ends_its_decode_with_a_message_and_is_replaced(pool, app_model_dir):
    live = LiveRun(job(app_model_dir))
    worker = pool.take([live.job])
    passes = pool.stream(worker, [live.job])
    live.apply(next(passes)[0])
    os.kill(worker.process.pid, signal.SIGKILL)
    replaced = pool.replaced
    # The worker runs up to AHEAD passes ahead of its caller (this decode has 15): the passes it had sent
    # before it died come first, then the message, and the stream ends.
    *sent, chunk = [c for (c,) in passes]
    assert len(sent) <= decode_pool.AHEAD and not any("kind" in c or c["finished"] for c in sent), sent
    for c in sent:
        live.apply(c)
    assert chunk["kind"] == "worker" and "the decode worker stopped" in chunk["error"]
    with pytest.raises(ValueError, match="press Run again"):       # the page shows it as a message
        live.apply(chunk)
    assert pool.replaced == replaced + 1
    wait_ready(pool, 2)                           # its replacement started
    assert worker.process.pid not in pool.pids()
    again = pool.take([job(app_model_dir)])
    assert [c for (c,) in pool.stream(again, [job(app_model_dir)])][-1]["finished"]


def test_a_worker_that_died_idle_is_replaced_not_handed_out(pool, app_model_dir):
    wait_ready(pool, 2, 10)
    idle = pool._free[0]
    os.kill(idle.process.pid, signal.SIGKILL)
    idle.process.wait(10)
    worker = pool.take([job(app_model_dir)])
    assert worker is not None and worker is not idle
    try:
        assert [c for (c,) in pool.stream(worker, [job(app_model_dir)])][-1]["finished"]
    finally:
        wait_ready(pool, 2)                       # its replacement started


def test_a_closed_pages_runs_leave_the_workers(pool, app_model_dir, monkeypatch):
    monkeypatch.setattr(boundary, "POOL", pool)
    live = LiveRun(job(app_model_dir))
    worker = pool.take([live.job])
    passes = pool.stream(worker, [live.job])
    live.apply(next(passes)[0])
    passes.close()
    run_id = live.run.run_id
    assert pool._homes.get(run_id) is worker
    boundary.forget_runs({run_id})                # what a closed page's end_session calls
    assert run_id not in pool._homes


def test_only_small_single_process_jobs_go_to_the_workers(pool, app_model_dir, monkeypatch):
    assert pool.serves([job(app_model_dir)])
    assert not pool.serves([job(app_model_dir, workers=2)])        # the branch-parallel backend has its own ranks
    assert not pool.serves([job(app_model_dir), job(app_model_dir, workers=3)])
    monkeypatch.setattr(decode_pool, "POOL_MAX_PARAMS", 10)    # a model whose copy per worker would cost too much
    assert not pool.serves([job(app_model_dir)]) and pool.take([job(app_model_dir)]) is None
    assert not DecodePool(0).serves([job(app_model_dir)])          # none started


def test_the_worker_count_is_read_from_its_variable(monkeypatch):
    monkeypatch.setenv("LOPA_DECODE_WORKERS", "3")
    assert decode_workers() == 3
    for bad in ("-1", "two", "99"):
        monkeypatch.setenv("LOPA_DECODE_WORKERS", bad)
        with pytest.raises(SystemExit, match="LOPA_DECODE_WORKERS must be a whole number"):
            decode_workers()
    monkeypatch.delenv("LOPA_DECODE_WORKERS")
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert decode_workers() == 0                 # a laptop serving its own page: one process
    monkeypatch.setenv("SPACE_ID", "someone/lopa-explorer")
    cores = len(os.sched_getaffinity(0))
    assert decode_workers() == (min(cores, 4) if cores >= 2 else 0)      # a CPU Space: a worker per core


def test_a_sessions_model_events_take_turns_and_other_sessions_do_not_wait(monkeypatch):
    monkeypatch.setattr(session_module, "TURN_WAIT_S", 0.3)
    one, other = Session(), Session()
    entered, release = threading.Event(), threading.Event()

    def stream(session):
        entered.set()
        release.wait(30)
        yield "done"

    runner = threading.Thread(target=lambda: list(in_turn(stream, 0)(one)))
    runner.start()
    assert entered.wait(30)
    with pytest.raises(gr.Error, match="previous action on the model is still running"):
        in_turn(lambda session: "a pick", 0)(one)     # the same session waits for its stream, here in vain
    assert in_turn(lambda session: "a pick", 0)(other) == "a pick"      # another session does not wait
    release.set()
    runner.join(30)
    assert in_turn(lambda session: "a pick", 0)(one) == "a pick"        # its turn, once the stream ended
    assert take_turn("not a session") is None


def test_a_sessions_turns_are_served_in_the_order_asked_and_a_wait_given_up_blocks_no_one():
    turn, order = session_module.Turn(), []
    assert turn.acquire(1)
    waiters = []
    for i in range(4):
        def wait(i=i):
            if turn.acquire(30):
                order.append(i)
                turn.release()
        waiters.append(threading.Thread(target=wait))
        waiters[-1].start()
        while turn._next != i + 2:            # each asks after the one before: tickets 1, 2, 3, 4
            time.sleep(0.01)
    assert not turn.acquire(0.05)             # ticket 5 gives up ...
    turn.release()
    for w in waiters:
        w.join(30)
    assert order == [0, 1, 2, 3]
    assert turn.acquire(1)                    # ... and does not block ticket 6


@pytest.fixture(scope="module")
def served_with_workers(app_model_dir, pool):
    """The app served with the module's two workers and two model slots; every decode a worker runs waits,
    after its first round, until the other visitor's decode has reached its own first round (a barrier:
    with one model slot, or decodes taken in turn, it would wait in vain and the Run would fail)."""
    from servers import free_port

    from app import build_demo
    from app.panels import events
    from app.serving.model_cache import MODELS
    together = threading.Barrier(2, timeout=60)
    real = pool.stream

    def stream(worker, jobs):
        passes = real(worker, jobs)
        try:
            yield next(passes)
            together.wait()
            yield from passes
        finally:
            passes.close()

    saved = (boundary.POOL, dict(events.MODEL), MODELS.default)
    boundary.POOL, MODELS.default = pool, app_model_dir
    pool.stream = stream
    events.MODEL["concurrency_limit"] = 2
    try:
        demo = build_demo()
        port = free_port()
        demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True)
        yield f"http://127.0.0.1:{port}/"
        demo.close()
    finally:
        boundary.POOL, MODELS.default = saved[0], saved[2]
        events.MODEL.clear()
        events.MODEL.update(saved[1])
        del pool.stream


def test_two_visitors_runs_decode_at_once_in_the_served_app(served_with_workers):
    from gradio_client import Client
    from servers import plain
    clients = [Client(served_with_workers, verbose=False) for _ in range(2)]
    jobs = [c.submit(prompt=PROMPT, k=3, tau_conf=0.12, tau_add=0.3, tau_act=0.6, block_size=8, max_new_tokens=32,
                     confidence="max_prob", attention="block_causal", api_name="/run") for c in clients]
    statuses = [plain(job.result(timeout=120))[0] for job in jobs]
    assert all(s.startswith("Done") for s in statuses), statuses
    assert statuses[0] == statuses[1]           # the same decode, the same rounds and tokens
