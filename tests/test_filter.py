"""The learned commit filter (lopa/filter.py): its features on a hand-made block, a hand-made filter through
the rule, its folder, the refusals, the shipped filters, and training reproducible from one seed."""

import json
import os

import pytest
import torch

from lopa import Decoder, DecodeSettings, ModelSpec
from lopa.filter import (
    FEATURES,
    FILTER_DIR,
    FILTER_JSON,
    FILTER_WEIGHTS,
    CommitFilter,
    block_features,
    check_description,
    filter_folder,
    load_filter,
    save_filter,
)
from lopa.rules import COMMIT_RULES, BlockPredictions

torch.set_num_threads(1)
NAN = float("nan")


def hand_made_filter() -> CommitFilter:
    """logit = 10 * max_prob - 5 (one ReLU unit reading max_prob): 0.95 -> 0.989, 0.8 -> 0.953, 0.5 -> 0.5."""
    f = CommitFilter(len(FEATURES), (1,))
    with torch.no_grad():
        for p in f.parameters():
            p.zero_()
        f.net[0].weight[0, FEATURES.index("max_prob")] = 10.0
        f.net[2].weight[0, 0], f.net[2].bias[0] = 1.0, -5.0
    return f.eval()


def block(max_prob, rank=None, commit_filter=None):
    M = len(max_prob)
    max_prob = torch.tensor(max_prob)
    return BlockPredictions(torch.arange(M), max_prob, max_prob.clone(), torch.tensor(rank or max_prob.tolist()),
                            torch.full((M,), -1), torch.full((M,), NAN), torch.arange(M), 0, commit_filter)


def test_block_features_on_a_hand_made_block():
    """Three masked positions at offsets 0, 2 and 3 of a block of 4, the first block of the window, semi-activated."""
    got = block_features(token=torch.tensor([5, 6, 7]), max_prob=torch.tensor([0.5, 0.9, 0.7]),
                         conf=torch.tensor([-1.0, -0.2, -0.5]), prev_token=torch.tensor([5, -1, 8]),
                         prev_max_prob=torch.tensor([0.4, NAN, 0.6]), offset=torch.tensor([0, 2, 3]), block_size=4,
                         first_block=True, fully_activated=False)
    want = {"max_prob": [0.5, 0.9, 0.7], "conf": [-1.0, -0.2, -0.5], "same_as_prev": [1, 0, 0],
            "prev_max_prob": [0.4, 0, 0.6], "offset": [0, 2 / 3, 1], "masked_share": [0.75] * 3,
            "first_block": [1] * 3, "fully_active": [0] * 3, "rank": [1, 0, 0.5], "left_known": [1, 1, 0]}
    assert got.shape == (3, len(FEATURES))
    for i, name in enumerate(FEATURES):
        assert got[:, i].tolist() == pytest.approx(want[name]), name
    assert block_features(*(torch.zeros(0),) * 6, 4, True, True).shape == (0, len(FEATURES))


def test_a_hand_made_filter_commits_what_its_probability_clears():
    rule, settings = COMMIT_RULES["learned"], DecodeSettings(commit="learned", learned_threshold=0.96)
    f = hand_made_filter()
    assert f(torch.zeros(1, len(FEATURES))).tolist() == [-5.0]
    b = block([0.95, 0.8, 0.5, 0.97], commit_filter=f)
    assert rule(b, settings, True).tolist() == [True, False, False, True]
    assert rule(b, settings.replace(learned_threshold=0.95), True).tolist() == [True, True, False, True]
    low = block([0.8, 0.5, 0.6], rank=[0.1, 0.3, 0.2], commit_filter=f)
    assert rule(low, settings, True).tolist() == [False, True, False]          # fallback: the best by rank
    assert rule(low, settings, False).tolist() == [False, False, False]        # a semi-activated block: nothing forced
    with pytest.raises(ValueError, match="commit filter"):
        rule(block([0.9]), settings, True)


def test_the_features_and_the_filter_leave_their_inputs_alone():
    b = block([0.95, 0.8, 0.5], commit_filter=hand_made_filter())
    copies = [x.clone() for x in (b.token, b.max_prob, b.conf, b.rank, b.prev_token, b.prev_max_prob, b.offset)]
    COMMIT_RULES["learned"](b, DecodeSettings(commit="learned"), True)
    for before, after in zip(copies, (b.token, b.max_prob, b.conf, b.rank, b.prev_token, b.prev_max_prob, b.offset)):
        torch.testing.assert_close(before, after, rtol=0, atol=0, equal_nan=True)


def test_a_filter_round_trips_through_its_folder_and_its_description_is_checked(tmp_path):
    torch.manual_seed(3)
    f = CommitFilter()
    folder = save_filter(tmp_path, f, {"confidence": "neg_entropy", "seed": 3})
    assert folder == tmp_path / FILTER_DIR and filter_folder(tmp_path) == str(folder)
    loaded, meta = load_filter(folder)
    x = torch.randn(7, len(FEATURES))
    assert torch.equal(loaded(x), f(x)) and meta["parameters"] == f.n_params() == 2129
    assert 1800 <= f.n_params() <= 2200                     # about Learn2PD's 2,112
    meta = json.loads((folder / FILTER_JSON).read_text())
    with pytest.raises(ValueError, match="features"):
        check_description({**meta, "features": ["max_prob"]}, "x")
    with pytest.raises(ValueError, match="not a commit filter"):
        check_description({**meta, "format": "other"}, "x")
    with pytest.raises(ValueError, match="hidden"):
        check_description({**meta, "hidden": [0]}, "x")
    (folder / FILTER_WEIGHTS).write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="cannot load"):
        load_filter(folder)
    (folder / FILTER_WEIGHTS).unlink()
    os.mkfifo(folder / FILTER_WEIGHTS)                  # a named pipe: refused by stat, never opened
    with pytest.raises(ValueError, match="regular file"):
        load_filter(folder)
    (folder / FILTER_JSON).unlink()
    with pytest.raises(ValueError, match="cannot read"):
        load_filter(folder)
    assert filter_folder(tmp_path / "nothing") is None


def spec(**extra):
    return ModelSpec(mask_token_id=1, eos_token_ids=(0,), logit_shift=True, name="toy", extra=extra)


def test_a_model_without_a_filter_refuses_learned_naming_the_command(tmp_path):
    with pytest.raises(ValueError, match="python -m lopa.train filter --model toy"):
        Decoder(None, spec(), DecodeSettings(commit="learned"), executor=object())
    save_filter(tmp_path, hand_made_filter(), {"confidence": "neg_entropy"})
    with pytest.raises(ValueError, match="confidence=neg_entropy"):
        Decoder(None, spec(commit_filter=str(tmp_path / FILTER_DIR)),
                DecodeSettings(commit="learned", confidence="max_prob"), executor=object())
    decoder = Decoder(None, spec(commit_filter=str(tmp_path / FILTER_DIR)), DecodeSettings(commit="learned"),
                      executor=object())
    assert isinstance(decoder.commit_filter, CommitFilter)
    assert Decoder(None, spec(), DecodeSettings(), executor=object()).commit_filter is None


@pytest.mark.parametrize("name", ["open-gsm-dllm", "sure-gsm-dllm"])
def test_each_bundled_model_ships_its_filter_and_decodes_with_it(name):
    from lopa.models import load
    from lopa.models.loading import bundled_folder
    meta = json.loads((bundled_folder(name) / FILTER_DIR / FILTER_JSON).read_text())
    check_description(meta, name)
    assert meta["model"] == name and meta["command"].startswith("python -m lopa.train filter --model")
    assert meta["validation"]["rows"] > 0 and meta["validation"]["precision"] is not None
    loaded = load(name)
    assert loaded.spec.extra["commit_filter"] == str(bundled_folder(name) / FILTER_DIR)
    run = loaded.decoder(DecodeSettings(commit="learned", max_new_tokens=64)).run("Tom has 3 apples. He buys 4 more. "
                                                                                   "How many apples does Tom have?")
    assert run.tokens and run.settings["commit"] == "learned"


def test_training_is_reproducible_from_one_seed_and_never_draws_held_out_problems(tmp_path):
    from lopa.problems import is_heldout, split
    from lopa.train.filter import train_filter
    quiet = lambda *a: None         # noqa: E731
    one = train_filter("open-gsm-dllm", seed=5, n_problems=4, epochs=20, out=tmp_path / "a", log=quiet)
    two = train_filter("open-gsm-dllm", seed=5, n_problems=4, epochs=20, out=tmp_path / "b", log=quiet)
    weights = [(tmp_path / d / FILTER_DIR / FILTER_WEIGHTS).read_bytes() for d in "ab"]
    assert weights[0] == weights[1]
    assert {k: v for k, v in one.items() if not k.endswith("_s")} == {k: v for k, v in two.items() if not k.endswith("_s")}
    assert one["validation_problems"] == 1 and one["train"]["rows"] > 0 and one["validation"]["rows"] > 0
    other = train_filter("open-gsm-dllm", seed=6, n_problems=4, epochs=20, out=tmp_path / "c", log=quiet)
    assert (tmp_path / "c" / FILTER_DIR / FILTER_WEIGHTS).read_bytes() != weights[0] and other["seed"] == 6
    assert not any(is_heldout(p["question"]) for p in split("train", 200, 5, 3, 30, "ladder"))


def test_the_command_line_trains_and_records_itself(tmp_path):
    """`python -m lopa.train filter` dispatches to lopa.train.filter (the trainer's own flags untouched), and the
    description records the command that made it."""
    import subprocess
    import sys

    from lopa.train.filter import main
    main(["--model", "open-gsm-dllm", "--problems", "2", "--epochs", "3", "--out", str(tmp_path)])
    meta = json.loads((tmp_path / FILTER_DIR / FILTER_JSON).read_text())
    assert meta["command"] == f"python -m lopa.train filter --model open-gsm-dllm --problems 2 --epochs 3 --out {tmp_path}"
    assert meta["epochs"] == 3 and meta["problems"] == 2 and meta["validation_problems"] == 1
    helps = [subprocess.run([sys.executable, "-m", "lopa.train", *args, "--help"], capture_output=True, text=True)
             for args in (["filter"], [])]
    assert all(h.returncode == 0 for h in helps)
    assert "lopa.train filter" in helps[0].stdout and "--problems" in helps[0].stdout
    assert "--export" in helps[1].stdout and "--problems" not in helps[1].stdout


def test_a_learned_trace_names_the_filter_without_a_local_path(tmp_path):
    """The trace of a commit=learned decode records the filter folder by its name only: a shared trace carries no
    path of the machine that made it."""
    from pathlib import Path

    from lopa.models import load
    from lopa.models.loading import bundled_folder
    from lopa.resolution import resolve
    loaded = load(str(bundled_folder("open-gsm-dllm").resolve()))
    assert Path(loaded.spec.extra["commit_filter"]).is_absolute()
    run = loaded.decoder(resolve({"commit": "learned", "max_new_tokens": 32}, loaded.spec)).run("Tom has 3 apples.")
    assert run.spec["extra"]["commit_filter"] == FILTER_DIR
    run.save(tmp_path / "t.json")
    assert str(bundled_folder("open-gsm-dllm").resolve()) not in (tmp_path / "t.json").read_text()
