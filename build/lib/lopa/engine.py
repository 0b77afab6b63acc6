"""The decoding loop: D2F pipelined blocks with LoPA lookahead branches (vanilla D2F is k = 0).

One round, as in the paper (Sec. 3; design note "One LoPA round"):
    anchor -> lookahead -> block management -> verify (one batched forward) -> score -> select
    -> commit -> record.
The winner's predictions from the verify forward feed the next round's anchor, so there is
exactly one forward per round. The loop yields a RoundRecord per round; everything else (CLI,
benchmarks, app) consumes those.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count

import torch

from lopa.blocks import Branch
from lopa.forward import Executor, Verified, make_executor
from lopa.rules import COMMIT_RULES, branch_score, lookahead_positions, select_winner
from lopa.settings import DecodeSettings, ModelSpec
from lopa.trace import RoundRecord, RunResult

Predictions = tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # token, max_prob, conf: [W] each


class Decoder:
    """Decode one prompt at a time with a model, its spec and the run's settings.

    executor: "batched" (all branches in one forward; default), "per_branch" (the reference:
    one forward per branch, each on its own cache copy) or "uncached" (recompute everything).
    Any object speaking the Executor protocol is accepted too (the branch-parallel backends pass theirs).
    """

    def __init__(self, model, spec: ModelSpec, settings: DecodeSettings, tokenizer=None,
                 executor: str | Executor = "batched"):
        self.spec, self.settings, self.tokenizer = spec, settings, tokenizer
        self.executor = make_executor(executor, model, spec, settings) if isinstance(executor, str) else executor
        self.commit_rule = COMMIT_RULES[settings.commit]
        self.records: list[RoundRecord] = []
        self.state: Branch | None = None
        self.finished = False

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
        self._check_prompt(ids)
        self.prompt_ids, self.records, self.finished = ids, [], False
        for record in self._rounds(ids):
            self.records.append(record)
            yield record
        self.finished = True

    def run(self, prompt: str | torch.Tensor) -> RunResult:
        for _ in self.stream(prompt):
            pass
        return self.result()

    def result(self) -> RunResult:
        if self.state is None:
            raise RuntimeError("nothing decoded yet: call stream() or run() first")
        tokens = self.state.tokens.tolist()
        run = RunResult(prompt=self.prompt, prompt_ids=self.prompt_ids.tolist(), settings=self.settings.to_dict(),
                        spec=self.spec.to_dict(), records=list(self.records), tokens=tokens,
                        stopped=not self.finished)
        if self.tokenizer is not None:
            answer = [t for t in run.useful_tokens if t not in self.spec.eos_token_ids and t != self.spec.mask_token_id]
            run.text = self.tokenizer.decode(answer, skip_special_tokens=True)
        return run

    # -- the loop --------------------------------------------------------------------------
    def _rounds(self, prompt_ids: torch.Tensor) -> Iterator[RoundRecord]:
        s, N, ex = self.settings, self.settings.block_size, self.executor
        start = time.perf_counter()
        self.state = Branch.start(s, self.spec)
        ex.start(prompt_ids)
        verified = ex.verify([self.state])                       # round 0: the prompt forward
        ex.commit(0, 0)                                           # caches the prompt
        predictions = verified.branch(0)
        scores = [float(branch_score(self._masked_conf(self.state, verified, 0)))]
        yield self._record(0, "prefill", [self.state], verified, None, scores, 0, start)

        for r in count(1):
            # Every round commits at least one token (the first unfinished block is always fully
            # activated), so this bound is never reached unless a rule is broken.
            assert r <= s.max_new_tokens + 1, "decoding made no progress"
            start = time.perf_counter()
            # 1. anchor: the commit rule on the winner's predictions from the last forward
            anchor_pos = self._anchor(self.state, predictions)
            anchor = self.state.with_tokens(self.state.window_start + anchor_pos, predictions[0][anchor_pos])
            if anchor.finished(s, self.spec):
                self.state = anchor
                yield self._final(r, anchor, anchor_pos, start)
                return
            # 2. lookahead: the k most confident remaining positions, one extra token each
            look_pos = self._lookahead(anchor, predictions)
            branches = [anchor] + [anchor.with_tokens(anchor.window_start + p, predictions[0][p]) for p in look_pos]
            # 3. block management on every branch (lengths may now differ)
            branches = [b.with_block_added(s, self.spec) for b in branches]
            # 4. verify: one forward over all k + 1 windows
            verified = ex.verify(branches)
            # 5. score and 6. select
            scores = torch.stack([branch_score(self._masked_conf(b, verified, j)) for j, b in enumerate(branches)])
            winner = int(select_winner(scores))
            # 7. commit: the winner becomes the state; its complete leading blocks join the cache
            n_cache = branches[winner].cacheable_blocks()
            ex.commit(winner, n_cache * N)
            self.state = branches[winner].with_cached(n_cache)
            predictions = tuple(x[n_cache * N:] for x in verified.branch(winner))
            # 8. record
            committed = anchor_pos.numel() + int(winner > 0)
            yield self._record(r, "round", branches, verified, (anchor_pos, look_pos), scores.tolist(),
                               winner, start, committed=committed)
            if self.state.finished(s, self.spec):      # a lookahead token completed the sequence
                return

    # -- the decisions of a round (thin wrappers over lopa.rules) --------------------------
    def _anchor(self, state: Branch, predictions: Predictions) -> torch.Tensor:
        """Window positions the commit rule commits, block by block (D2F step 4)."""
        _, max_prob, conf = predictions
        N, masked = state.block_size, state.window() == state.mask_id
        full = state.fully_activated(self.settings)
        chosen = []
        for b in range(state.n_cached, state.n_blocks):
            lo = (b - state.n_cached) * N
            idx = masked[lo:lo + N].nonzero().flatten() + lo      # [M] masked positions of block b
            if idx.numel():
                chosen.append(idx[self.commit_rule(max_prob[idx], conf[idx], self.settings.tau_conf, full[b])])
        return torch.cat(chosen) if chosen else torch.zeros(0, dtype=torch.long)

    def _lookahead(self, anchor: Branch, predictions: Predictions) -> torch.Tensor:
        """Window positions of the k lookahead branches (LoPA step 2), best Conf first."""
        masked = anchor.window() == anchor.mask_id                  # excludes the anchor's commits
        return lookahead_positions(predictions[2], masked, self.settings.k)

    @staticmethod
    def _masked_conf(branch: Branch, verified: Verified, j: int) -> torch.Tensor:
        return verified.branch(j)[2][branch.window() == branch.mask_id]

    # -- records ---------------------------------------------------------------------------
    def _record(self, r, kind, branches, verified, positions, scores, winner, start, committed=0) -> RoundRecord:
        anchor_pos, look_pos = positions if positions else (torch.zeros(0, dtype=torch.long),) * 2
        w0 = branches[0].window_start
        per_branch = {"tokens": [], "positions": [], "max_prob": [], "conf": [], "argmax": []}
        for j, b in enumerate(branches):
            token, max_prob, conf = verified.branch(j)
            masked = b.window() == b.mask_id
            per_branch["tokens"].append(b.window().tolist())
            per_branch["positions"].append((masked.nonzero().flatten() + w0).tolist())
            per_branch["max_prob"].append(max_prob[masked].tolist())
            per_branch["conf"].append(conf[masked].tolist())
            per_branch["argmax"].append(token[masked].tolist())
        anchor_tokens = branches[0].window()[anchor_pos].tolist()
        look_tokens = [branches[j + 1].window()[p].item() for j, p in enumerate(look_pos.tolist())]
        return RoundRecord(
            round=r, kind=kind, window_start=w0,
            anchor_positions=(anchor_pos + w0).tolist(), anchor_tokens=anchor_tokens,
            lookahead_positions=(look_pos + w0).tolist(), lookahead_tokens=look_tokens,
            branch_tokens=per_branch["tokens"], branch_positions=per_branch["positions"],
            branch_max_prob=per_branch["max_prob"], branch_conf=per_branch["conf"], branch_argmax=per_branch["argmax"],
            branch_scores=scores,
            branch_rank=verified.ranks or [0] * len(branches),
            winner=winner, block_states=self.state.states(self.settings), committed=committed,
            n_cached_blocks=self.state.n_cached, forward_seconds=verified.seconds,
            round_seconds=time.perf_counter() - start, extra=dict(verified.extra))

    def _final(self, r, anchor: Branch, anchor_pos, start) -> RoundRecord:
        """The last anchor commit finished the sequence: nothing is left to verify, so no forward."""
        w0 = anchor.window_start
        return RoundRecord(
            round=r, kind="final", window_start=w0, anchor_positions=(anchor_pos + w0).tolist(),
            anchor_tokens=anchor.window()[anchor_pos].tolist(), lookahead_positions=[], lookahead_tokens=[],
            branch_tokens=[anchor.window().tolist()], branch_positions=[[]], branch_max_prob=[[]], branch_conf=[[]],
            branch_argmax=[[]], branch_scores=[float("inf")], branch_rank=[0], winner=0,
            block_states=anchor.states(self.settings), committed=anchor_pos.numel(), n_cached_blocks=anchor.n_cached,
            forward_seconds=0.0, round_seconds=time.perf_counter() - start)

    def _check_prompt(self, ids: torch.Tensor) -> None:
        if ids.numel() == 0:
            raise ValueError("the prompt is empty: type a question or pick an example")
        total = ids.numel() + self.settings.max_new_tokens
        if total > self.spec.max_context:
            room = self.spec.max_context - self.settings.max_new_tokens
            raise ValueError(
                f"the prompt is {ids.numel()} tokens and max_new_tokens is {self.settings.max_new_tokens}: together "
                f"{total} > the model's context of {self.spec.max_context} tokens. Shorten the prompt to at most "
                f"{max(room, 0)} tokens or lower max_new_tokens.")


def decode(model, spec: ModelSpec, settings: DecodeSettings, prompt, tokenizer=None, executor="batched") -> RunResult:
    """Decode one prompt to the end and return the RunResult (trace + metrics)."""
    return Decoder(model, spec, settings, tokenizer, executor).run(prompt)
