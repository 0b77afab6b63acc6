"""The canvas-sampler trace format (`lopa-canvas-trace/1`, lopa.models.canvas_trace), checked at the door.

Like a LoPA trace (lopa.schema), a canvas trace may come from anyone (an upload, a shared file), so
every field passes through these pydantic models before anything reads it: strict types, ranges,
per-step lists that agree with the canvas length, and bounded sizes. A failure is one ValueError
that names the first bad field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lopa.schema import MAX_POSITIONS, MAX_PROMPT_TOKENS, MAX_ROUNDS, MAX_TEXT, Id, Name, StrictModel, check_model
from lopa.settings import MAX_BLOCK_SIZE

CANVAS_TRACE_FORMAT = "lopa-canvas-trace/1"
MAX_CANVAS = MAX_BLOCK_SIZE
MAX_DENOISE_STEPS = 1024
Entropy = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


def _canvas_list(item):
    return Annotated[list[item], Field(max_length=MAX_CANVAS, fail_fast=True)]


class DenoiseRecordModel(StrictModel):
    canvas: Annotated[int, Field(ge=0, lt=MAX_POSITIONS)]
    step: Annotated[int, Field(ge=0, lt=MAX_DENOISE_STEPS)]
    steps_left: Annotated[int, Field(ge=1, le=MAX_DENOISE_STEPS)]
    temperature: Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
    tokens_in: _canvas_list(Id)
    sampled: _canvas_list(Id)
    argmax: _canvas_list(Id)
    entropy: _canvas_list(Entropy)
    accepted: _canvas_list(Annotated[int, Field(ge=0, lt=MAX_CANVAS)])
    renoised: _canvas_list(Annotated[int, Field(ge=0, lt=MAX_CANVAS)])
    stopped: bool = False


class CanvasSettings(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    canvas_length: Annotated[int, Field(ge=1, le=MAX_CANVAS)]
    max_denoising_steps: Annotated[int, Field(ge=1, le=MAX_DENOISE_STEPS)]


class CanvasTrace(StrictModel):
    format: Literal["lopa-canvas-trace/1"]
    model: Name
    prompt: Annotated[str, Field(max_length=MAX_TEXT)]
    prompt_ids: Annotated[list[Id], Field(max_length=MAX_PROMPT_TOKENS, fail_fast=True)]
    tokens: Annotated[list[Id], Field(max_length=MAX_POSITIONS, fail_fast=True)]
    answer: Annotated[str, Field(max_length=MAX_TEXT)]
    settings: dict
    pad_token_id: Id | None = None
    records: Annotated[list[DenoiseRecordModel], Field(max_length=MAX_ROUNDS, fail_fast=True)]
    settled: Annotated[list[Annotated[int, Field(ge=0, lt=MAX_DENOISE_STEPS)] | None],
                       Field(max_length=MAX_POSITIONS, fail_fast=True)] = []

    @model_validator(mode="after")
    def _consistent(self):
        settings = CanvasSettings.model_validate(self.settings)
        n = settings.canvas_length
        for i, r in enumerate(self.records):
            if not (len(r.tokens_in) == len(r.sampled) == len(r.argmax) == len(r.entropy) == n):
                raise ValueError(f"records.{i}: every per-position list must hold canvas_length ({n}) entries")
            if sorted(r.accepted + r.renoised) != list(range(n)):
                raise ValueError(f"records.{i}: accepted and renoised must split the canvas's positions")
            if r.step >= settings.max_denoising_steps:
                raise ValueError(f"records.{i}.step: must be < max_denoising_steps ({settings.max_denoising_steps})")
        if -(-len(self.tokens) // n) < len({r.canvas for r in self.records}):
            raise ValueError("more canvases were denoised than the answer holds")
        if self.settled and len(self.settled) != len(self.tokens):
            raise ValueError("settled must hold one entry per answer token")
        return self


def validate_canvas_trace(data: Any) -> dict:
    """Check a parsed canvas-sampler trace and return it as plain data; ValueError naming the first
    bad field otherwise."""
    if not isinstance(data, dict) or data.get("format") != CANVAS_TRACE_FORMAT:
        raise ValueError(f"not a canvas-sampler trace (expected format {CANVAS_TRACE_FORMAT!r})")
    check_model(CanvasTrace, data, "canvas trace")
    return data
