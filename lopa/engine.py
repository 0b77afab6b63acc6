"""The decoding loop: D2F pipelined blocks with LoPA lookahead branches (vanilla D2F is k = 0).

One round, as in the paper (Sec. 3; design note "One LoPA round"):
    anchor -> lookahead -> block management -> verify (one batched forward) -> score -> select
    -> commit -> record, after an edit phase when token editing is on (lopa/editing.py).
The winner's predictions from the verify forward feed the next round's anchor, so there is
exactly one forward per round. Which positions the anchor and the lookahead take (the token
filling order) is an order policy's decision (lopa/order.py); forks resume from saved states. The loop yields a RoundRecord per round; everything else (CLI,
benchmarks, app) consumes those.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import count

import torch

from lopa.blocks import CACHE_SCHEDULES, Branch
from lopa.chains import candidate_rows, chain_plan, kept_lengths, plan_branches
from lopa.cost import cost_curve
from lopa.dependency import wants_attention
from lopa.editing import Editor
from lopa.filter import filter_for
from lopa.forward import Executor, Verified, make_executor, release_executor
from lopa.order import Commits, OrderPolicy, RoundView, make_order, recorded_order, stationary, trace_order
from lopa.records import device_label, final_record, round_record, stall_message, trace_spec
from lopa.rules import branch_scores, select_winner
from lopa.script import Forced, ScriptedOrder, script_from_trace
from lopa.settings import DecodeSettings, ModelSpec
from lopa.trace import RoundRecord, RunResult

Predictions = tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # token, max_prob, conf: [W] each


class DecodeStalled(RuntimeError):
    """A decode that cannot go on (no position can be filled); the message says which setting to change."""


class Decoder:
    """Decode one prompt at a time with a model, its spec and the run's settings.

    executor: "batched" (all branches in one forward; default), "per_branch" (the reference:
    one forward per branch, each on its own cache copy) or "uncached" (recompute everything).
    Any object speaking the Executor protocol is accepted too (the branch-parallel backends pass theirs).
    order: the token filling order policy (default: the one settings.order names).
    script: {round: lopa.script.Forced} decisions forced on top of the policy.
    keep_states: save a resumable state after every round, so forks of this run start at their
    round instead of replaying the run (a copy of the prefix cache per round: small models only).
    """

    def __init__(self, model, spec: ModelSpec, settings: DecodeSettings, tokenizer=None,
                 executor: str | Executor = "batched", order: OrderPolicy | None = None,
                 script: dict[int, Forced] | None = None, keep_states: bool = False):
        self.spec, self.settings, self.tokenizer = spec, settings, tokenizer
        # commit=learned reads the model's own commit filter (lopa/filter.py): refused here, before any forward
        self.commit_filter = filter_for(spec, settings.confidence) if settings.commit == "learned" else None
        self.executor = make_executor(executor, model, spec, settings) if isinstance(executor, str) else executor
        check_executor(settings, self.executor)
        # order = adaptive prices its branches by a curve timed here (or the linear model): lopa.cost
        curve = cost_curve(model, spec, settings, executor, decode) if order is None else None
        self.base_order = order if order is not None else make_order(settings, *((curve.seconds, curve.source)
                                                                                  if curve else ()))
        self.apply_script(script)
        self.keep_states = keep_states
        self.states: dict[int, Saved] = {}
        self.records: list[RoundRecord] = []
        self.state: Branch | None = None
        self.previous = None          # (window start, token, max_prob) the last round decided on
        self.attention = None         # commit=dawn: the last winner's attention rows over the window (lopa.dependency)
        self.finished = self.settled = False    # settled: the last round ended the decode (editing: nothing changes)
        self.run_id, self.forked_from = "", None
        self.editor = Editor(settings, spec.mask_token_id)
        config = getattr(getattr(self.executor, "model", None), "config", None)
        self.vocab_size = getattr(config, "vocab_size", None)

    # -- entry points ----------------------------------------------------------------------
    def encode(self, prompt: str) -> torch.Tensor:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty: type a question or pick an example")
        if self.tokenizer is None:
            raise ValueError("this Decoder has no tokenizer: pass prompt token ids instead of text")
        text = self.spec.prompt_template.format(prompt=prompt.strip())
        return torch.tensor(self.tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)

    def stream(self, prompt: str | torch.Tensor) -> Iterator[RoundRecord]:
        """Decode, yielding each round's record as soon as it is computed. Closing the generator
        stops decoding after the current round; `result()` then holds what was done."""
        self.prompt = prompt if isinstance(prompt, str) else ""
        ids = self.encode(prompt) if isinstance(prompt, str) else torch.as_tensor(prompt, dtype=torch.long)
        check_prompt(ids, self.settings, self.spec)
        self.prompt_ids, self.records, self.finished, self.states = ids, [], False, {}
        self.run_id, self.forked_from = uuid.uuid4().hex[:12], None
        for record in releasing(self.executor, self._rounds(ids)):
            self.records.append(record)
            yield record
        self.finished = True

    def stream_fork(self, parent: RunResult, at_round: int, commit: dict | None = None,
                    hold=(), lookahead=None) -> Iterator[RoundRecord]:
        """Decode a fork of `parent`: identical through round `at_round`, then the forced decisions
        applied in round at_round + 1 (commit: {position: token id, or None for the model's top
        token}; hold: positions kept masked; lookahead: that round's lookahead positions, () for none,
        None for the policy's), then this decoder's own policy. Yields the new rounds;
        `result()` holds the whole fork. Resumes from the parent's saved state after `at_round`
        when it has one (decoded in this process with keep_states); otherwise replays the parent's
        recorded decisions through `at_round` first (same result, at_round more forwards)."""
        if not 0 <= at_round < len(parent.records) or parent.records[at_round].kind == "final":
            last = max((r.round for r in parent.records if r.kind != "final"), default=0)
            raise ValueError(f"cannot fork at round {at_round}: choose a round with a forward, 0..{last}")
        source = parent.decoder.states if parent.decoder is not None else {}
        saved = source.get(at_round)
        script = {at_round + 1: Forced(commit=dict(commit or {}), hold=tuple(hold),
                                       lookahead=None if lookahead is None else tuple(lookahead))}
        if saved is None:
            script.update(script_from_trace(parent, upto=at_round))
        self.apply_script(script)
        self.prompt, self.prompt_ids = parent.prompt, torch.tensor(parent.prompt_ids, dtype=torch.long)
        self.records, self.finished = list(parent.records[:at_round + 1]), False
        self.states = {r: s for r, s in source.items() if r <= at_round} if saved is not None else {}
        self.run_id, self.forked_from = uuid.uuid4().hex[:12], {"run_id": parent.run_id, "round": at_round}
        for record in releasing(self.executor, self._rounds(self.prompt_ids, resume=saved)):
            if record.round > at_round:      # replayed rounds: the parent's own records stand for them
                self.records.append(record)
                yield record
        self.finished = True

    def apply_script(self, script: dict[int, Forced]) -> None:
        """Force these decisions ({round: Forced}) on top of the policy in the next decode. A script may
        hold back every candidate of its rounds, so the loop's progress bound grows by their number."""
        self.order = ScriptedOrder(self.base_order, script) if script else self.base_order
        self.scripted_rounds = len(script or ())

    def run(self, prompt: str | torch.Tensor) -> RunResult:
        for _ in self.stream(prompt):
            pass
        return self.result()

    @property
    def done(self) -> bool:
        """Whether the sequence decoded so far is complete (EOS reached or the token budget spent; with token
        editing, no block changes any more), even before the stream has returned."""
        return self.state is not None and self.settled and self.state.finished(self.settings, self.spec)

    def result(self) -> RunResult:
        if self.state is None:
            raise RuntimeError("nothing decoded yet: call stream() or run() first")
        tokens = self.state.tokens.tolist()
        run = RunResult(prompt=self.prompt, prompt_ids=self.prompt_ids.tolist(), settings=self.settings.to_dict(),
                        spec={**trace_spec(self.spec), "vocab_size": self.vocab_size}, records=list(self.records), tokens=tokens,
                        stopped=not self.finished, run_id=self.run_id, forked_from=self.forked_from, decoder=self,
                        order=recorded_order(self.settings, self.base_order))
        if self.tokenizer is not None:
            answer = [t for t in run.useful_tokens if t not in self.spec.eos_token_ids and t != self.spec.mask_token_id]
            run.text = self.tokenizer.decode(answer, skip_special_tokens=True)
        return run

    # -- the loop: one round per iteration, a line or two per phase; the helpers follow it --
    def _rounds(self, prompt_ids: torch.Tensor, resume: Saved | None = None) -> Iterator[RoundRecord]:
        if resume is None:
            predictions = yield from self._prefill(prompt_ids)          # round 0: the prompt forward
        else:
            predictions = self._restore(resume)                         # the state after round resume.round
        s, order = self.settings, self.order
        for r in count(1 if resume is None else resume.round + 1):
            check_progress(r, s, self.scripted_rounds, self.editor.on)
            start, filled, before = time.perf_counter(), self.state.n_filled(), (self.state, predictions)
            # 0. edit (edit_threshold < 1): committed tokens now predicted otherwise are replaced (full sequence: "post")
            kind = "post" if self.state.finished(s, self.spec) else "round"
            self.state, edits = self.editor.edit(self.state, predictions)
            # 1. anchor: the order policy's commits (under the paper's order: D2F's commit rule)
            view = self._view(r, predictions)
            commits = order.anchor(view)
            anchor = self.state.with_tokens(self.state.window_start + commits.positions, commits.tokens)
            if anchor.finished(s, self.spec) and not (self.editor.on and s.edit_post_steps):   # a final round, no forward
                self.state, self.settled = anchor, True
                yield final_record(r, anchor, commits, s, start, committed=anchor.n_filled() - filled,
                                   edit=self.editor.fields(edits, stop="budget"))
                return
            # 2. lookahead: the policy's k positions (paper: highest Conf; adaptive: fewer), one extra token each, or
            #    a chain of up to lookahead_depth tokens each, every prefix a row of the batch (lopa/chains.py)
            free = free_positions(anchor, commits.positions)
            look_pos = order.lookahead(view, free)
            plan = chain_plan(look_pos, free & (predictions[1] >= s.lookahead_min_prob), s.lookahead_depth)
            # 3. block management on every branch (lengths may now differ)
            branches = [b.with_block_added(s, self.spec) for b in plan_branches(anchor, plan, predictions[0])]
            # 4. verify: one forward over all rows (the k + 1 windows; with chains, every prefix of every chain)
            verified = self.executor.verify(branches)
            # 5. score (paper: mean Conf of masked positions); 6. cut each chain where its verification stops; select
            scores = score_branches(branches, verified, s)
            kept = kept_lengths(plan, predictions[0], *zip(*(verified.branch(j)[:2] for j in range(len(branches)))),
                                floor=s.lookahead_min_prob)
            candidates = candidate_rows(plan, kept)
            winner = candidates[int(select_winner(scores[candidates]))]
            # 7. commit: the winner becomes the state; complete leading blocks join the cache (settings.cache_schedule)
            predictions = self._commit(branches, verified, winner)
            # 8. record (and save a resumable state for forks); a committed mask token (mask_argmax "authors") fills nothing
            self.settled, edit = self.editor.close(self.state, predictions, self.state.finished(s, self.spec), edits,
                                                   branches[winner], verified.branch(winner))
            record = round_record(r, kind, branches, verified, scores.tolist(), winner, self.state, s, start,
                                  decided=(commits, look_pos), committed=self.state.n_filled() - filled, edit=edit,
                                  chains=(plan, kept) if s.lookahead_depth > 1 else None)
            self._save(r, predictions)
            yield record
            if self.settled:                           # the sequence is complete (and, editing, no block changes)
                return
            if self._repeats(r, before, predictions, commits, look_pos, free):
                raise DecodeStalled(stall_message(record, s, self.spec.mask_token_id))

    def _prefill(self, prompt_ids: torch.Tensor):
        """Round 0: the prompt forward. Yields its record, returns the predictions for round 1."""
        start = time.perf_counter()
        self.state, self.previous, self.settled = Branch.start(self.settings, self.spec), None, False
        self.editor.post_rounds = {}
        self.executor.start(prompt_ids)
        verified = self.executor.verify([self.state])
        self.executor.commit(0, 0)                                # caches the prompt
        scores = score_branches([self.state], verified, self.settings).tolist()
        record = round_record(0, "prefill", [self.state], verified, scores, 0, self.state, self.settings, start)
        label = device_label(self.executor)
        if label:                       # what the run's wall-clock was measured on (lopa.trace.metrics)
            record.extra.setdefault("device", label)
        predictions = verified.branch(0)
        self.attention = verified.attention[0] if verified.attention else None
        self._save(0, predictions)
        yield record
        return predictions

    def _repeats(self, r: int, before: tuple[Branch, Predictions], predictions: Predictions, commits: Commits,
                 look_pos: torch.Tensor, free: torch.Tensor) -> bool:
        """Whether every later round would repeat round r, which left the state as it was: the same
        predictions (greedy, so no draw can differ), a policy that decides from the view alone, no script
        ahead, and the same decisions on the next round's view (whose previous predictions are this
        round's). Then rounds r + 1, r + 2, ... see one view, decide alike and change nothing."""
        state, given = before
        if (self.settings.temperature > 0 or self.state.n_cached != state.n_cached
                or not torch.equal(self.state.tokens, state.tokens)
                or not all(torch.equal(a, b) for a, b in zip(predictions, given))
                or not stationary(self.base_order)
                or any(later > r for later in getattr(self.order, "script", ()))):
            return False
        view = self._round_view(r + 1, predictions, self.previous)
        again = self.order.anchor(view)
        return (torch.equal(again.positions, commits.positions) and torch.equal(again.tokens, commits.tokens)
                and torch.equal(self.order.lookahead(view, free), look_pos))

    def _view(self, r: int, predictions: Predictions) -> RoundView:
        """What the order policy sees: the state's window and the previous winner's predictions."""
        view = self._round_view(r, predictions, self.previous)
        self.previous = (self.state.window_start, predictions[0], predictions[1])
        return view

    def _round_view(self, r: int, predictions: Predictions, previous) -> RoundView:
        state = self.state
        token, max_prob, conf = predictions
        prev_token, prev_max_prob = previous_predictions(previous, state.window_start, token.numel())
        masked = state.window() == state.mask_id
        return RoundView(r, state.window_start, state.tokens.numel(), token, max_prob, conf,
                         masked, state.fully_activated(self.settings)[state.n_cached:],
                         self.settings, self.spec.mask_token_id, self.vocab_size, prev_token, prev_max_prob,
                         self.commit_filter, self.attention, unfilled=masked)

    def _commit(self, branches: list[Branch], verified: Verified, winner: int) -> Predictions:
        """The winner becomes the state and its complete leading blocks join the prefix cache
        (settings.cache_schedule). -> the winner's predictions over its new window."""
        n_cache = self.editor.cacheable(branches[winner], verified.branch(winner),   # a block still edited stays
                                        CACHE_SCHEDULES[self.settings.cache_schedule](branches, winner))
        cut = n_cache * self.settings.block_size
        self.executor.commit(winner, cut)
        self.state = branches[winner].with_cached(n_cache)
        self.attention = verified.attention[winner][cut:] if verified.attention else None    # rows of the new window
        return tuple(x[cut:] for x in verified.branch(winner))

    # -- saved states (forks resume from them) ---------------------------------------------
    def _save(self, r: int, predictions: Predictions) -> None:
        snapshot = self.executor.snapshot() if self.keep_states else None
        if snapshot is not None:              # None: an executor whose state lives elsewhere (forks replay)
            self.states[r] = Saved(r, self.state, predictions, snapshot, self.previous, dict(self.editor.post_rounds),
                                   self.attention)

    def _restore(self, saved: Saved) -> Predictions:
        self.state, self.executor = saved.state, saved.executor.snapshot()   # the saved one stays intact
        self.previous, self.editor.post_rounds = saved.previous, dict(saved.post_rounds or {})
        self.attention = saved.attention
        self.settled = False
        return saved.predictions


# -- pure helpers under the loop: no model, no decoder state; inputs never changed ------------------
def releasing(executor, rounds: Iterator[RoundRecord]) -> Iterator[RoundRecord]:
    """The rounds; once they end, stop or fail, the executor is told (`release`, where it has one): what it
    holds for the decode (the batched executor's graph runner, lopa.graphs) may then serve another."""
    try:
        yield from rounds
    finally:
        release_executor(executor)


def check_executor(settings: DecodeSettings, executor) -> None:
    """A ValueError, before any forward, where the settings need what the executor cannot give: commit=dawn reads
    each round's attention, which only the batched executor records (lopa.dependency)."""
    if wants_attention(settings) and getattr(executor, "probe", None) is None:
        raise ValueError(f"commit=dawn reads the attention of each round's forward, which only the batched executor "
                         f"records (executor batched or batched_eager, one process); got {type(executor).__name__}")


def check_progress(r: int, s: DecodeSettings, scripted_rounds: int, editing: bool) -> None:
    """Every round fills at least one position (the first unfinished block is always fully activated)
    unless a script holds every candidate back, or, under mask_argmax="authors", the positions the
    commit rule picks predict the mask token and no lookahead branch wins; post-edit rounds (token editing) fill
    nothing, at most edit_post_steps a block. A stall that must repeat is named as soon as it happens
    (Decoder._repeats); one that might not (a draw per round: random order, temperature > 0) ends here, at the
    round past what max_new_tokens could need: never an endless loop."""
    post = (s.edit_post_steps * s.max_blocks + 1) if editing else 0
    if r > s.max_new_tokens + 1 + scripted_rounds + post:
        raise DecodeStalled(f"decoding made no progress: {r - 1} rounds did not fill the {s.max_new_tokens} "
                            "new tokens" + (
                                ", as rounds whose chosen positions predict the mask token (which mask_argmax="
                                "'authors' writes back) fill nothing; use mask_argmax='next_best'"
                                if s.mask_argmax == "authors" else ""))


def free_positions(anchor: Branch, anchor_pos: torch.Tensor) -> torch.Tensor:
    """[W] bool: the window positions the lookahead may take, those still masked after the anchor, less the
    anchor's own (it may commit the mask token, mask_argmax "authors", which leaves its position masked)."""
    free = anchor.window() == anchor.mask_id                       # a new tensor: the anchor is untouched
    free[anchor_pos] = False
    return free


def previous_predictions(previous, window_start: int, width: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The round before's (token, max_prob) at this window's positions. previous: (its window start,
    token [W0], max_prob [W0]) or None -> [width] each, token -1 and max prob nan where it predicted
    nothing (a block added since); (None, None) when there was no round before."""
    if previous is None:
        return None, None
    start0, token0, max_prob0 = previous
    index = torch.arange(width) + (window_start - start0)         # [width] index into the earlier window
    known = index < token0.numel()                                # the window only moves forward: index >= 0
    index = index.clamp(max=max(token0.numel() - 1, 0))
    return (torch.where(known, token0[index], -1) if token0.numel() else torch.full((width,), -1),
            torch.where(known, max_prob0[index], float("nan")) if token0.numel() else torch.full((width,), float("nan")))


def masked_predictions(branch: Branch, verified: Verified, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Branch j's still-masked window positions [M], their max_prob [M] and Conf [M]."""
    masked = branch.window() == branch.mask_id
    _, max_prob, conf = verified.branch(j)
    return masked.nonzero().flatten(), max_prob[masked], conf[masked]


def score_branches(branches: list[Branch], verified: Verified, settings: DecodeSettings) -> torch.Tensor:
    """C(B_j) of each branch [K + 1] (settings.branch_score over its still-masked positions; lopa.rules)."""
    masked = [masked_predictions(b, verified, j) for j, b in enumerate(branches)]
    return branch_scores(masked, settings.branch_score, settings.tau_conf)


def check_prompt(ids: torch.Tensor, settings: DecodeSettings, spec: ModelSpec) -> None:
    """A prompt the model can decode with these settings, or a ValueError saying what to shorten."""
    if ids.numel() == 0:
        raise ValueError("the prompt is empty: type a question or pick an example")
    total = ids.numel() + settings.max_new_tokens
    if total > spec.max_context:
        room = spec.max_context - settings.max_new_tokens
        raise ValueError(
            f"the prompt is {ids.numel()} tokens and max_new_tokens is {settings.max_new_tokens}: together "
            f"{total} > the model's context of {spec.max_context} tokens. Shorten the prompt to at most "
            f"{max(room, 0)} tokens or lower max_new_tokens.")


def decode(model, spec: ModelSpec, settings: DecodeSettings, prompt, tokenizer=None, executor="batched") -> RunResult:
    """Decode one prompt to the end and return the RunResult (trace + metrics)."""
    return Decoder(model, spec, settings, tokenizer, executor).run(prompt)


@dataclass(frozen=True)
class Saved:
    """Everything round `round + 1` needs: the winner's state, its predictions, and a private copy
    of the executor (prefix cache, boundary row, sampling generator) after the round's commit."""
    round: int
    state: Branch
    predictions: Predictions
    executor: Executor
    previous: tuple | None = None      # the predictions round `round` decided on (Decoder.previous)
    post_rounds: dict | None = None    # the post-edit rounds each block has had (lopa.editing.Editor)
    attention: torch.Tensor | None = None   # commit=dawn: the winner's attention rows over the window


def fork_decoder(run: RunResult, model=None) -> Decoder:
    """A Decoder for forks of `run`, with the run's settings and policy. Uses the in-process decoder
    that made `run` when there is one (then forks resume from its saved states); otherwise `model`,
    anything with .decoder(settings) such as lopa.models.LoadedModel (forks then replay the run; a run
    that recorded its own policy, RunResult.order, needs .decoder(settings, order=))."""
    parent = run.decoder
    executor = parent.executor.snapshot() if parent is not None else None
    if executor is not None:
        return Decoder(None, parent.spec, parent.settings, parent.tokenizer, executor=executor,
                       order=parent.base_order, keep_states=parent.keep_states)
    if model is None:
        raise ValueError("forks need a model: this run was loaded from a file (or decoded by another process); "
                         "pass model=, e.g. lopa.models.load(...) of the model that made it")
    settings = DecodeSettings.from_dict(run.settings)
    # A study's own policy (recorded in run.order) comes back with its parameters; else the settings'.
    decoder = model.decoder(settings, order=trace_order(run)) if run.order else model.decoder(settings)
    decoder.keep_states = True
    return decoder


def fork(run: RunResult, at_round: int, commit: dict | None = None, hold=(), model=None,
         lookahead=None) -> RunResult:
    """A new run identical to `run` through round `at_round`, with `commit` ({position: token id or
    None for the model's top token}), `hold` ([positions kept masked]) and `lookahead` (that round's
    lookahead positions; () for none, None for the policy's) forced in round at_round + 1, then the
    run's own order policy to the end. See Decoder.stream_fork."""
    decoder = fork_decoder(run, model)
    for _ in decoder.stream_fork(run, at_round, commit, hold, lookahead):
        pass
    return decoder.result()
