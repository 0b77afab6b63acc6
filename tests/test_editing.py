"""Token editing (lopa/editing.py): the pure helpers on hand-made tensors, then the whole engine on a scripted
fake model (an edit made and recorded, post-edit rounds that stop for the stated reason, the trace checker's
re-derivation), and editing off leaving every decode as it was."""

import json

import pytest
import torch
from fake_model import EOS, MASK, FakeDLLM, table_script

from lopa import Decoder, DecodeSettings, ModelSpec, RunResult
from lopa.blocks import Branch
from lopa.editing import (
    BUDGET,
    NO_CHANGE,
    Editor,
    derive_edits,
    edit_proposals,
    full_prefix,
    recorded_edits,
    spent_blocks,
)
from lopa.engine import fork

PROMPT = torch.tensor([7, 8, 9])
SPEC = ModelSpec(mask_token_id=MASK, eos_token_ids=(EOS,), logit_shift=True, max_context=4096)
M = MASK


def t(*values, dtype=torch.long):
    return torch.tensor(values, dtype=dtype)


# -- pure helpers ---------------------------------------------------------------------------------------------------
def test_proposals_are_committed_positions_read_otherwise_surely_above_the_threshold():
    window = t(4, 5, M, 8, 9)
    token = t(4, 6, 7, 3, M)                       # 0: same token; 1: another; 2: masked; 3: another; 4: the mask
    max_prob = t(0.99, 0.9, 0.99, 0.95, 0.99, dtype=torch.float32)
    before = (window.clone(), token.clone(), max_prob.clone())
    assert edit_proposals(window, token, max_prob, 0.9, M).tolist() == [False, False, False, True, False]   # strict
    assert edit_proposals(window, token, max_prob, 0.5, M).tolist() == [False, True, False, True, False]
    assert all(torch.equal(a, b) for a, b in zip(before, (window, token, max_prob)))     # inputs untouched


def test_full_prefix_and_spent_blocks():
    assert full_prefix(t(1, 2, 3, 4, 5, M, 7, 8), 2, M) == 2        # blocks [1 2] [3 4] full; [5 M] is not
    assert full_prefix(t(M, 2, 3, 4), 2, M) == 0 and full_prefix(t(1, 2, 3, 4), 2, M) == 2
    # window blocks 0..2 are sequence blocks 3..5; the full prefix is 2 blocks; budget 2
    assert spent_blocks({3: 2, 4: 1, 5: 9}, 3, 3, 2, 2).tolist() == [True, False, False]   # block 5 is not full


def settings(**changes):
    return DecodeSettings(**{"block_size": 2, "max_new_tokens": 6, "edit_threshold": 0.5, "edit_post_steps": 1,
                             **changes})


def test_the_edit_phase_edits_and_spends_a_round_only_of_full_prefix_blocks():
    editor = Editor(settings(), M)
    state = Branch(t(4, 5, 6, M, 8, 9), 0, 2, M)        # block 0 full, block 1 not, block 2 full behind it
    token = t(4, 7, 3, 2, 3, 9)
    max_prob = t(0.9, 0.9, 0.9, 0.9, 0.9, 0.9, dtype=torch.float32)
    edited, edits = editor.edit(state, (token, max_prob, max_prob))
    assert state.tokens.tolist() == [4, 5, 6, M, 8, 9]                                # the input is not changed
    assert edited.tokens.tolist() == [4, 7, 3, M, 3, 9]
    assert (edits.positions, edits.old, edits.new) == ([1, 2, 4], [5, 6, 8], [7, 3, 3])
    assert editor.post_rounds == {0: 1}                  # only block 0 was waiting on its edits alone
    # block 0 has spent its one round: proposals there are no longer wanted, so the schedule may cache it; block 1
    # (not full) still wants its edit, so block 1 and what follows stay
    again = (t(4, 9, 6, 2, 8, 9), max_prob, max_prob)
    assert editor.wanted(edited, *again[:2]).tolist() == [False, False, True, False, True, False]
    assert editor.cacheable(edited, again, 3) == 1
    assert editor.settled(Branch(t(4, 9, 6, 1, 3, 9), 0, 2, M), again) is False


def test_editing_off_does_nothing():
    editor = Editor(settings(edit_threshold=1.0), M)
    state = Branch(t(4, 5), 0, 2, M)
    p = t(0.99, 0.99, dtype=torch.float32)
    assert editor.edit(state, (t(6, 6), p, p)) == (state, editor.edit(state, (t(6, 6), p, p))[1])
    assert editor.cacheable(state, (t(6, 6), p, p), 1) == 1 and editor.settled(state, (t(6, 6), p, p))
    assert editor.fields(editor.edit(state, (t(6, 6), p, p))[1]) == {}


# -- the engine on a scripted model ------------------------------------------------------------------------------------
# Position 1 is first read as 5; once position 2 holds 7 the model reads 6 there, surely: one edit.
ONE_EDIT = {0: (4, 0.95), 1: lambda v: (6, 0.97) if v.get(2) == 7 else (5, 0.95), 2: (7, 0.6), 3: (8, 0.95)}
# Position 1 always reads the other of 5 and 6 than it holds: an edit every round, for ever unless the budget stops it.
FLIP = {0: (4, 0.95), 1: lambda v: (6, 0.97) if v.get(1) == 5 else (5, 0.97), 2: (7, 0.95), 3: (8, 0.95)}


def decode(table, executor="uncached", keep_states=False, **changes):
    model = FakeDLLM(len(PROMPT), table_script(table), shift=True)
    s = DecodeSettings(**{"k": 0, "tau_conf": 0.9, "block_size": 4, "max_new_tokens": 8, "confidence": "max_prob",
                          **changes})
    return Decoder(model, SPEC, s, executor=executor, keep_states=keep_states).run(PROMPT)


@pytest.mark.parametrize("k", [0, 2])
def test_an_edit_is_made_recorded_and_rederived(k):
    run = decode(ONE_EDIT, k=k, edit_threshold=0.9, edit_post_steps=3)
    assert run.tokens[:4] == [4, 6, 7, 8]
    edited = [r for r in run.records if r.edit_positions]
    assert len(edited) == 1
    rec = edited[0]
    assert (rec.edit_positions, rec.edit_old, rec.edit_tokens) == ([1], [5], [6])
    assert rec.edit_prob[0] == pytest.approx(0.97, abs=1e-6)
    assert rec.branch_tokens[0][1 - rec.window_start] == 6                         # every row carries the edit
    assert run.records[-1].edit_stop == NO_CHANGE and all(not r.edit_stop for r in run.records[:-1])
    # the round before the edit saw the new reading at a committed position, and kept block 0 out of the cache
    before = run.records[rec.round - 1]
    assert 1 in before.edit_seen_positions and before.n_cached_blocks == 0
    assert derive_edits(run.records, 0.9, 3, 4, MASK) == [recorded_edits(r) for r in run.records]
    assert run.metrics()["edits"] == 1
    if k == 0:       # vanilla: the anchor finished the sequence; the edit takes a post round, then nothing changes
        assert [r.kind for r in run.records] == ["prefill", "round", "round", "post"]
        assert run.metrics()["post_rounds"] == 1


def test_post_rounds_stop_at_the_budget():
    run = decode(FLIP, edit_threshold=0.9, edit_post_steps=2)
    last = run.records[-1]
    assert last.edit_stop == BUDGET
    assert [r.edit_old for r in run.records if r.edit_positions] == [[5], [6]]        # two post-edit rounds in block 0
    assert run.metrics()["post_rounds"] >= 1 and derive_edits(run.records, 0.9, 2, 4, MASK)[-1] == recorded_edits(last)
    zero = decode(FLIP, edit_threshold=0.9, edit_post_steps=0)        # no post-edit round: block 0 cached when full
    assert zero.records[-1].edit_stop == BUDGET and zero.metrics()["edits"] == 0


def test_the_checker_rederives_edits_and_refuses_a_forged_one(tmp_path):
    run = decode(ONE_EDIT, edit_threshold=0.9, edit_post_steps=3)
    for suffix in (".json", ".parquet"):
        back = RunResult.load(run.save(tmp_path / f"run{suffix}"))
        assert [recorded_edits(r) for r in back.records] == [recorded_edits(r) for r in run.records]
    data = json.loads(run.to_json())
    edited = next(r for r in data["records"] if r["edit_positions"])
    edited["edit_tokens"] = [9]
    with pytest.raises(ValueError, match="its edits"):
        RunResult.from_json(json.dumps(data))
    data = json.loads(run.to_json())
    data["settings"]["edit_threshold"] = 0.99                  # 0.97 is not above it: the recorded edit is not due
    with pytest.raises(ValueError, match="its edits"):
        RunResult.from_json(json.dumps(data))
    old = json.loads(decode(ONE_EDIT).to_json())                # a trace written before editing: no edit fields
    del old["settings"]["edit_threshold"], old["settings"]["edit_post_steps"]
    for record in old["records"]:
        for name in [n for n in record if n.startswith("edit_")]:
            del record[name]
    assert RunResult.from_json(json.dumps(old)).tokens[:4] == [4, 5, 7, 8]


def test_editing_off_is_the_decode_without_it():
    for table in (ONE_EDIT, FLIP):
        for k in (0, 2):
            plain, off = decode(table, k=k), decode(table, k=k, edit_threshold=1.0, edit_post_steps=5)
            assert plain.tokens == off.tokens
            assert [r.to_dict() | {"round_seconds": 0, "forward_seconds": 0} for r in plain.records] == \
                [r.to_dict() | {"round_seconds": 0, "forward_seconds": 0} for r in off.records]
            assert not any(r.edit_positions or r.edit_seen_positions or r.edit_stop for r in off.records)


def test_the_cached_executors_edit_as_the_uncached_reference():
    """A random tiny model at edit_threshold 0 (SGLang's default: edit wherever the reading changes) edits; the
    batched fast path, its static-shape path, its eager reference and one branch at a time on a cache copy make the
    uncached run's edits."""
    from tiny import LIVELY, tiny_qwen2, tiny_spec
    model, spec = tiny_qwen2(seed=3), tiny_spec()
    s = DecodeSettings(**{**LIVELY, "k": 2, "edit_threshold": 0.0, "edit_post_steps": 2})
    prompt = torch.arange(3, 15)
    from lopa.forward import BatchedExecutor
    static = BatchedExecutor(model, spec, s, static=True)        # the CUDA graphs' static path, uncaptured
    runs = [Decoder(model, spec, s, executor=e).run(prompt)
            for e in ("uncached", "batched", "batched_eager", "per_branch", static)]
    assert runs[0].metrics()["edits"] > 0
    for run in runs[1:]:
        assert run.tokens == runs[0].tokens
        edits, reference = ([e for r in x.records for e in recorded_edits(r)] for x in (run, runs[0]))
        assert [e[:3] for e in edits] == [e[:3] for e in reference]
        assert [e[3] for e in edits] == pytest.approx([e[3] for e in reference], abs=1e-5)
    assert RunResult.from_json(runs[1].to_json()).tokens == runs[0].tokens          # the checker re-derives them


def test_a_fork_resumes_the_post_edit_budget():
    run = decode(FLIP, edit_threshold=0.9, edit_post_steps=2, keep_states=True)
    again = fork(run, at_round=2)
    assert again.tokens == run.tokens
    assert [recorded_edits(r) for r in again.records] == [recorded_edits(r) for r in run.records]


def test_lopa_generate_edits_through_its_flags(tmp_path, capsys):
    """The flags come from the one declaration: --edit-threshold / --edit-post-steps reach the decode and its trace."""
    from tiny import save_tiny_model_dir

    from lopa.cli import main
    path = save_tiny_model_dir(tmp_path / "tiny", seed=3)
    trace = tmp_path / "run.json"
    assert main(["generate", "--model", str(path), "--prompt", "Tom has 3 apples", "--max-new-tokens", "32",
                 "--tau-conf", "0.12", "--k", "2", "--edit-threshold", "0", "--edit-post-steps", "2",
                 "--device", "cpu", "--trace", str(trace)]) == 0
    run = RunResult.load(trace)
    assert (run.settings["edit_threshold"], run.settings["edit_post_steps"]) == (0.0, 2)
    assert run.records[-1].edit_stop in (NO_CHANGE, BUDGET) and any(r.edit_seen_positions for r in run.records)
    assert main(["generate", "--model", str(path), "--prompt", "x", "--edit-threshold", "1.5", "--device", "cpu"]) != 0
    assert "edit_threshold must be in [0, 1], got 1.5" in capsys.readouterr().err


def test_a_recorded_editing_run_replays_from_its_trace():
    """A trace's decisions replayed as a script (forks of a loaded trace, `--script`): the edits follow from the
    predictions, so the replay makes the same edits and post-edit rounds."""
    from lopa.script import script_from_trace
    run = decode(FLIP, k=2, edit_threshold=0.9, edit_post_steps=2)
    loaded = RunResult.from_json(run.to_json())
    model = FakeDLLM(len(PROMPT), table_script(FLIP), shift=True)
    settings = DecodeSettings.from_dict(loaded.settings)
    again = Decoder(model, SPEC, settings, executor="uncached", script=script_from_trace(loaded)).run(PROMPT)
    assert again.tokens == run.tokens
    assert [(r.kind, recorded_edits(r), r.edit_stop) for r in again.records] == \
        [(r.kind, recorded_edits(r), r.edit_stop) for r in run.records]


@pytest.mark.parametrize("extra", [{"commit": rule, **({"confidence": "neg_entropy"} if rule == "eb" else {})}
                                   for rule in ("threshold", "top1", "eb", "factor", "frechet", "joint", "stable")]
                         + [{"order": "random"}, {"order": "adaptive"}, {"lookahead_depth": 3},
                            {"cache_schedule": "authors"}, {"attention": "full"}, {"temperature": 1.0}])
def test_editing_under_every_commit_rule_and_lookahead(extra):
    """A random tiny model at edit_threshold 0 edits under every commit rule, order and lookahead mechanics; every
    decode ends, and the trace checker re-derives its edits."""
    from tiny import LIVELY, tiny_qwen2, tiny_spec
    s = DecodeSettings(**{**LIVELY, "k": 2, "edit_threshold": 0.0, "edit_post_steps": 2, **extra})
    run = Decoder(tiny_qwen2(seed=3), tiny_spec(), s).run(torch.arange(3, 15))
    assert run.metrics()["edits"] > 0 and run.records[-1].edit_stop in (NO_CHANGE, BUDGET)
    assert MASK not in run.tokens
    back = RunResult.from_json(run.to_json())
    assert [recorded_edits(r) for r in back.records] == [recorded_edits(r) for r in run.records]


def test_done_waits_for_the_post_edit_rounds():
    """Decoder.done (what the app's stream reads to end a decode early) is true only once editing has settled:
    the sequence is complete before its post-edit rounds, which must still be streamed."""
    model = FakeDLLM(len(PROMPT), table_script(FLIP), shift=True)
    s = DecodeSettings(k=0, tau_conf=0.9, block_size=4, max_new_tokens=8, confidence="max_prob", edit_threshold=0.9,
                       edit_post_steps=2)
    decoder = Decoder(model, SPEC, s, executor="uncached")
    seen = [(record.kind, decoder.done) for record in decoder.stream(PROMPT)]
    assert seen[-1] == ("post", True) and [d for _, d in seen[:-1]] == [False] * (len(seen) - 1)
    assert any(kind == "round" for kind, _ in seen) and decoder.state.finished(s, SPEC)


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(edit_old=[]), "differ in length"),
    (lambda r: r.update(edit_stop="tired"), "edit_stop"),
    (lambda r: r.update(edit_positions=[9999]), "edit_positions"),
    (lambda r: r.update(edit_seen_max_prob=[1.5] * len(r["edit_seen_max_prob"])), "edit_seen_max_prob"),
])
def test_a_malformed_edit_field_is_refused_naming_it(change, message):
    data = json.loads(decode(ONE_EDIT, edit_threshold=0.9, edit_post_steps=3).to_json())
    change(next(r for r in data["records"] if r["edit_positions"]) if message != "edit_seen_max_prob"
           else next(r for r in data["records"] if r["edit_seen_positions"]))
    with pytest.raises(ValueError, match=message):
        RunResult.from_json(json.dumps(data))
