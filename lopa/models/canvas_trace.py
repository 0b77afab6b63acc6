"""The trace of a canvas sampler (DiffusionGemma's entropy-bound sampler): one DenoiseRecord per
denoising step, and the CanvasRun that collects them. The format is `lopa-canvas-trace/1`,
checked by lopa.canvas_schema.validate_canvas_trace before anything reads a file.

A canvas sampler is not masked diffusion, so this is not a lopa-trace RoundRecord: every step
predicts every position of the canvas, keeps the sampled token where the prediction's entropy is
within the bound (accepted) and replaces every other position with a uniform random token
(re-noised). Nothing is fixed across steps: a position accepted at step s is predicted and drawn
again at step s + 1. The answer is the last step's argmax canvas.

Positions are indices into the canvas (0 .. canvas_length - 1); canvas c covers answer positions
c * canvas_length onwards.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from lopa.canvas_schema import CANVAS_TRACE_FORMAT, validate_canvas_trace


@dataclass
class DenoiseRecord:
    canvas: int                 # which canvas of the answer (0 = the first after the prompt)
    step: int                   # denoising step within the canvas, 0 = first
    steps_left: int             # the sampler's step count-down (N .. 1): sets the temperature
    temperature: float
    tokens_in: list[int]        # the canvas the forward saw
    sampled: list[int]          # drawn from the temperature-scaled prediction
    argmax: list[int]           # the prediction's argmax (the answer, if this step is the canvas's last)
    entropy: list[float]        # of the temperature-scaled prediction, per position (nats)
    accepted: list[int]         # positions whose sampled token is kept (the entropy bound)
    renoised: list[int]         # every other position: a uniform random token for the next step
    stopped: bool = False       # the stopping criterion (stable and confident) fired after this step

    @classmethod
    def from_dict(cls, data: dict) -> DenoiseRecord:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclass
class CanvasRun:
    """A whole decode. settings: the sampler's parameters as generate() resolved them
    (entropy_bound, t_min, t_max, max_denoising_steps, stability_threshold, confidence_threshold,
    canvas_length, max_new_tokens, seed). tokens: the answer as generate() returns it (pad after EOS)."""
    model: str
    prompt: str
    prompt_ids: list[int]
    tokens: list[int]
    answer: str
    settings: dict
    records: list[DenoiseRecord] = field(default_factory=list)
    pad_token_id: int | None = None
    # Per answer position, the step its final token settled at (accepted_step(), stored so that a
    # reader of the file, a figure, needs no second copy of the rule).
    settled: list[int | None] = field(default_factory=list)
    format: str = CANVAS_TRACE_FORMAT

    def __post_init__(self) -> None:
        if self.records and not self.settled:
            self.settled = self.accepted_step()

    @property
    def forwards(self) -> int:
        return len(self.records)

    @property
    def canvas_length(self) -> int:
        return int(self.settings["canvas_length"])

    def tokens_per_forward(self) -> float:
        """generate()'s own figure: answer tokens that are not pad, over denoising forwards."""
        valid = sum(t != self.pad_token_id for t in self.tokens) if self.pad_token_id is not None else len(self.tokens)
        return valid / self.forwards if self.forwards else 0.0

    def canvas_records(self, canvas: int) -> list[DenoiseRecord]:
        return [r for r in self.records if r.canvas == canvas]

    def accepted_step(self) -> list[int | None]:
        """Per answer position, the step from which its final token was accepted at every later step
        of its canvas (the step it settled); None where the last step did not accept the final token
        (the answer is the argmax, which the sampler may not have drawn). See settled_step."""
        out: list[int | None] = []
        for c in range(-(-len(self.tokens) // self.canvas_length)):
            records = self.canvas_records(c)
            final = records[-1].argmax if records else []
            out += [settled_step(records, p, final[p]) for p in range(len(final))]
        return out[: len(self.tokens)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> CanvasRun:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not a JSON trace: {err}") from None
        except RecursionError:          # a file of nested brackets: refused, not a crash
            raise ValueError("not a canvas trace: the JSON is nested too deeply") from None
        data = validate_canvas_trace(data)
        records = [DenoiseRecord.from_dict(r) for r in data.pop("records")]
        return cls(**data, records=records)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json())
        return path

    @classmethod
    def load(cls, path: str | Path) -> CanvasRun:
        return cls.from_json(Path(path).read_text())


def settled_step(records: list[DenoiseRecord], position: int, final: int) -> int | None:
    """The first step s of one canvas's records such that every step from s on accepted `position`
    with the token `final`; None when the last step did not."""
    settled = None
    for r in reversed(records):
        if position in r.accepted and r.sampled[position] == final:
            settled = r.step
        else:
            break
    return settled
