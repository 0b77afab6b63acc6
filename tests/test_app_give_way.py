"""app/boundary.py GiveWay: a long job (a study, the best-order search) waits between two of its decodes while a
visitor's decode (decode_rounds: Run, Step, a fork, Compare) is under way, at most a bound each time. The waits
are checked by their order and by threads, not by a clock (a bound is only a hang guard)."""

import threading

import pytest
from tiny import LIVELY, PROMPT

from app import boundary
from app.boundary import GiveWay
from app.model_cache import MODELS
from app.session import APP_DEFAULTS
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


def test_in_process_decodes_take_turns_and_a_closed_one_hands_its_turn_on(app_model_dir, monkeypatch):
    """Two model events run at once (app/wiring.py MODEL), their decodes in this process one after the other
    (boundary.DECODE_TURN): the second's first round waits for the first decode to end, or to be closed."""
    monkeypatch.setattr(boundary, "DECODE_TURN", threading.Lock())
    job = {"model": str(MODELS.folder(None)), "prompt": PROMPT, "rounds": None,
           "settings": DecodeSettings(**{**APP_DEFAULTS, **LIVELY, "k": 2}).to_dict()}
    first, second = boundary.stream_jobs([job]), boundary.stream_jobs([job])
    next(first)                                      # the first decode is under way
    got, done = [], threading.Event()
    worker = threading.Thread(target=lambda: (got.append(next(second)), done.set()), daemon=True)
    worker.start()
    assert not done.wait(0.5) and got == []          # the second waits (a slow machine waits longer still)
    for _ in first:                                  # the first decode ends: the second goes on
        pass
    assert done.wait(30) and got and "records" in got[0][0]
    third = boundary.stream_jobs([job])
    waiting = threading.Thread(target=lambda: next(third), daemon=True)
    second.close()                                   # Stop, a closed page: the turn passes on at once
    waiting.start()
    waiting.join(30)
    assert not waiting.is_alive()
    third.close()
    assert boundary.DECODE_TURN.acquire(blocking=False)       # every turn was handed back
    monkeypatch.setattr(boundary, "DECODE_WAIT_S", 0.05)
    with pytest.raises(ValueError, match="another visitor's decode"):       # a bounded wait, answered with a message
        next(boundary.stream_jobs([job]))
