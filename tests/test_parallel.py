"""Branch parallelism: the multi-process backend against the single-process engine (style habit 8),
the two-phase cache's commit rule, and faults (a killed or hung rank becomes a clear, bounded error)."""

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist
from tiny import LIVELY, MASK_ID, decisions, save_tiny_model_dir, tiny_qwen2, tiny_spec

from lopa import Decoder, DecodeSettings
from lopa.blocks import Branch
from lopa.distributed.parallel import BPExecutor, Comm, commit_plan, dist_backend, kv_digest
from lopa.forward import BatchedExecutor
from lopa.models import load

pytestmark = [pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available"),
              pytest.mark.distributed, pytest.mark.timeout(300)]

PROMPT = torch.tensor([3, 14, 15, 16, 4, 5, 17, 13])
TIMEOUT_S = 5.0          # every collective; also bounds how long a hung rank goes unnoticed


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-bp"))


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load(model_dir, device="cpu")


@pytest.fixture(scope="module")
def groups(model_dir):
    from lopa.distributed.group import BPGroup
    made = {w: BPGroup.start(model_dir, workers=w, timeout_s=TIMEOUT_S, start_timeout_s=120) for w in (2, 3)}
    yield made
    for group in made.values():
        group.close()


def single(loaded, settings, prompt=PROMPT):
    decoder = Decoder(loaded.model, loaded.spec, settings, executor="batched")
    return decoder.run(prompt), decoder.executor


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- the commit rule, without processes ---------------------------------------------------------
def test_commit_plan_skips_the_broadcast_only_when_every_rank_holds_the_winners_slice():
    anchor = torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 4, MASK_ID, MASK_ID, MASK_ID])    # block 0 complete
    looks = [anchor.clone() for _ in range(3)]
    for j, p in enumerate((9, 10, 11)):
        looks[j][p] = 3
    windows = [anchor] + looks
    # block_causal: block 0 is the same in every branch, so every rank copies its own
    assert commit_plan(windows, 2, 8, "block_causal", 3) == {"local": [0, 0, 0]}
    # full: block 0 attended to block 1, which differs: the winner's rank broadcasts
    assert commit_plan(windows, 2, 8, "full", 3) == {"src": 2, "index": 0}
    # ... unless every rank computed the very same window (k + 1 < W: shadows of branch 0)
    assert commit_plan([anchor], 0, 8, "full", 3) == {"local": [0, 0, 0]}
    # the prompt alone (first round) attends only to itself ...
    assert commit_plan(windows, 3, 0, "full_prompt_blind", 2, with_prompt=True) == {"local": [0, 0]}
    # ... except in the authors' full attention, where it saw the window (the prefill has one branch)
    assert commit_plan(windows, 3, 0, "full", 2, with_prompt=True) == {"src": 1, "index": 1}
    assert commit_plan([anchor], 0, 0, "full", 2, with_prompt=True) == {"local": [0, 0]}
    assert commit_plan(windows, 3, 0, "full", 2) == {"local": [0, 0]}        # nothing cached this round
    # block_causal, but the winning lookahead completed block 0: only its rank holds the slice
    holey = anchor.clone()
    holey[3] = MASK_ID
    filled = holey.clone()
    filled[3] = 8
    other = holey.clone()
    other[9] = 3
    assert commit_plan([holey, filled, other], 1, 8, "block_causal", 2) == {"src": 1, "index": 0}


@pytest.mark.parametrize("attention", ["block_causal", "full", "full_prompt_blind"])
def test_cached_block_kv_agrees_across_branches_exactly_when_commit_plan_says(attention):
    """The proof behind skipping the commit phase, on real K/V: with block_causal attention the
    pre-written K/V of a complete block is the same in every branch that has the same tokens there
    (whatever follows); with full attention it is not; and a branch whose lookahead completed the
    block differs from the others in either mode."""
    model = tiny_qwen2(seed=1)
    settings = DecodeSettings(k=3, attention=attention, **LIVELY)
    ex = BatchedExecutor(model, tiny_spec(), settings)
    ex.start(PROMPT)
    ex.verify([Branch.start(settings, tiny_spec())])
    ex.commit(0, 0)
    tokens = torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 4, 7, MASK_ID, MASK_ID, MASK_ID, MASK_ID, MASK_ID, MASK_ID])
    anchor = Branch(tokens, 0, 8, MASK_ID)
    branches = [anchor] + [anchor.with_tokens(torch.tensor([p]), torch.tensor([3])) for p in (10, 12, 14)]

    def block0(j):                                  # every layer's K and V of block 0, branch j
        return ex.pending_kv(j, 8).flatten()

    ex.verify(branches)
    same = all(torch.allclose(block0(0), block0(j), atol=1e-6) for j in (1, 2, 3))
    plan = commit_plan([b.window() for b in branches], 2, 8, attention, 2)
    assert same == (attention == "block_causal") == ("local" in plan)

    holey = anchor.with_tokens(torch.tensor([3]), torch.tensor([MASK_ID]))
    filled = holey.with_tokens(torch.tensor([3]), torch.tensor([8]))
    ex.verify([holey, filled])
    assert not torch.allclose(block0(0), block0(1), atol=1e-6)
    assert "src" in commit_plan([holey.window(), filled.window()], 1, 8, attention, 2)


def test_hccl_without_torch_npu_is_a_clear_error():
    try:
        import torch_npu  # noqa: F401
        pytest.skip("torch_npu is installed")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="needs the torch_npu package"):
        dist_backend("npu")
    assert dist_backend("cpu") == "gloo"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_one_rank_reproduces_the_single_process_engine_even_when_sampling(loaded, temperature):
    settings = DecodeSettings(k=3, temperature=temperature, seed=7, **LIVELY)
    ref, _ = single(loaded, settings)
    bp = Decoder(None, loaded.spec, settings, executor=BPExecutor(loaded.model, loaded.spec, settings, Comm())).run(PROMPT)
    assert bp.tokens == ref.tokens and decisions(bp) == decisions(ref)
    assert bp.metrics()["device"] == ref.metrics()["device"] == "cpu"      # rank 0's, where the wall-clock ran


# -- W processes against one ----------------------------------------------------------------------
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("attention", ["block_causal", "full", "full_prompt_blind"])
def test_branch_parallel_equals_single_process(groups, loaded, world, attention):
    schedule = "authors" if attention == "full" else "eager"           # the paper's pairing
    settings = DecodeSettings(k=4, attention=attention, cache_schedule=schedule, **LIVELY)
    ref, ref_executor = single(loaded, settings)
    group = groups[world]
    bp = group.decoder(settings).run(PROMPT)

    assert bp.tokens == ref.tokens
    assert decisions(bp) == decisions(ref)
    for a, b in zip(bp.records, ref.records):
        assert a.branch_scores == pytest.approx(b.branch_scores, rel=1e-4, abs=1e-5)
    assert any(r.winner > 0 for r in bp.records)
    # every rank ends with the cache the single process built
    want = kv_digest(ref_executor.kv).tolist()
    for got in group.digests():
        assert got == pytest.approx(want, rel=1e-5, abs=1e-4)

    N, prev_cached, skipped = settings.block_size, 0, 0
    for r in bp.records:
        if r.kind == "final":
            continue
        assert r.branch_rank == [j % world for j in range(len(r.branch_tokens))]
        x = r.extra
        assert {"forward_s", "gather_s", "commit_s", "bytes", "full_logits_bytes"} <= set(x)
        assert len(x["rank_forward_s"]) == world and 0 < x["bytes"]
        assert x["summary_bytes"] < x["full_logits_bytes"]
        # the commit phase is skipped exactly when the module docstring says it can be
        cached_now = r.n_cached_blocks - prev_cached
        if attention != "block_causal":
            expect = cached_now > 0 and len(r.branch_tokens) > 1
        else:
            look = r.lookahead_positions[r.winner - 1] if r.winner > 0 else None
            expect = look is not None and look < r.n_cached_blocks * N and cached_now > 0
        assert x["commit_broadcast"] == expect, r.round
        assert x["commit_bytes"] > 0 if expect else x["commit_bytes"] == 0
        skipped += cached_now > 0 and not expect
        prev_cached = r.n_cached_blocks
    assert attention != "block_causal" or skipped > 0


@pytest.mark.parametrize("attention", ["block_causal", "full"])
def test_branch_parallel_equals_single_process_with_lookahead_chains(groups, loaded, attention):
    """lookahead_depth > 1 spreads every prefix row over the ranks; the decode is the single process's,
    chains, cuts and the cache included."""
    settings = DecodeSettings(k=3, lookahead_depth=3, attention=attention, **LIVELY)
    ref, ref_executor = single(loaded, settings)
    group = groups[2]
    bp = group.decoder(settings).run(PROMPT)
    assert bp.tokens == ref.tokens and decisions(bp) == decisions(ref)
    assert [(r.chain_kept, r.winner) for r in bp.records] == [(r.chain_kept, r.winner) for r in ref.records]
    assert any(len(r.branch_tokens) > settings.k + 1 for r in bp.records)
    want = kv_digest(ref_executor.kv).tolist()
    for got in group.digests():
        assert got == pytest.approx(want, rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("attention", ["block_causal", "full"])
def test_branch_parallel_edits_as_the_single_process(groups, loaded, attention):
    """Token editing reads the winner's predictions over its whole window, which the ranks gather as they do the
    masked positions': the edits, post-edit rounds and the cache are the single process's."""
    settings = DecodeSettings(k=3, edit_threshold=0.0, edit_post_steps=2, attention=attention, **LIVELY)
    prompt = torch.arange(3, 15)                  # a prompt on which the tiny model edits
    ref, ref_executor = single(loaded, settings, prompt)
    bp = groups[2].decoder(settings).run(prompt)
    assert ref.metrics()["edits"] > 0
    assert bp.tokens == ref.tokens and decisions(bp) == decisions(ref)
    assert [(r.kind, r.edit_positions, r.edit_tokens, r.edit_stop) for r in bp.records] == \
        [(r.kind, r.edit_positions, r.edit_tokens, r.edit_stop) for r in ref.records]
    want = kv_digest(ref_executor.kv).tolist()
    for got in groups[2].digests():
        assert got == pytest.approx(want, rel=1e-5, abs=1e-4)


def test_sampling_is_reproducible_per_world_size(groups):
    settings = DecodeSettings(k=3, temperature=1.0, seed=3, **LIVELY)
    a = groups[2].decoder(settings).run(PROMPT)
    b = groups[2].decoder(settings).run(PROMPT)
    assert a.tokens == b.tokens and decisions(a) == decisions(b)


def test_a_run_superseded_by_another_on_the_same_group_fails_clearly(groups, loaded):
    settings = DecodeSettings(k=3, **LIVELY)
    first = groups[2].decoder(settings).stream(PROMPT)
    next(first)
    assert groups[2].decoder(settings).run(PROMPT).tokens == single(loaded, settings)[0].tokens
    with pytest.raises(RuntimeError, match="another run started"):
        next(first)


def test_a_group_started_and_used_from_another_thread_works(model_dir, loaded):
    """As from a Gradio worker thread: start, decode, close, all off the main thread."""
    import threading

    from lopa.distributed.group import BPGroup
    settings, out = DecodeSettings(k=3, **LIVELY), {}

    def work():
        with BPGroup.start(model_dir, workers=2, timeout_s=TIMEOUT_S) as group:
            out["tokens"] = group.decoder(settings).run(PROMPT).tokens

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=120)
    assert out["tokens"] == single(loaded, settings)[0].tokens


# -- faults -------------------------------------------------------------------------------------
def launcher_children() -> list[int]:
    from lopa.distributed import ranks as bp_ranks
    pid = bp_ranks.Launcher.current.proc.pid
    return [int(p) for p in open(f"/proc/{pid}/task/{pid}/children").read().split()]


# A hung rank is detected by the group's answer timeout (TIMEOUT_S), which "stopped answering" names; that
# it arrives at all is the bound (the module's pytest timeout catches a hang). How long it takes is not
# asserted: a busy machine stretches it.
@pytest.mark.parametrize("fault, cause", [
    (signal.SIGKILL, r"rank 2 \(pid \d+\) was killed by SIGKILL"),
    (signal.SIGSTOP, r"rank 1 \(pid \d+\) stopped answering"),
])
def test_a_killed_or_hung_rank_is_a_clear_bounded_error_and_the_next_run_works(groups, loaded, fault, cause):
    group = groups[3]
    settings = DecodeSettings(k=4, **LIVELY)
    decoder = group.decoder(settings)
    stream = decoder.stream(PROMPT)
    next(stream)
    pids = dict(group.pids)
    os.kill(pids[2 if fault == signal.SIGKILL else 1], fault)
    with pytest.raises(RuntimeError, match=cause):
        list(stream)
    assert not group.running and all(gone(pid) for pid in pids.values())
    assert set(launcher_children()).isdisjoint(pids.values())
    # the same group object starts fresh ranks for the next run
    again = group.decoder(settings).run(PROMPT)
    assert again.tokens == single(loaded, settings)[0].tokens
    assert group.running and set(group.pids.values()).isdisjoint(pids.values())


def test_a_rank_that_dies_between_runs_is_replaced_quietly(groups, loaded):
    group = groups[2]
    settings = DecodeSettings(k=2, **LIVELY)
    group.decoder(settings).run(PROMPT)
    old = dict(group.pids)
    os.kill(old[1], signal.SIGKILL)
    time.sleep(0.5)                                   # the launcher reaps it
    assert group.decoder(settings).run(PROMPT).tokens == single(loaded, settings)[0].tokens
    assert "rank 1 was killed by SIGKILL" in group.last_failure and all(gone(p) for p in old.values())


# -- the command line -----------------------------------------------------------------------------
def cli_answer(capsys, argv):
    from lopa.cli import main
    assert main(argv) == 0
    out = capsys.readouterr().out
    return out.split("\n\nmodel: ")[0], out


def test_cli_bp_backend_prints_the_single_process_answer(model_dir, capsys):
    argv = ["generate", "--model", str(model_dir), "--prompt", "how many apples does Tom have ?", "--k", "3",
            "--max-new-tokens", "16", "--device", "cpu"]
    single_answer, _ = cli_answer(capsys, argv)
    bp_answer, out = cli_answer(capsys, argv + ["--backend", "bp", "--workers", "2", "--bp-timeout", "20"])
    assert bp_answer == single_answer and "x 2 ranks" in out


@pytest.mark.slow                    # starts torchrun (~20 s); deselect with -m "not slow"
def test_torchrun_launch_prints_the_single_process_answer(model_dir, capsys, tmp_path):
    import subprocess
    import sys
    argv = ["generate", "--model", str(model_dir), "--prompt", "how many apples does Tom have ?", "--k", "3",
            "--max-new-tokens", "16", "--device", "cpu"]
    single_answer, _ = cli_answer(capsys, argv)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(__import__("lopa").__path__[0] + "/.."))
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                          "-m", "lopa", *argv, "--backend", "bp"], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n\nmodel: ")[0] == single_answer and "x 3 ranks (gloo)" in run.stdout


# -- last: it also stops the shared launcher ---------------------------------------------------------
def test_close_leaves_nothing_running(model_dir):
    from lopa.distributed import ranks as bp_ranks
    from lopa.distributed.group import BPGroup, stop_launcher
    with BPGroup.start(model_dir, workers=2, timeout_s=TIMEOUT_S) as group:
        group.decoder(DecodeSettings(k=2, **LIVELY)).run(PROMPT)
        pids = list(group.pids.values())
    assert all(gone(pid) for pid in pids) and not group.running
    with pytest.raises(RuntimeError, match="closed"):
        group.decoder(DecodeSettings(**LIVELY))
    launcher = bp_ranks.Launcher.current.proc
    assert set(launcher_children()).isdisjoint(pids)
    stop_launcher()
    assert launcher.poll() is not None


def test_every_executor_speaks_one_protocol_and_distributed_uses_no_private_executor_methods():
    """The engine's three verbs are one protocol; the branch-parallel executors implement it and
    reuse the local executor's public helpers only (style: 'never private methods of it')."""
    import re
    from pathlib import Path

    from lopa.distributed.group import RemoteExecutor
    from lopa.forward import Executor, PerBranchExecutor, UncachedExecutor
    for cls in (BatchedExecutor, PerBranchExecutor, UncachedExecutor, BPExecutor, RemoteExecutor):
        assert all(callable(getattr(cls, verb, None)) for verb in ("start", "verify", "commit")), cls
    assert isinstance(BPExecutor.__new__(BPExecutor), Executor)
    package = Path(__file__).resolve().parent.parent / "lopa" / "distributed"
    files = sorted(package.glob("*.py"))
    assert files, package                       # an empty glob would pass the check below vacuously
    private = [f"{f.name}: {m.group(0)}" for f in files
               for m in re.finditer(r"\b(?:ex|executor)\._[a-z]\w*", f.read_text())]
    assert not private, private


def test_prefix_commit_is_one_append_of_the_pending_slice():
    """PrefixKV.commit (local) and a broadcast slice (remote) go through the same append."""
    from lopa.kv import PrefixKV
    a, b = PrefixKV(16), PrefixKV(16)
    for kv in (a, b):
        kv.prefix(0, torch.zeros(1, 2, 1, 4))
    pending = torch.arange(3 * 2 * 5 * 4, dtype=torch.float32).view(3, 2, 5, 4)      # [B, Hkv, L, D]
    for kv in (a, b):
        kv.prewrite(0, pending, -pending)
    a.commit(1, 3)
    pending_slice = b.pending_slice(1, 3)
    b.append(pending_slice)
    assert pending_slice.shape == (1, 2, 2, 3, 4)
    assert torch.equal(a.keys[0], b.keys[0]) and torch.equal(a.values[0], b.values[0]) and a.length == b.length == 3
    assert torch.equal(a.keys[0][0, :, :3], pending[1, :, :3]) and not a.pending
