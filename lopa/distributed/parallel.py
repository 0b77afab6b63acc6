"""Branch parallelism (BP): one round's k + 1 branches spread over R processes (ranks), each holding a
full model replica, in a torch.distributed group (design note, "Branch parallelism").

Who does what
- Rank 0 drives. It runs the unchanged Decoder loop with a `BPExecutor`, which speaks the engine's
  three verbs (start / verify / commit) by sending control messages to ranks 1..R-1 and doing its
  own share of the forward work.
- Every rank holds a `Shard`: a BatchedExecutor (one batched forward over the rank's branches,
  shared-prefix attention) with its own PrefixKV. Ranks 1..R-1 run `serve()`.
- Launch: `torchrun ... -m lopa generate --backend bp` (see lopa.distributed.launch), or a persistent group
  for long-lived callers such as the app: `lopa.distributed.group.BPGroup` (its docstring has the API).

Protocol: rank 0 -> all, pickled, on a gloo control group; every wait has the group's timeout.
    ("start", settings, prompt_ids)    each shard starts a fresh cache
    ("verify", windows, window_start)  every branch's window (token ids, ~8 bytes a position);
        each rank computes its own branches, then ONE all_gather of per-position summaries:
        token (argmax, or sampled), max_prob and Conf as float32 [B/R, 3, L], plus its forward time
    ("commit", n, plan)                the winner's first n input positions join every cache;
        plan["src"] set: a broadcast of the winner's K/V slice [layers, 2, Hkv, n, D] from its rank
    ("ping",) + a 1-float all_gather   liveness check while idle; keeps idle waits from timing out
    ("digest",) + all_gather           a checksum of every rank's cache (tests)
    ("stop",)
Full [positions x V] logits never leave a rank: per round rank 0 receives about
12 bytes x (k + 1) x W_window instead of 2-4 bytes x (k + 1) x W_window x V (extra["full_logits_bytes"]).

Branch j runs on rank j % R, at local batch index j // R. A rank with no branch (k + 1 < R; the
prefill) runs a *shadow* copy of branch 0: nothing of it is gathered, but it pre-writes K/V, so the
prompt's K/V never needs a broadcast.

Two-phase cache. Each rank pre-writes its own branches' window K/V during the forward; at commit,
a rank copies the slice from a branch it computed if that slice provably equals the winner's, else
the winner's rank broadcasts it and everyone overwrites. `commit_plan` decides:
- block_causal: K/V of window blocks [0, n/N) depends only on the prefix and those blocks' tokens,
  so any branch whose first n tokens equal the winner's holds the same slice. The anchor and every
  losing lookahead agree with the winner there, except when the winning lookahead token itself lies
  in a block being cached (it completed that block): then only the winner's rank holds the slice and
  the commit phase is NOT skipped. (tests/test_parallel.py shows both cases.)
- full, full_prompt_blind: a cached block attends to the whole window, so only an identical window
  (a shadow of the winner, or the anchor when it wins) holds the slice; otherwise broadcast. In
  `full` the prompt, cached from the prefill, saw the first window too: the prefill has one branch,
  so every rank computed it (or its shadow) and the check still skips the broadcast.

Sampling (temperature > 0): the rank that computes a branch samples it, with its own generator
seeded `rank_seed(seed, rank)` at every start; rank 0 uses `seed` itself, so R = 1 reproduces the
single-process engine exactly, while R > 1 draws different (equally valid) samples. At temperature 0
every R gives the single-process tokens and decisions.
"""

from __future__ import annotations

import pickle
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from lopa.blocks import Branch
from lopa.forward import BatchedExecutor, Verified, boundary_rows, window_predictions
from lopa.graphs import MAX_EXACT_TOKEN
from lopa.kv import PrefixKV
from lopa.settings import DecodeSettings, ModelSpec

SEED_STRIDE = 1_000_003      # rank r samples with seed + r * SEED_STRIDE (rank 0: the seed itself)


def rank_seed(seed: int, rank: int) -> int:
    return seed + rank * SEED_STRIDE


def assigned(rank: int, world: int, n_branches: int) -> list[int]:
    """Global indices of the branches `rank` computes, in local batch order (shadow: [0])."""
    return list(range(rank, n_branches, world)) or [0]


def dist_backend(device_type: str) -> str:
    """The collective backend for a device type; a clear error when it cannot work here."""
    if device_type == "cpu":
        if not dist.is_gloo_available():
            raise RuntimeError("branch parallelism on CPU needs gloo, which this torch build lacks")
        return "gloo"
    if device_type == "cuda":
        if not dist.is_nccl_available():
            raise RuntimeError("branch parallelism on CUDA needs NCCL, which this torch build lacks")
        return "nccl"
    if device_type == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the npu device and the hccl backend)
        except ImportError:
            raise RuntimeError("branch parallelism on Ascend uses HCCL, which needs the torch_npu package "
                               "(pip install torch-npu, matching your torch and CANN versions)") from None
        return "hccl"
    raise ValueError(f"no branch-parallel backend for device type {device_type!r} (cpu, cuda or npu)")


class Comm:
    """The few collectives BP needs. world == 1 needs no process group: every call is local."""

    def __init__(self, rank: int = 0, world: int = 1, device: torch.device | str = "cpu",
                 data_group=None, ctrl_group=None):
        self.rank, self.world, self.device = rank, world, torch.device(device)
        self.data_group, self.ctrl_group = data_group, ctrl_group

    @classmethod
    def init(cls, device, timeout_s: float, start_timeout_s: float, init_method: str = "env://",
             rank: int | None = None, world: int | None = None) -> Comm:
        """Join the default group (rendezvous waits up to start_timeout_s, e.g. for slow model loads),
        then make the working groups with the shorter per-collective timeout_s. Control messages
        always travel on gloo (CPU): timeouts there raise instead of aborting the process as NCCL's do."""
        device = torch.device(device)
        backend = dist_backend(device.type)
        kwargs = {} if rank is None else {"rank": rank, "world_size": world}
        dist.init_process_group(backend, init_method=init_method, timeout=timedelta(seconds=start_timeout_s), **kwargs)
        timeout = timedelta(seconds=timeout_s)
        data = dist.new_group(backend=backend, timeout=timeout)
        ctrl = data if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
        return cls(dist.get_rank(), dist.get_world_size(), device, data, ctrl)

    def send_control(self, message: tuple) -> int:
        """Rank 0: pickle and broadcast a control message. Returns its size in bytes."""
        payload = pickle.dumps(message)
        if self.world > 1:
            size = torch.tensor([len(payload)], dtype=torch.long)
            dist.broadcast(size, 0, group=self.ctrl_group)
            dist.broadcast(torch.frombuffer(bytearray(payload), dtype=torch.uint8), 0, group=self.ctrl_group)
        return len(payload)

    def recv_control(self) -> tuple:
        """Ranks 1..R-1: the next control message. Only rank 0 of our own group ever sends one."""
        size = torch.zeros(1, dtype=torch.long)
        dist.broadcast(size, 0, group=self.ctrl_group)
        payload = torch.empty(int(size), dtype=torch.uint8)
        dist.broadcast(payload, 0, group=self.ctrl_group)
        return pickle.loads(payload.numpy().tobytes())

    def all_gather(self, flat: torch.Tensor) -> torch.Tensor:
        """[n] from every rank -> [world, n] (same n everywhere)."""
        if self.world == 1:
            return flat[None]
        out = flat.new_empty(self.world * flat.numel())
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor   # renamed in 2.1x
        gather(out, flat.contiguous(), group=self.data_group)
        return out.view(self.world, -1)

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        if self.world > 1:
            dist.broadcast(tensor, src, group=self.data_group)
        return tensor

    def close(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


# -- pure helpers -----------------------------------------------------------------------------
def commit_plan(windows: list[torch.Tensor], winner: int, n_positions: int, attention: str, world: int,
                with_prompt: bool = False) -> dict:
    """Where each rank gets the slice to cache (see the module docstring for why).
    windows: every branch's window [W_j]; n_positions: window positions being cached; with_prompt:
    the prompt is cached too (the prefill).
    -> {"local": [local batch index per rank]} when every rank holds an equal slice (no broadcast),
       else {"src": winner's rank, "index": winner's local index}."""
    def same(j: int) -> bool:
        if n_positions == 0 and (not with_prompt or attention != "full"):
            return True                  # nothing cached, or only a prompt that saw itself alone
        a, b = windows[j], windows[winner]
        if attention == "block_causal":
            return torch.equal(a[:n_positions], b[:n_positions])
        return torch.equal(a, b)

    local = []
    for r in range(world):
        mine = assigned(r, world, len(windows))
        hit = next((i for i, j in enumerate(mine) if same(j)), None)
        if hit is None:
            return {"src": winner % world, "index": winner // world}
        local.append(hit)
    return {"local": local}


def kv_digest(kv: PrefixKV) -> torch.Tensor:
    """[5] float64: length and sums / abs sums of the cached keys and values (cache equality checks)."""
    parts = [float(kv.length)]
    for store in (kv.keys, kv.values):
        t = torch.stack([x[:, :, :kv.length].double() for _, x in sorted(store.items())]) if store else torch.zeros(1)
        parts += [float(t.sum()), float(t.abs().sum())]
    return torch.tensor(parts, dtype=torch.float64)


# -- one rank's share ---------------------------------------------------------------------------
class Shard:
    """One rank's branches in one batched forward, over its own prefix cache. Its methods are the
    control verbs, run by every rank alike (rank 0 right after broadcasting the message), each
    with plain arguments as they arrive and each ending in its collective."""

    VERBS = ("start", "verify", "commit", "ping", "digest")

    def __init__(self, model, spec: ModelSpec, comm: Comm):
        self.model, self.spec, self.comm = model, spec, comm
        self.ex: BatchedExecutor | None = None

    def start(self, settings: dict, prompt_ids: list[int]) -> None:
        self.settings = DecodeSettings.from_dict(settings)
        self.ex = BatchedExecutor(self.model, self.spec, self.settings)
        self.ex.generator.manual_seed(rank_seed(self.settings.seed, self.comm.rank))
        self.ex.start(torch.tensor(prompt_ids, dtype=torch.long))

    @torch.no_grad()
    def verify(self, windows: list[list[int]], window_start: int) -> torch.Tensor:
        """Forward this rank's branches, then all_gather every rank's packed summaries.
        -> [world, 1 + ceil(B/R) * 3 * L'] float32 (element 0: forward seconds). L' = L - lo drops
        prompt rows no prediction needs."""
        t0 = time.perf_counter()
        rank, world = self.comm.rank, self.comm.world
        windows = [torch.tensor(w, dtype=torch.long) for w in windows]
        mine = assigned(rank, world, len(windows))
        logits, q0 = self.ex.forward_windows(windows, window_start, rows=mine,
                                             keep_from=self.ex.first_read_row())   # [b, L, V]
        self.logits_shape, self.logits_itemsize = tuple(logits.shape), logits.element_size()
        lo = max(q0 - 1, 0)                                                   # first row any prediction uses
        n_slots = -(-len(windows) // world)
        body = torch.zeros(n_slots, 3, logits.shape[1] - lo, dtype=torch.float32, device=logits.device)
        if rank < len(windows):                                               # a shadow sends nothing real
            token, max_prob, conf = self.ex.summarize(logits)                 # 3 x [b, L]
            assert logits.shape[-1] <= MAX_EXACT_TOKEN, "vocabulary too large for float32 token ids"
            body[:len(mine)] = torch.stack([token.float(), max_prob.float(), conf.float()], dim=1)[..., lo:]
        seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float32, device=logits.device)
        return self.comm.all_gather(torch.cat([seconds, body.flatten()]))

    @torch.no_grad()
    def commit(self, n_input: int, plan: dict) -> int:
        """Cache the first n_input input positions of the winner. Returns bytes broadcast."""
        kv, rank = self.ex.kv, self.comm.rank
        self.ex.prompt_cached = True
        if "local" in plan:
            kv.commit(plan["local"][rank], n_input)
            return 0
        payload = kv.pending_slice(plan["index"], n_input) if rank == plan["src"] else kv.empty_slice(n_input)
        self.comm.broadcast(payload.contiguous(), plan["src"])
        kv.append(payload)
        return payload.numel() * payload.element_size()

    def ping(self) -> None:
        """A liveness round trip (the persistent group's idle heartbeat)."""
        self.comm.all_gather(torch.zeros(1, device=self.comm.device))

    def digest(self) -> torch.Tensor:
        """Every rank's kv_digest, [world, 5] (tests: all ranks must hold the same cache)."""
        digest = kv_digest(self.ex.kv) if self.ex is not None else torch.zeros(5, dtype=torch.float64)
        return self.comm.all_gather(digest.to(self.comm.device))


def serve(model, spec: ModelSpec, comm: Comm) -> None:
    """Ranks 1..R-1: run rank 0's control verbs by name until "stop". Errors propagate: a rank that
    fails exits, and its peers' next collective fails (or times out) instead of hanging."""
    shard = Shard(model, spec, comm)
    while True:
        verb, *args = comm.recv_control()
        if verb == "stop":
            return
        if verb not in Shard.VERBS:
            raise RuntimeError(f"unknown control message {verb!r}")
        getattr(shard, verb)(*args)


# -- rank 0: the executor the engine talks to ---------------------------------------------------
class BPExecutor:
    """The Executor protocol over a branch-parallel group. Lives on rank 0, next to the Decoder.

    Verified.ranks gives the rank of each branch; Verified.extra (copied into the trace) holds the
    round's forward_s (rank 0), rank_forward_s (every rank), gather_s, control_s, commit_s, the bytes
    rank 0 exchanged with its peers (control + summaries + commit broadcast) and full_logits_bytes,
    what gathering full logits would have cost instead. commit() adds its part to the same dict
    (`extra`), which the engine copies into the round's record after committing."""

    def __init__(self, model, spec: ModelSpec, settings: DecodeSettings, comm: Comm):
        allowed = spec.extra.get("executors")
        if allowed and "batched" not in allowed:
            raise ValueError(f"{spec.name} supports only the {'/'.join(allowed)} executor; branch parallelism "
                             "needs the batched one (a model that takes attention masks and the prefix cache)")
        self.spec, self.settings, self.comm = spec, settings, comm
        self.shard = Shard(model, spec, comm)
        self.extra: dict = {}

    def _run(self, verb: str, *args):
        """Broadcast a verb to the other ranks, then run it here. -> (message bytes, its result)"""
        size = self.comm.send_control((verb, *args))
        return size, getattr(self.shard, verb)(*args)

    def start(self, prompt_ids: torch.Tensor) -> None:
        self.prompt = prompt_ids.cpu()
        self.prompt_cached, self.boundary = False, None
        self._run("start", self.settings.to_dict(), self.prompt.tolist())

    def snapshot(self) -> None:
        return None                           # the caches live in every rank: a fork replays instead

    @torch.no_grad()
    def verify(self, branches: list[Branch]) -> Verified:
        t0 = time.perf_counter()
        world, B = self.comm.world, len(branches)
        self._windows = [b.window() for b in branches]
        control_bytes = self.comm.send_control(("verify", [w.tolist() for w in self._windows], branches[0].window_start))
        t1 = time.perf_counter()
        gathered = self.shard.verify([w.tolist() for w in self._windows], branches[0].window_start).cpu()
        t3 = time.perf_counter()                                               # [world, 1 + slots * 3 * L']
        t2 = t1 + float(gathered[0, 0])                                        # rank 0's own forward ended
        self._q0 = 0 if self.prompt_cached else self.prompt.numel()
        lo = max(self._q0 - 1, 0)
        body = gathered[:, 1:].reshape(world, -(-B // world), 3, -1)          # [world, slots, 3, L']
        rows = torch.stack([body[j % world, j // world] for j in range(B)])   # [B, 3, L']
        rows = (rows[:, 0].long(), rows[:, 1], rows[:, 2])
        self._last = (rows, self._q0 - lo)
        lengths = [w.numel() for w in self._windows]
        token, max_prob, conf = (window_predictions(r, self._q0 - lo, max(lengths), self.spec.logit_shift,
                                                    self.boundary[i] if self.boundary else None)
                                 for i, r in enumerate(rows))
        V, itemsize = self.shard.logits_shape[-1], self.shard.logits_itemsize
        peers = world - 1
        packed_bytes = gathered.shape[1] * gathered.element_size()
        summary_bytes = peers * packed_bytes
        self.extra = {
            "world": world, "forward_s": t2 - t1, "rank_forward_s": gathered[:, 0].tolist(),
            "control_s": t1 - t0, "gather_s": t3 - t2, "commit_s": 0.0,
            "control_bytes": peers * control_bytes, "summary_bytes": summary_bytes, "commit_bytes": 0,
            "bytes": peers * control_bytes + summary_bytes, "commit_broadcast": False,
            "full_logits_bytes": peers * -(-B // world) * self.shard.logits_shape[1] * V * itemsize,
        }
        return Verified(token, max_prob, conf, lengths, time.perf_counter() - t0,
                        ranks=[j % world for j in range(B)], extra=self.extra)

    def commit(self, winner: int, n_positions: int) -> None:
        t0 = time.perf_counter()
        rows, q0 = self._last
        self.boundary = boundary_rows(rows, q0, winner, n_positions, self.boundary)
        n_input = self._q0 + n_positions
        plan = commit_plan(self._windows, winner, n_positions, self.settings.attention, self.comm.world,
                           with_prompt=not self.prompt_cached)
        control_bytes, sent = self._run("commit", n_input, plan)
        self.prompt_cached = True
        peers = self.comm.world - 1
        self.extra.update(commit_s=time.perf_counter() - t0, commit_bytes=sent, commit_broadcast="src" in plan,
                          control_bytes=self.extra["control_bytes"] + peers * control_bytes,
                          bytes=self.extra["bytes"] + peers * control_bytes + sent)

    # -- group management ----------------------------------------------------------------------
    def digests(self) -> list[list[float]]:
        """Every rank's kv_digest, rank order (for tests: all ranks must hold the same cache)."""
        return self._run("digest")[1].cpu().tolist()

    def shutdown(self) -> None:
        self.comm.send_control(("stop",))

    def cache_nbytes(self) -> int:
        return self.shard.ex.kv.nbytes()


def ping(comm: Comm) -> None:
    """A liveness round trip without an executor (the persistent group's idle heartbeat)."""
    comm.send_control(("ping",))
    Shard(None, None, comm).ping()
