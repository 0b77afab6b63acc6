"""`generate(model, ...)`: LoPA decoding behind transformers' `model.generate(...)`, the function a
model folder's `custom_generate/generate.py` hands over to. Thin on purpose: transformers' inputs
(input_ids, attention_mask, generation config, streamer) become a prompt per row and one
DecodeSettings (lopa.hf.config), the engine decodes, and the result comes back the way generate()
returns it. Nothing here decides anything the engine does not.

Returns, like transformers' generate():
    sequences [batch, prompt + generated] (torch.LongTensor): each row is its prompt as given
    (padding included) then the generated tokens up to and including the first EOS, rows padded
    on the right with the pad token. With return_dict_in_generate=True, a LopaGenerateOutput that
    also holds each row's trace (lopa.trace.RunResult: rounds, metrics(), save()).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.utils import ModelOutput

from lopa.hf.config import LopaGenerationConfig
from lopa.hf.streaming import RoundFeed
from lopa.models.loading import LoadedModel, spec_from_pretrained

# generate() arguments that change how tokens are chosen; LoPA's rules choose them, so any of these
# given is refused rather than silently ignored. (None is what transformers passes when unset.)
REFUSED = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "assistant_model",
           "negative_prompt_ids", "negative_prompt_attention_mask")
# generate() arguments that need no action here (synced_gpus: one process decodes every row).
IGNORED = ("synced_gpus", "trust_remote_code", "custom_generate")


@dataclass
class LopaGenerateOutput(ModelOutput):
    """sequences [batch, length]; tokens_per_forward (useful tokens per forward, per row, as
    DiffusionGemma reports it; lopa.trace.metrics computes it); traces: one RunResult per row."""

    sequences: torch.LongTensor | None = None
    tokens_per_forward: list[float] | None = None
    traces: list | None = None


def generate(model, inputs: torch.Tensor | None = None, generation_config=None, streamer=None, **kwargs):
    """LoPA decoding with transformers' generate() arguments.

    model: a transformers model of a masked diffusion LM the engine can decode (its spec is read
        from model.config: config.lopa, or config / tokenizer special tokens; pass tokenizer= when
        the mask token is only in the tokenizer).
    inputs / input_ids: [batch, P] prompt ids, the model's prompt template already applied;
        attention_mask [batch, P] marks padding (either side) to drop from each prompt.
    generation_config: a GenerationConfig or LopaGenerationConfig; kwargs override its fields
        (k=8, max_new_tokens=64, order="random", ...). Unset fields: as `lopa generate`.
    streamer: a transformers streamer (batch size 1); see lopa.hf.streaming for what it receives.
    """
    for name in REFUSED:
        if kwargs.pop(name, None) is not None:
            raise ValueError(f"LoPA's decoding rules choose the tokens: {name} is not supported")
    for name in IGNORED:
        kwargs.pop(name, None)
    input_ids = kwargs.pop("input_ids", None) if inputs is None else inputs
    if input_ids is None:
        raise ValueError("generate() needs the prompt ids: pass input_ids (or inputs)")
    input_ids = torch.as_tensor(input_ids)
    input_ids = input_ids.reshape(-1, input_ids.shape[-1])                         # [batch, P]
    attention_mask = kwargs.pop("attention_mask", None)
    tokenizer = kwargs.pop("tokenizer", None)
    config = _resolve_config(model, generation_config, kwargs)
    if streamer is not None and input_ids.shape[0] > 1:
        raise ValueError("a streamer follows one sequence: pass one prompt (batch size 1) when streaming")

    name = Path(str(getattr(model.config, "_name_or_path", "") or "model")).name
    loaded = LoadedModel(model, tokenizer, spec_from_pretrained(model.config, tokenizer, name), Path(name))
    settings = config.to_settings(loaded.spec)
    previous = getattr(model.config, "_attn_implementation", None)
    traces = []
    try:
        for b, row in enumerate(input_ids):
            prompt = row if attention_mask is None else row[torch.as_tensor(attention_mask)[b].bool().cpu()]
            # A Decoder per row: each row decodes as it would alone (its own sampling seed).
            traces.append(_decode(loaded.decoder(settings), prompt.cpu(), streamer, loaded.spec))
    finally:
        # The batched executor switches the model to LoPA's shared-prefix attention; give the
        # caller their model back as it was.
        if previous and getattr(model.config, "_attn_implementation", None) != previous:
            model.set_attn_implementation(previous)

    pad = loaded.spec.pad_token_id if loaded.spec.pad_token_id is not None else loaded.spec.eos_token_ids[0]
    rows = [row.tolist() + run.useful_tokens for row, run in zip(input_ids, traces, strict=True)]
    width = max(len(r) for r in rows)
    sequences = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long, device=input_ids.device)
    if not config.return_dict_in_generate:
        return sequences
    return LopaGenerateOutput(sequences=sequences, tokens_per_forward=[run.metrics()["tpf_useful"] for run in traces],
                              traces=traces)


def _resolve_config(model, generation_config, kwargs: dict) -> LopaGenerationConfig:
    """transformers' priority: generate() kwargs > the given config > the model's generation config.
    Arguments nobody knows are an error, as in transformers' own generate()."""
    given = generation_config.to_dict() if generation_config is not None else {}
    config = LopaGenerationConfig.from_dict(given)
    model_config = getattr(model, "generation_config", None)
    if model_config is not None:
        config.update(**model_config.to_dict(), defaults_only=True)
    unknown = config.update(**kwargs)
    if unknown:
        raise TypeError(f"generate() got arguments that neither transformers' GenerationConfig nor LoPA's settings "
                        f"know: {', '.join(sorted(unknown))}")
    return config


def _decode(decoder, prompt: torch.Tensor, streamer, spec):
    feed = RoundFeed(streamer, spec) if streamer is not None else None
    if feed is not None:
        feed.start(prompt)
    for record in decoder.stream(prompt):
        if feed is not None:
            feed.round(record)
    if feed is not None:
        feed.end()
    return decoder.result()
