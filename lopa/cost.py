"""What a verify round costs on the device that runs it: the timing of verify forwards (verify_samples,
which lopa.tasks.timing.forward_times and the benchmarks take too) and the adaptive order's cost curve
(cost_curve), the seconds of a round with b = 0 .. k lookahead branches that lopa.rules.choose_k weighs.

settings.cost_curve picks the curve (docs/method.md, "The adaptive order"):
- measured (the default): a few timed verify forwards through the executor the decode uses, B = 1 + b * d
  rows (d = lookahead_depth) of two-block windows behind a synthetic prompt, each branch's token in the
  window's first block (it then feeds the whole window: the dearest placement, and where the least-confident
  proposal puts 70% of its branches on the bundled model, docs/studies.md section 3), the fastest of
  MEASURE_REPEATS sweeps made non-decreasing (monotone), plus the bookkeeping of a round (the median time
  outside the forward of a short vanilla decode). Measured once per process for each (model, device,
  dtype, torch threads, executor, block size, attention, k, depth) and kept in memory (CURVES): a second
  adaptive decode reuses it. Not kept on disk: a timing belongs to the machine's load and thread count at
  the time, and a curve costs a few tenths of a second to measure again.
- linear: 1 + branch_cost * b * d rounds of the anchor alone (lopa.order.linear_cost). Also the fallback
  wherever nothing can be timed: an executor other than a TIMED_EXECUTORS name (the per_branch and uncached
  references, branch-parallel backends, an executor object), or a model that is not a transformers model
  (the tests' scripted fakes).

Shapes (notation in lopa/__init__.py): N block size, B rows (windows) in one forward.
"""

from __future__ import annotations

import statistics
import threading
import time
import weakref
from dataclasses import dataclass

import torch

from lopa.blocks import Branch
from lopa.forward import make_executor, release_executor
from lopa.order import linear_cost, linear_source
from lopa.settings import DecodeSettings, ModelSpec

# Named executors a measurement times (lopa.forward.EXECUTORS): the batched one (its fast path, lopa.fast,
# where the model allows) and its eager reference. The per_branch and uncached executors are references
# kept for equality tests, not what a run should be priced by.
TIMED_EXECUTORS = ("batched", "batched_eager")
MEASURE_REPEATS = 2          # sweeps after a warm-up; the study takes 5 (lopa.study.adaptive_fit.measure_cost)
MEASURE_SETTLE = 0.15        # more sweeps while the two fastest samples of a B differ by more than this ...
MEASURE_MAX_REPEATS = 4      # ... up to this many (a machine busier than that leaves a gap the source names),
MEASURE_BUDGET_S = 0.5       # ... while the timed sweeps so far took less than this
clock = time.perf_counter    # what times a verify (a test scripts it)
MEASURE_PREFIX = 64          # tokens of the synthetic prompt the windows are timed behind (a GSM prompt's length)


@dataclass(frozen=True)
class CostCurve:
    """seconds[b]: a round with b lookahead branches (b = 0 .. k), in seconds when measured, in rounds of
    the anchor alone when linear (choose_k reads only ratios); source: where it came from, in words."""
    seconds: tuple[float, ...]
    source: str


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so that a host clock times it (a CPU's work is already done)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def round_branches(B: int, settings: DecodeSettings, mask: int, vocab: int, where: str = "first") -> list[Branch]:
    """An all-mask two-block anchor window and B - 1 lookahead branches, each the anchor plus one token
    in its first block (`where="first"`: every branch feeds its whole window) or its last block
    (`"last"`: under block_causal attention a branch then feeds only that block, lopa.kv.Packing)."""
    N = settings.block_size
    anchor = Branch(torch.full((2 * N,), mask), 0, N, mask)                  # [2N] all masked
    at = 0 if where == "first" else N
    tokens = [t for t in range(min(vocab, B + 1)) if t != mask]                  # any B - 1 real tokens
    return [anchor] + [anchor.with_tokens(torch.tensor([at + j % N]), torch.tensor([tokens[j]])) for j in range(B - 1)]


def verify_samples(executor, spec: ModelSpec, vocab: int, prompt_ids: torch.Tensor, settings: DecodeSettings,
                   counts, repeats: int, where: str = "first", settle: float | None = None,
                   max_repeats: int = 0, budget_s: float = float("inf")) -> dict[int, list[float]]:
    """{B: `repeats` seconds of one verify forward over B two-block windows (round_branches)}, through
    `executor` (any Executor: it is started on prompt_ids and the prompt cached first). Every B is warmed up
    once, then the B are timed in the order of `counts`, `repeats` sweeps over: other work on the machine
    then spreads over all B instead of landing on one. A B listed twice is timed twice a sweep. settle:
    sweep on, up to max_repeats, while the two fastest samples of some B differ by more than this fraction
    (other work only ever adds time, so the fastest is the estimate, and two that agree make it credible)
    and the timed sweeps so far took less than budget_s (a machine too busy for that gets no more)."""
    executor.start(prompt_ids)
    executor.verify([Branch.start(settings, spec)])
    executor.commit(0, 0)                                    # the prompt is now the cached prefix
    device = getattr(executor, "device", torch.device("cpu"))
    rows = {B: round_branches(B, settings, spec.mask_token_id, vocab, where) for B in counts}
    for branches in rows.values():
        executor.verify(branches)                            # warm-up
    samples = {B: [] for B in rows}
    sweeps, began = 0, time.perf_counter()
    while sweeps < repeats or (settle is not None and sweeps < max_repeats and gap(samples) > settle
                               and time.perf_counter() - began < budget_s):
        sweeps += 1
        for B in counts:
            sync(device)
            t0 = clock()
            executor.verify(rows[B])
            sync(device)
            samples[B].append(clock() - t0)
    release_executor(executor)           # the static buffers it timed (lopa.graphs) now serve the decode
    return samples


def gap(samples: dict[int, list[float]]) -> float:
    """The largest relative difference between the two fastest samples of any B (0 with one sample)."""
    gaps = [b / a - 1 for a, b in (sorted(times)[:2] for times in samples.values() if len(times) > 1)]
    return max(gaps, default=0.0)


def monotone(y: list[float]) -> list[float]:
    """The closest non-decreasing curve to y in least squares (pool adjacent violators): a timing spike
    is averaged with its neighbours, and more branches never cost less than fewer."""
    blocks = []                                     # [sum, count] of pooled runs
    for v in y:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, n = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += n
    return [total / n for total, n in blocks for _ in range(n)]


def synthetic_prompt(spec: ModelSpec, vocab: int, settings: DecodeSettings) -> torch.Tensor:
    """[P] MEASURE_PREFIX token ids that are not the mask token (what they say does not change a timing),
    fewer where the context leaves no room for them and the decode's tokens."""
    room = max(1, min(MEASURE_PREFIX, spec.max_context - settings.max_new_tokens))
    ids = torch.arange(room) % max(vocab - 1, 1)                             # [P]
    return ids + (ids >= spec.mask_token_id).long()                          # skip the mask id


def bookkeeping_seconds(decode, model, spec: ModelSpec, settings: DecodeSettings, prompt: torch.Tensor,
                        executor) -> float:
    """The median seconds of a round outside its forward (anchor, scoring, records), over the rounds of a
    vanilla decode of two blocks behind `prompt`. decode: lopa.engine.decode (passed in: the engine
    builds its order from this module)."""
    short = settings.replace(k=0, order="confidence", max_new_tokens=2 * settings.block_size)
    run = decode(model, spec, short, prompt, executor=executor)
    outside = [r.round_seconds - r.forward_seconds for r in run.records if r.kind == "round"]
    return statistics.median(outside) if outside else 0.0


def verify_curve(model, spec: ModelSpec, settings: DecodeSettings, executor: str) -> tuple[list[float], int, float]:
    """(seconds of a verify forward over B = 1 + b * d rows for b = 0 .. k, d = lookahead_depth, through the
    executor named `executor` (lopa.forward.EXECUTORS); the sweeps taken; the gap left between the two
    fastest samples of a B). The fastest of MEASURE_REPEATS sweeps, more (up to MEASURE_MAX_REPEATS) while
    they disagree by more than MEASURE_SETTLE, made monotone. B = 1 is timed at both ends of a sweep: every
    ratio the budget reads is over it, and one slow sample of it would make every branch look cheap."""
    vocab = model.config.vocab_size
    counts = [1 + b * settings.lookahead_depth for b in range(settings.k + 1)]
    with torch.no_grad():
        samples = verify_samples(make_executor(executor, model, spec, settings), spec, vocab,
                                 synthetic_prompt(spec, vocab, settings), settings,
                                 [*counts, 1] if len(counts) > 1 else counts, MEASURE_REPEATS,
                                 settle=MEASURE_SETTLE, max_repeats=MEASURE_MAX_REPEATS, budget_s=MEASURE_BUDGET_S)
    return monotone([min(samples[B]) for B in counts]), len(samples[counts[-1]]), gap(samples)


def measure(model, spec: ModelSpec, settings: DecodeSettings, executor: str, decode, timed=None) -> CostCurve:
    """The measured curve (module docstring): verify(1 + b * d rows) + bookkeeping for b = 0 .. k. timed:
    (model, spec) whose verify forwards are timed instead of the decode's own, with the decode's bookkeeping
    (lopa.bench.replay prices a small model's decisions at a large model's shape)."""
    t0 = time.perf_counter()
    timed_model, timed_spec = timed or (model, spec)
    verify, sweeps, left = verify_curve(timed_model, timed_spec, settings, executor)
    with torch.no_grad():
        prompt = synthetic_prompt(spec, model.config.vocab_size, settings)
        bookkeeping = bookkeeping_seconds(decode, model, spec, settings, prompt,
                                          make_executor(executor, model, spec, settings))
    took = time.perf_counter() - t0
    shape = f", timing {timed_spec.name}," if timed else ""
    return CostCurve(tuple(t + bookkeeping for t in verify),
                     f"measured on {device_words(timed_model)}{shape} in {took * 1e3:.0f} ms ({sweeps} sweeps of "
                     f"{len(verify)} verify forwards through the {executor} executor, the two fastest within "
                     f"{left:.0%}; bookkeeping {bookkeeping * 1e3:.2f} ms a round)")


def device_words(model) -> str:
    """The device, dtype and thread count a measurement ran with: "cpu, float32, 1 thread"."""
    parameter = next(model.parameters())
    device = parameter.device
    name = f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)
    threads = torch.get_num_threads()
    return f"{name}, {str(parameter.dtype).removeprefix('torch.')}" + (
        f", {threads} thread{'s' * (threads > 1)}" if device.type == "cpu" else "")


def untimeable(model, executor) -> str | None:
    """Why no curve can be measured for `model` under `executor`, or None when one can."""
    from transformers import PreTrainedModel
    if not isinstance(executor, str):                        # a branch-parallel group's, a fork's snapshot
        return f"the {type(executor).__name__} executor is not timed here"
    if not isinstance(model, PreTrainedModel):
        return f"{type(model).__name__} is not a transformers model"
    if executor not in TIMED_EXECUTORS:
        return f"the {executor} executor is a reference, not timed"
    return None


def linear_curve(settings: DecodeSettings, why: str = "") -> CostCurve:
    """The linear cost model (lopa.order.linear_cost) as a curve; `why`: why it stands in for a measured one."""
    return CostCurve(tuple(linear_cost(settings)), linear_source(settings) + (f" ({why})" if why else ""))


# In-memory cache: {model: {key: CostCurve}}; a model's curves go with the model (weak keys).
CURVES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()          # one measurement at a time: two at once would time each other


def curve_key(model, spec: ModelSpec, settings: DecodeSettings, executor: str) -> tuple:
    """What a measured curve depends on besides the model object: device, dtype, threads, executor, shape."""
    return (device_words(model), spec.name, executor, settings.block_size, settings.attention, settings.k,
            settings.lookahead_depth)


def cost_curve(model, spec: ModelSpec, settings: DecodeSettings, executor, decode) -> CostCurve | None:
    """The curve a decode with these settings prices its branches by: None unless order = adaptive with
    k >= 1; linear when settings.cost_curve asks for it or nothing can be timed (untimeable); else the
    measured one, from CURVES when this process measured it already. executor: the decode's (a name or an
    object); decode: lopa.engine.decode, which measures the bookkeeping."""
    if settings.order != "adaptive" or settings.k == 0:
        return None
    if settings.cost_curve == "linear":
        return linear_curve(settings)
    why = untimeable(model, executor)
    if why:
        return linear_curve(settings, why)
    key = curve_key(model, spec, settings, executor)
    with _LOCK:
        curves = CURVES.setdefault(model, {})
        if key not in curves:
            curves[key] = measure(model, spec, settings, executor, decode)
        return curves[key]


# -- what a run used, for the app and the CLI -----------------------------------------------------
def run_curve(settings: DecodeSettings, order: dict | None) -> tuple[list[float], str] | None:
    """(cost, source) of the curve a run's adaptive order priced its branches by: its trace's recorded
    order (RunResult.order), else the linear model of its settings (a trace recorded before the curve was);
    None when the run's order is not adaptive."""
    while order is not None and order.get("name") != "adaptive":
        order = order.get("base")
    if order is not None:
        return list(order["cost"]), order.get("source", "")
    if settings.order != "adaptive" or settings.k == 0:
        return None
    return linear_cost(settings), linear_source(settings)


def curve_words(cost: list[float], source: str) -> str:
    """A cost curve in one line: "cost curve: measured on cpu, ... in 372 ms (...); a round with b = 0, 1, ...
    branches costs 1.00, 1.40, ... rounds without"."""
    shown = ", ".join(f"{c / cost[0]:.2f}" for c in cost[:8]) + (", ..." if len(cost) > 8 else "")
    return f"cost curve: {source or 'given'}; a round with b = 0, 1, ... branches costs {shown} rounds without"
