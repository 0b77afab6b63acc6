"""Live studies say where they are: every step of a study's live() counts its units of work ("done" of
"total": every decode it runs, the headroom search's rollouts and the adaptive study's calibration
included), a stopped app run starts no decode after the Stop, and the text, the plot and its title
describe the same complete problems. Counts, not clocks."""

import pytest
from tiny import save_tiny_model_dir

from lopa import DecodeSettings
from lopa.engine import Decoder
from lopa.problems import split
from lopa.study import APP_STUDIES, STUDIES
from lopa.study.headroom import search_progress

SETTINGS = DecodeSettings(k=2, block_size=8, max_new_tokens=16, tau_conf=0.12, tau_add=0.3, tau_act=0.6)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from lopa.models import load
    return load(str(save_tiny_model_dir(tmp_path_factory.mktemp("model") / "tiny-dllm")), device="cpu")


@pytest.fixture
def decodes(monkeypatch):
    """How many decodes (runs and forks) have started: a list whose length is the count."""
    started = []
    stream, stream_fork = Decoder.stream, Decoder.stream_fork

    def counted(method):
        def wrapper(self, *args, **kwargs):
            started.append(method.__name__)
            return method(self, *args, **kwargs)
        return wrapper
    monkeypatch.setattr(Decoder, "stream", counted(stream))
    monkeypatch.setattr(Decoder, "stream_fork", counted(stream_fork))
    return started


def problems(n):
    return [{"id": i, "question": p["question"], "answer": p["answer"]} for i, p in enumerate(split("heldout", n, 15))]


@pytest.mark.parametrize("study", APP_STUDIES)
def test_every_unit_of_a_live_study_is_counted_once_and_the_count_ends_at_its_total(loaded, decodes, study):
    module = STUDIES[study].load()
    done, totals, units = 0, [], 0
    for step in module.live(loaded, problems(2), SETTINGS, **STUDIES[study].live_values({"random": 2, "values": 1})):
        if "done" not in step:
            assert "summary" in step                       # the one step that is no unit of work
            continue
        assert step["done"] in (done, done + 1)            # one unit at a time, never a jump
        units += step["done"] - done
        done = step["done"]
        totals.append(step["total"])
        assert step["total"] >= done
    assert done == totals[-1]                               # the count ends exactly at its total
    sweeps = 3 if study == "adaptive" else 0                # the cost curve's timing sweeps run no decode
    assert units - sweeps == len(decodes)                   # every decode counted, the search's rollouts too
    if study != "headroom":                                 # known from the start; the search's only as it goes
        assert len(set(totals)) == 1


def test_the_headroom_total_counts_the_search_and_is_exact_once_it_ends():
    # 2 problems, 8 plain decodes each; no search has run: a search is guessed at `plain`.
    assert search_progress(2, 8, [], 0, None) == 16 + 16
    # Problem 1's search at round 2 of a best run of 5 forwards (rounds 1..4 searched), rollout 1 of 3:
    # 1 done, 2 more this round, 2 rounds of 3 after it; problem 2's search is guessed alike.
    step = {"rollout": 1, "of": 3, "round": 2, "rounds": 5}
    assert search_progress(2, 8, [], 1, step) == 16 + 9 + 9
    # Problem 1's search ended after 7 rollouts: problem 2's is expected at 7 until its own is known.
    assert search_progress(2, 8, [7], 0, None) == 16 + 7 + 7
    assert search_progress(2, 8, [7, 4], 0, None) == 16 + 11              # exact
    # A search that ends sooner than its estimate never leaves the total under the work done.
    assert search_progress(1, 8, [], 5, {"rollout": 5, "of": 5, "round": 1, "rounds": 2}) == 8 + 5


# -- through the app's Studies section -----------------------------------------------------------------
@pytest.fixture
def app_studies(loaded, monkeypatch, tmp_path_factory):
    from tiny import app_model

    from app.panels.studies import callbacks as studies
    monkeypatch.setattr(studies, "_base", lambda model: SETTINGS)
    monkeypatch.setattr(studies, "STATUS_EVERY_S", 0)      # every status reaches the page: the counts are checked
    with app_model(tmp_path_factory):
        yield studies


def progress(out) -> tuple[int, int]:
    bar = str(out[1])
    if 'value="' not in bar:
        return None
    return int(bar.split('value="')[1].split('"')[0]), int(bar.split('max="')[1].split('"')[0])


@pytest.mark.parametrize("study", APP_STUDIES)
def test_the_progress_bar_moves_a_decode_at_a_time_to_its_end(app_studies, study):
    outs = list(app_studies.run_study(app_studies.new_study_state(), study, 2, 2, seed=15))
    bars = [b for b in map(progress, outs[1:]) if b is not None]       # after the "where" line
    done = [d for d, _ in bars]
    assert all(b - a in (0, 1) for a, b in zip(done, done[1:]))
    assert bars[-1][0] == bars[-1][1] and "Done" in outs[-1][0] and "2 problems" in outs[-1][2].layout.title.text
    estimated = ["the total is an estimate" in str(out[1]) for out in outs[1:-1]]
    assert any(estimated) == (study == "headroom") and "estimate" not in str(outs[-1][1])   # said while it is one


def test_statuses_alone_are_held_back_to_the_interval_and_the_count_still_ends_at_its_total(app_studies,
                                                                                           monkeypatch):
    """The search reports every rollout; with an interval no run reaches, only the first status after each
    decode shows on its own, a held-back one goes with the next decode's bar, and the run ends as before."""
    every = list(app_studies.run_study(app_studies.new_study_state(), "headroom", 2, 1, seed=15))
    monkeypatch.setattr(app_studies, "STATUS_EVERY_S", 1e9)
    held = list(app_studies.run_study(app_studies.new_study_state(), "headroom", 2, 1, seed=15))
    texts = [str(out[0]) for out in held if isinstance(out[0], str)]
    assert len(held) < len(every) and set(texts) <= {str(out[0]) for out in every}
    assert progress(held[-1]) == progress(every[-1]) and held[-1][0] == every[-1][0]
    searched = [t for t in texts if t.startswith("Searching")]
    assert searched and len(searched) < sum(str(out[0]).startswith("Searching") for out in every)


def test_stop_inside_the_headroom_search_starts_no_decode_after_it(app_studies, decodes):
    state = app_studies.new_study_state()
    run = app_studies.run_study(state, "headroom", 2, 1, seed=15)
    for out in run:
        if "rollout 1 of" in str(out[0]) and "problem 1" in str(out[0]):
            app_studies.stop_study(state)
            pressed = len(decodes)
            break
    else:
        pytest.fail("the search reported no rollout")
    last = list(run)[-1]
    assert len(decodes) - pressed <= 1                     # within one decode (here: none after the press)
    assert "Stopped before the first problem" in last[0] and last[4] == ""   # no summary of nothing


def test_a_stopped_run_summarizes_and_plots_its_complete_problems_only(app_studies):
    """Stopped inside problem 2: the numbers, the plot and its title say 1 problem, not 2."""
    state = app_studies.new_study_state()
    run = app_studies.run_study(state, "orders", 3, 2, seed=15)
    per_problem = len(STUDIES["orders"].load().order_runs(SETTINGS, 2))
    for out in run:
        bar = progress(out)
        if bar and bar[0] == per_problem + 2:               # problem 1 complete, two decodes of problem 2
            app_studies.stop_study(state)
            break
    last = list(run)[-1]
    assert "stopped: the 1 complete problem)" in last[0]
    assert "1 problem" in last[2].layout.title.text and "\n1 problem x 2 random orders" in "\n" + last[4].strip("`\n")
    assert "2 problem" not in last[0] + last[2].layout.title.text + last[4]
