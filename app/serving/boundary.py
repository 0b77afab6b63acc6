"""The GPU boundary: every call that runs the model, as a function of plain values.

On a ZeroGPU Space these functions run in a worker process on a pickled copy of their arguments,
and what they yield or return is pickled back (app/serving/gpu.py); locally they run in this process. Either
way they take JSON-able values (a prompt, a settings dict, the model's folder, a trace as a dict) and
give JSON-able values (trace chunks), and the session is updated outside them (app/serving/session.py). Each
call takes the model its arguments name from the shared cache (app/serving/model_cache.py) and holds it (a lease)
while it runs, so the cache never evicts a model under a decode.

    decode_rounds(jobs)   -> yields, per pass over the jobs, [chunk, ...] (one round of each job)
    top_tokens_at(...)    -> {"top": [[token, p], ...], "names": [[token, text], ...]}
    study_steps(...)      -> yields {"where": ...}, then the study's steps (lopa.study: live)
    best_order_steps(...) -> yields the headroom search's steps from one run (lopa.study.headroom)

A job: {"model": the model's folder, "prompt": str, "settings": DecodeSettings.to_dict(), "workers": 1
(W > 1: the branch-parallel backend), "rounds": None (to the end) or n (Step: 1), "keep_states": bool,
"resume": None | {"kind": "continue", "run_id", "trace"} | {"kind": "fork", "trace", "at_round",
"commit", "hold"}}. A chunk: {"job": i, "records": [RoundRecord dict], "tokens", "text", "finished",
"names": [[id, text], ...], "header": {...} on a job's first chunk}, or {"job": i, "error": message,
"kind": "input" | "fault" | "worker" (app/serving/decode_pool.py: its worker stopped)}. Errors travel as values: ZeroGPU
passes only an exception's class name.

A paused decode is resumed from its trace: the worker replays the recorded decisions (one forward
per recorded round, the engine's fork replay; same tokens) unless this process still holds the
paused generator, in a small LRU cache (always locally; on ZeroGPU when the same worker is reused).
The cache changes only the cost, never the result (tests/test_app_zerogpu.py runs without it).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import lopa.study
from lopa import DecodeSettings, RunResult
from lopa.engine import fork_decoder
from lopa.forward import top_tokens
from lopa.study.common import load_problems
from lopa.trace import RoundRecord

from .decode_pool import POOL, server_threads
from .give_way import TURNS
from .gpu import gpu
from .model_cache import MODELS
from .models import token_names, trace_ids

HEADER = ("prompt", "prompt_ids", "settings", "spec", "run_id", "forked_from")
# Paused decodes (and finished ones with saved states, for forks) this process keeps, all sessions
# together: each holds a prefix cache, so few. LOPA_RESUME_CACHE=0 turns it off (tests).
MAX_KEPT = 4
_kept: OrderedDict = OrderedDict()
_lock = threading.Lock()
# One branch-parallel decode at a time (_take_bp_turn), each waiting at most this long for the one before.
BP_TURN = threading.Semaphore(1)
BP_WAIT_S = 60.0


def trace_of(run: RunResult) -> dict:
    """A run as plain values (the lopa-trace JSON document, not yet a string)."""
    return {**run.header(), "records": [r.to_dict() for r in run.records]}


def run_of(trace: dict) -> RunResult:
    """The RunResult of trace_of(run) (our own output: not validated again)."""
    return RunResult(**{k: trace[k] for k in HEADER}, records=[RoundRecord.from_dict(r) for r in trace["records"]],
                     tokens=list(trace["tokens"]), text=trace.get("text", ""), stopped=bool(trace.get("stopped")))


def _keep(key, value, model: str) -> None:
    """Keep a paused decode or saved states of the model in folder `model` (dropped if that model leaves the cache)."""
    if os.environ.get("LOPA_RESUME_CACHE", "1") == "0":
        _drop(value)
        return
    with _lock:
        _kept[key] = (MODELS.key(model), value)
        _kept.move_to_end(key)
        while len(_kept) > MAX_KEPT:
            _drop(_kept.popitem(last=False)[1][1])


def _take(key):
    with _lock:
        kept = _kept.pop(key, None)
    return kept[1] if kept is not None else None


def _drop(value) -> None:
    if isinstance(value, tuple):
        value[1].close()             # a paused engine generator


def forget_kept() -> None:
    """Drop every kept decode (tests; a model switch), here and in the decode workers."""
    POOL.forget(None)
    with _lock:
        values = [value for _, value in _kept.values()]
        _kept.clear()
    for value in values:
        _drop(value)


def forget_model(key: str) -> None:
    """Drop what is kept of the model cached under `key`, which just left the cache: a paused decode
    would keep its weights alive outside the cache's bound (resuming replays the trace instead)."""
    with _lock:
        gone = [k for k, (model, _) in _kept.items() if model == key]
        values = [_kept.pop(k)[1] for k in gone]
    for value in values:
        _drop(value)


def forget_runs(run_ids) -> None:
    """Drop what is kept of the decodes `run_ids` (a closed page's runs: its paused decode, the states its
    forks would resume from), so that they do not hold MAX_KEPT's places, nor their memory, for others; the
    decode workers drop theirs too."""
    run_ids = set(run_ids) - {""}
    POOL.forget(run_ids)
    with _lock:
        gone = [k for k in _kept if (k[1] if k[0] == "states" else k[0]) in run_ids]
        values = [_kept.pop(k)[1] for k in gone]
    for value in values:
        _drop(value)


MODELS.on_evict.append(forget_model)


class _Job:
    """One job inside decode_rounds: its decoder and engine stream, advanced a round at a time."""

    def __init__(self, index: int, job: dict):
        self.index, self.job, self.left = index, job, job.get("rounds")
        self.first, self.done, self.named = True, False, set()
        workers = int(job.get("workers", 1))
        self.model = job["model"]
        self.bp_turn = workers > 1 and _take_bp_turn()
        try:
            loaded = MODELS.acquire(self.model)   # held until pause(): the cache never evicts a model mid-decode
        except BaseException:
            if self.bp_turn:
                BP_TURN.release()
            raise
        self.held = True
        TURNS.start()                         # ended with the lease: the long jobs wait meanwhile
        self.tokenizer = loaded.tokenizer
        try:
            self._start(job, loaded, workers)
        except BaseException:
            self.release()
            raise

    def _start(self, job: dict, loaded, workers: int) -> None:
        source = MODELS.bp_group(workers, self.model) if workers > 1 else loaded
        settings, resume = DecodeSettings.from_dict(job["settings"]), job.get("resume")
        if resume is None:
            self.decoder = source.decoder(settings)
            self.decoder.keep_states = bool(job.get("keep_states"))
            self.stream, self.key = self.decoder.stream(job["prompt"]), None
        elif resume["kind"] == "continue":
            self.key = resume["run_id"]
            kept = _take((self.key, len(resume["trace"]["records"])))
            if kept is not None:
                self.decoder, self.stream = kept
            else:                     # replay the recorded rounds, then go on under the run's own policy
                parent = run_of(resume["trace"])
                self.decoder = source.decoder(settings)
                self.stream = self.decoder.stream_fork(parent, len(parent.records) - 1)
        else:
            parent = run_of(resume["trace"])
            parent.decoder = _take(("states", parent.run_id))       # saved states: the fork resumes from them
            self.decoder = fork_decoder(parent, model=loaded)
            self.decoder.keep_states = self.decoder.keep_states and bool(job.get("keep_states"))
            self.stream, self.key = self.decoder.stream_fork(parent, int(resume["at_round"]),
                                                             {int(p): t for p, t in resume["commit"].items()},
                                                             [int(p) for p in resume["hold"]]), None
            if parent.decoder is not None:
                _keep(("states", parent.run_id), parent.decoder, self.model)

    def advance(self) -> dict:
        """The next round as a chunk."""
        record = next(self.stream, None)
        d = self.decoder
        finished = record is None or record.kind == "final" or d.done
        if finished:
            self.done = True
            next(self.stream, None)          # lets the engine mark the run finished
        run = d.result()
        chunk = {"job": self.index, "records": [record.to_dict()] if record is not None else [], "tokens": run.tokens,
                 "text": run.text, "finished": finished}
        if self.first:
            chunk["header"] = {k: v for k, v in run.header().items() if k in HEADER}
            self.first = False
        ids = set() if record is None else ({t for row in record.branch_argmax for t in row}
                                             | set(record.anchor_tokens) | set(record.lookahead_tokens))
        chunk["names"] = [[i, s] for i, s in token_names(self.tokenizer, ids - self.named).items()]
        self.named |= ids
        if finished and d.keep_states and d.states:
            _keep(("states", d.run_id), d, self.model)
        if self.left is not None:
            self.left -= 1
            self.done = self.done or self.left <= 0
        return chunk

    def pause(self) -> None:
        """Keep an unfinished decode for the next call (Step, or Run after a closed page); give the model back."""
        try:
            if self.decoder.finished or not self.decoder.records:
                self.stream.close()
                return
            _keep((self.key or self.decoder.run_id, len(self.decoder.records)), (self.decoder, self.stream),
                  self.model)
        finally:
            self.release()

    def release(self) -> None:
        if self.held:
            self.held = False
            TURNS.end()
            MODELS.release(self.model)
            if self.bp_turn:
                self.bp_turn = False
                BP_TURN.release()


def _take_bp_turn() -> bool:
    """The branch-parallel ranks for one decode at a time: with decode workers the model slots are several
    (app/panels/events.py MODEL), and two decodes on one group of ranks would mix their messages."""
    if not BP_TURN.acquire(timeout=BP_WAIT_S):
        raise ValueError(f"the branch-parallel ranks are busy with another visitor's decode (waited "
                         f"{BP_WAIT_S:.0f} s): try again when it ends, or choose the single-process backend")
    return True


def _error(index: int, err: Exception, workers: int) -> dict:
    if isinstance(err, RuntimeError) and workers <= 1:
        raise err                         # not the user's input, not a rank: a bug, let it show
    return {"job": index, "error": str(err), "kind": "input" if isinstance(err, ValueError) else "fault"}


def decode_rounds(jobs: list[dict]):
    """Decode the jobs round by round, taking turns (Compare runs two); after each pass yield the
    chunks of that pass. A job ends at its last round, after its `rounds`, or on an error chunk."""
    live = []
    try:
        for i, job in enumerate(jobs):
            try:
                live.append(_Job(i, job))
            except (ValueError, RuntimeError) as err:
                yield [_error(i, err, int(job.get("workers", 1)))]
                return
        while any(not j.done for j in live):
            chunks = []
            for j in live:
                if not j.done:
                    try:
                        chunks.append(j.advance())
                    except (ValueError, RuntimeError) as err:
                        j.done = True
                        chunks.append(_error(j.index, err, int(j.job.get("workers", 1))))
            yield chunks
    finally:                              # also when the caller closes us (Stop, a closed page)
        for j in live:
            j.pause()


decode_rounds_on_gpu = gpu(decode_rounds)


def stream_jobs(jobs: list[dict]):
    """decode_rounds where it runs best: in a decode worker (app/serving/decode_pool.py: small models on a CPU server,
    so that two visitors' decodes run at once), else through the GPU boundary; the branch-parallel backend's
    ranks are CPU processes this server started, so its jobs run here, outside any GPU call."""
    if any(int(job.get("workers", 1)) > 1 for job in jobs):
        return decode_rounds(jobs)
    if POOL.size and not POOL.started():
        POOL.start(MODELS.default, server_threads())      # app.serve starts it sooner; until ready, here
    worker = POOL.take(jobs)
    if worker is not None:
        return _visitors_turn(POOL.stream(worker, jobs))
    return decode_rounds_on_gpu(jobs)


def _visitors_turn(passes):
    """A worker's decode counts as a visitor's decode here too: the long jobs give way to it (GiveWay)."""
    TURNS.start()
    try:
        yield from passes
    finally:
        passes.close()
        TURNS.end()


def _check_made_with(loaded, trace: dict, what: str) -> None:
    name = trace["spec"].get("name")
    if name != loaded.spec.name:
        raise ValueError(f"{what} the model this run was made with (`{name}`), but its folder now holds "
                         f"`{loaded.spec.name}`")


def top_tokens_at(model: str, trace: dict, r: int, position: int, n: int) -> dict:
    """The n best tokens of the model in folder `model` at `position` in round r's forward of a run
    (lopa.forward.top_tokens)."""
    try:
        with MODELS.lease(model) as loaded:
            _check_made_with(loaded, trace, "forks need")
            top = top_tokens(loaded.model, trace["spec"], run_of(trace), r, position, n)
    except ValueError as err:
        return {"error": str(err)}
    return {"top": [[t, p] for t, p in top], "names": [[i, s] for i, s in token_names(loaded.tokenizer,
                                                                                        [t for t, _ in top]).items()]}


top_tokens_on_gpu = gpu(top_tokens_at)


def study_steps(study: str, n: int, seed: int, knobs: dict, base: dict, model: str | None = None):
    """A live study's decodes (lopa.study.STUDIES[study].load().live, given the study's own live knobs out of
    `knobs`) on the model in folder `model` (default: the default model): {"where": ..., "total": None}
    first, then the study's own steps ({"status"}, {"summary"}, {"total", "row", "rounds"} per decode). The
    caller stops it by closing it (after the current decode)."""
    declared = lopa.study.STUDIES[study]
    with MODELS.lease(model) as loaded:
        problems, where = load_problems("synthetic", n, seed)
        yield {"where": where, "total": None}
        steps = declared.load().live(loaded, problems, DecodeSettings.from_dict(base), **declared.live_values(knobs))
        try:
            yield from TURNS.steps(steps)
        finally:
            steps.close()


study_steps_on_gpu = gpu(study_steps)


def best_order_steps(model: str, trace: dict, max_candidates: int, seconds: float):
    """The headroom search (lopa.study.headroom.iter_search) from one finished run of the model in folder
    `model`, the
    extra position of each round chosen by the forwards to finish: after every searched round {"round",
    "rounds" (the order found so far needs), "spent" (rollout forwards), "out_of_time", "trace" (the order
    found so far, a whole run), "choices", "names"}; after every rollout (a decode) {"rollout": j, "of": the
    round's rollouts, "round": the round being searched}; or one {"error": message}. No rollout starts after
    `seconds`. The caller stops it by closing it: within the rollout under way, one decode."""
    import time
    deadline = time.perf_counter() + seconds
    try:
        loaded = MODELS.acquire(model)
    except ValueError as err:
        yield {"error": str(err)}
        return
    try:
        yield from _search(model, loaded, trace, max_candidates, deadline)
    finally:
        MODELS.release(model)


def _search(model: str, loaded, trace: dict, max_candidates: int, deadline: float):
    from lopa.study.headroom import iter_search
    try:
        _check_made_with(loaded, trace, "the search needs")
        parent = run_of(trace)
        parent.decoder = _take(("states", parent.run_id))
        start = parent
        if parent.decoder is None:   # replay its recorded decisions with saved states: the rollouts fork from them
            decoder = fork_decoder(parent, model=loaded)
            last = max(r.round for r in parent.records if r.kind != "final")
            for _ in decoder.stream_fork(parent, last):
                pass
            start = decoder.result()
    except ValueError as err:
        yield {"error": str(err)}
        return
    named = set()
    try:
        for step in TURNS.steps(iter_search(start, max_candidates, deadline, each_rollout=True)):
            if "rollout" in step:    # a round is many decodes: Stop is read between them, not only between rounds
                yield {"rollout": step["rollout"], "of": step["of"], "round": step["round"]}
                continue
            best = step["best"]
            names = token_names(loaded.tokenizer, trace_ids(best) - named)
            named |= set(names)
            yield {"round": step["round"], "rounds": step["rounds"], "spent": step["spent"],
                   "out_of_time": step["out_of_time"], "trace": trace_of(best), "choices": list(step["choices"]),
                   "names": [[i, text] for i, text in names.items()]}
    finally:
        if parent.decoder is not None:
            _keep(("states", parent.run_id), parent.decoder, model)    # forks of the run still resume from its states


best_order_steps_on_gpu = gpu(best_order_steps)
