"""LopaGenerationConfig: transformers' GenerationConfig carrying LoPA's settings, and the one
mapping between it and DecodeSettings.

Two settings already have a transformers name and keep it: `max_new_tokens` (a multiple of the
block size: LoPA appends whole blocks) and `temperature`, which counts only with `do_sample=True`
(transformers' convention; greedy is DecodeSettings' temperature 0). Every other DecodeSettings
field is carried under its own name. A field left unset (None) is filled the way `lopa generate`
fills it (lopa.resolution.settings_for_model), so the same choices decode the same tokens.
"""

from __future__ import annotations

from transformers import GenerationConfig

from lopa.resolution import settings_for_model
from lopa.settings import SETTINGS, DecodeSettings, ModelSpec

# Registry settings with no transformers counterpart, carried as they are.
LOPA_FIELDS = tuple(name for name in SETTINGS if name not in ("max_new_tokens", "temperature"))


class LopaGenerationConfig(GenerationConfig):
    """A GenerationConfig for LoPA decoding (lopa.hf.generation). Arguments: those of
    GenerationConfig, plus every decode setting of the registry (lopa.settings.SETTINGS: k, tau_conf,
    order, ...), which says what each means and its range.

        config = LopaGenerationConfig(k=8, max_new_tokens=64, order="confidence")
        model.generate(**inputs, generation_config=config, custom_generate=DIR, trust_remote_code=True)
    """

    def __init__(self, **kwargs):
        for name in LOPA_FIELDS:
            setattr(self, name, kwargs.pop(name, None))
        super().__init__(**kwargs)

    @classmethod
    def from_settings(cls, settings: DecodeSettings, **kwargs) -> LopaGenerationConfig:
        """The config that decodes exactly like `settings` (kwargs: other GenerationConfig fields)."""
        sampled = settings.temperature > 0
        return cls(**{name: getattr(settings, name) for name in LOPA_FIELDS}, max_new_tokens=settings.max_new_tokens,
                   do_sample=sampled, temperature=settings.temperature if sampled else None, **kwargs)

    def to_settings(self, spec: ModelSpec | None = None) -> DecodeSettings:
        """The DecodeSettings this config asks for on a model with `spec`. ValueError (from
        DecodeSettings, saying what to change) for values out of range; also for transformers
        options LoPA cannot honour, rather than ignoring them."""
        if (self.num_beams or 1) > 1 or (self.num_return_sequences or 1) > 1:
            raise ValueError("LoPA decodes one sequence per prompt: num_beams and num_return_sequences must be 1")
        if self.max_new_tokens is None and self.max_length is not None:
            raise ValueError("LoPA appends whole blocks: give max_new_tokens (a multiple of the block size) "
                             "instead of max_length")
        fields = {name: getattr(self, name) for name in LOPA_FIELDS if getattr(self, name, None) is not None}
        if self.max_new_tokens is not None:
            fields["max_new_tokens"] = self.max_new_tokens
        if self.do_sample:
            fields["temperature"] = float(1.0 if self.temperature is None else self.temperature)
        else:
            fields["temperature"] = 0.0
        return settings_for_model(spec, **fields)
