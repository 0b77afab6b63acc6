"""Streamers for LoPA rounds, following transformers' in-library diffusion convention
(DiffusionGemma's generate with `TextDiffusionStreamer`, transformers 5.x):

    put(prompt ids)             once, first (TextStreamer(skip_prompt=True) skips it)
    put_draft(value=draft)      every round, if the streamer has put_draft: the not yet confirmed
                                tail, masked positions filled with the round's predictions [1, n]
    put(new confirmed ids)      when the confirmed prefix grows [1, m]
    end()                       once, last

"Confirmed" is the longest run of committed tokens from the first generated position, up to the
first EOS: LoPA commits out of order (a later position can be final before an earlier one), but a
committed token never changes, so that prefix is final and a text streamer may print it.
A streamer whose `_takes_record` is True (like `_takes_logits` in DiffusionGemma) also gets the
round's lopa.trace.RoundRecord: `put_draft(value=..., record=...)`. RoundStreamer is one.
"""

from __future__ import annotations

import torch
from transformers.generation.streamers import BaseStreamer

from lopa.settings import ModelSpec
from lopa.trace import RoundRecord


class RoundFeed:
    """Feeds one decode's rounds to a transformers streamer (batch size 1)."""

    def __init__(self, streamer, spec: ModelSpec):
        self.streamer, self.spec = streamer, spec
        self.canvas: list[int] = []      # every generated position, mask id where still masked
        self.confirmed = 0               # leading positions already sent with put()
        self.done = False                # the confirmed prefix reached EOS

    def start(self, prompt_ids: torch.Tensor) -> None:
        self.streamer.put(prompt_ids.reshape(1, -1).cpu())

    def round(self, record: RoundRecord) -> None:
        # The state after the round is the winner's window (lopa.engine: the winner becomes the state).
        window = record.branch_tokens[record.winner]
        self.canvas = self.canvas[:record.window_start] + list(window)
        if hasattr(self.streamer, "put_draft"):
            extra = {"record": record} if getattr(self.streamer, "_takes_record", False) else {}
            self.streamer.put_draft(value=self._draft(record), **extra)
        end = self._confirmed_end()
        if end > self.confirmed:
            self.streamer.put(torch.tensor([self.canvas[self.confirmed:end]], dtype=torch.long))
            self.confirmed = end

    def end(self) -> None:
        self.streamer.end()

    def _confirmed_end(self) -> int:
        mask, eos = self.spec.mask_token_id, self.spec.eos_token_ids
        end = self.confirmed
        while not self.done and end < len(self.canvas) and self.canvas[end] != mask:
            self.done = self.canvas[end] in eos
            end += 1
        return end

    def _draft(self, record: RoundRecord) -> torch.Tensor:
        draft = list(self.canvas)
        for position, token in zip(record.branch_positions[record.winner], record.branch_argmax[record.winner],
                                   strict=True):
            draft[position] = token
        tail = draft[self.confirmed:] if not self.done else []
        cut = next((i for i, t in enumerate(tail) if t in self.spec.eos_token_ids), None)
        return torch.tensor([tail if cut is None else tail[:cut + 1]], dtype=torch.long)    # [1, n]


class RoundStreamer(BaseStreamer):
    """A streamer that sees every LoPA round: `records` (each round's RoundRecord, in order),
    `drafts` (each round's draft ids), `prompt` and `tokens` (the confirmed generated ids).
    on_round(record, draft), if given, is called as each round arrives (e.g. to redraw a view).

        streamer = RoundStreamer()
        model.generate(**inputs, streamer=streamer)    # a model loaded with LoPA's custom_generate
        [r.committed for r in streamer.records]
    """

    _takes_record = True

    def __init__(self, on_round=None):
        self.on_round = on_round
        self.prompt: list[int] | None = None
        self.tokens: list[int] = []
        self.records: list[RoundRecord] = []
        self.drafts: list[list[int]] = []
        self.ended = False

    def put(self, value):
        ids = value.reshape(-1).tolist()
        if self.prompt is None:
            self.prompt = ids
        else:
            self.tokens.extend(ids)

    def put_draft(self, value, record: RoundRecord | None = None, **_):
        self.drafts.append(value.reshape(-1).tolist())
        if record is not None:
            self.records.append(record)
        if self.on_round is not None:
            self.on_round(record, self.drafts[-1])

    def end(self):
        self.ended = True
