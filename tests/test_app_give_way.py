"""app/serving/give_way.py GiveWay: a long job (a study, the best-order search) waits between two of its decodes while a
visitor's decode (decode_rounds: Run, Step, a fork, Compare) is under way, at most a bound each time. The waits
are checked by their order and by threads, not by a clock (a bound is only a hang guard)."""

import threading

from tiny import LIVELY, PROMPT

from app.serving import boundary
from app.serving.give_way import GiveWay
from app.serving.model_cache import MODELS
from app.serving.session import APP_DEFAULTS
from lopa import DecodeSettings


def test_a_long_jobs_next_step_waits_for_a_visitors_decode_to_end():
    turns = GiveWay()
    steps = turns.steps(iter(["first", "second"]))
    assert next(steps) == "first"
    turns.start()                                    # a visitor's Run begins
    got, done = [], threading.Event()
    worker = threading.Thread(target=lambda: (got.append(next(steps, None)), done.set()), daemon=True)
    worker.start()
    assert not done.wait(0.5) and got == []          # still waiting for the Run (a slow machine waits longer still)
    turns.end()                                      # the Run ends
    assert done.wait(30) and got == ["second"]


def test_a_long_job_moves_on_after_the_bound_under_a_stream_of_runs():
    turns = GiveWay()
    turns.start()
    assert turns.wait(bound_s=0.05) is False         # the Run still runs: the long job goes on anyway
    turns.end()
    assert turns.wait(bound_s=0.05) is True


def test_a_decode_counts_as_a_visitors_from_its_first_round_to_its_end(app_model_dir, monkeypatch):
    turns = GiveWay()
    monkeypatch.setattr(boundary, "TURNS", turns)
    job = {"model": str(MODELS.folder(None)), "prompt": PROMPT, "rounds": None,
           "settings": DecodeSettings(**{**APP_DEFAULTS, **LIVELY, "k": 2}).to_dict()}
    chunks = boundary.decode_rounds([job])
    next(chunks)
    assert turns.wait(bound_s=0.01) is False         # a long job would wait now
    for _ in chunks:
        pass
    assert turns.wait(bound_s=0.01) is True          # and no longer once it ended
    closed = boundary.decode_rounds([job])
    next(closed)
    closed.close()                                   # Stop, a closed page: the decode ends there too
    assert turns.wait(bound_s=0.01) is True
