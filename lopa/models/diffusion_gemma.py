"""DiffusionGemma decoded on its own sampler, recorded step by step (lopa.models.canvas_trace).

DiffusionGemma (transformers' `DiffusionGemmaForBlockDiffusion`) is not a masked diffusion LM, so
the LoPA engine does not decode it. Its `generate` writes the answer one canvas (block) at a time:
the encoder caches everything before the canvas, then the decoder denoises a canvas that starts as
uniform random tokens. Each step predicts every position (conditioned on the previous step's
logits, "self-conditioning"), scales the logits by a temperature falling linearly from t_max to
t_min, draws a token per position, accepts the drawn tokens of the lowest-entropy positions while
the sum of their entropies minus the largest stays within `entropy_bound`, and replaces every other
position with a fresh uniform random token. It stops when the argmax canvas has been stable for
`stability_threshold` steps and the mean entropy is under `confidence_threshold`, or after
`max_denoising_steps`; the canvas's answer is the last step's argmax.

`decode` runs that loop with transformers' own setup and bookkeeping (the generation config's
resolution, the cache, the encoder inputs, the end-of-sequence handling: the mixin's helpers,
pinned transformers 5.23) and its own denoising step written in phases (predict, sample, accept,
renoise, stop, record), so that every step lands in the trace. At the same seed it returns the
tokens `generate` returns (tests/test_diffusion_gemma.py), batch size 1.

Why no lookahead: docs/checkpoints.md, "DiffusionGemma".
"""

from __future__ import annotations

import torch

from lopa.models.canvas_trace import CanvasRun, DenoiseRecord


# -- pure helpers: the sampler's arithmetic, on hand-made tensors in the tests --------------------
def linear_temperature(steps_left: torch.Tensor, max_steps: int, t_min: float, t_max: float) -> torch.Tensor:
    """t_min + (t_max - t_min) * steps_left / max_steps, in the dtype generate computes it
    (steps_left an int32 tensor: the temperature falls as the count-down does)."""
    return t_min + ((t_max - t_min) * (steps_left / max_steps))


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's categorical distribution. logits: [B, N, V] -> [B, N] (nats)."""
    return torch.distributions.Categorical(logits=logits).entropy()


def entropy_bound_accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """The positions the entropy-bound sampler accepts: the k lowest-entropy ones, k the largest
    with sum(entropies) - max(entropies) <= bound (an upper bound on the tokens' joint mutual
    information, so their draws are nearly independent). entropy: [B, N] -> bool [B, N]."""
    ordered, order = torch.sort(entropy, dim=-1, descending=False)           # [B, N]
    keep = torch.cumsum(ordered, dim=-1) - ordered <= bound                    # ordered[i] is the running max
    return torch.scatter(torch.zeros_like(keep), dim=-1, index=order, src=keep)


def is_diffusion_gemma(model) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) == "diffusion_gemma"


# -- the loop --------------------------------------------------------------------------------------
@torch.no_grad()
def decode(model, input_ids: torch.Tensor, *, tokenizer=None, prompt: str = "", seed: int | None = None,
           name: str = "diffusion-gemma", **generation) -> CanvasRun:
    """Decode `input_ids` ([1, P]) as `model.generate(input_ids, **generation)` does, recording every
    denoising step. seed: torch.manual_seed(seed) first (generate draws from the global generator).
    generation: generate()'s own arguments (max_new_tokens, max_denoising_steps, t_min, t_max,
    sampler_config, stability_threshold, confidence_threshold, eos_token_id, pad_token_id)."""
    if not is_diffusion_gemma(model):
        raise ValueError("decode() runs DiffusionGemma's sampler; this model is a "
                         f"{getattr(getattr(model, 'config', None), 'model_type', type(model).__name__)!r}")
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be one prompt, shape [1, P]; got {tuple(input_ids.shape)}")
    if seed is not None:
        torch.manual_seed(seed)
    config, extra = model._prepare_generation_config(None, **generation)
    if extra:
        raise ValueError(f"unknown generation arguments: {', '.join(sorted(extra))[:200]}")
    N, V = model.config.canvas_length, model.config.text_config.vocab_size
    prompt_len = cur_len = input_ids.shape[1]
    max_length, max_new_tokens = model._prepare_generated_length(config, cur_len)
    cache = model._prepare_cache_for_generation(generation_config=config, batch_size=1, max_length=max_length)
    device = input_ids.device
    eos = torch.tensor(config.eos_token_id, device=device) if config.eos_token_id is not None else None
    encoder_positions = torch.arange(0, cur_len, dtype=torch.int32, device=device)[None]
    decoder_positions = torch.arange(cur_len, cur_len + N, dtype=torch.int32, device=device)[None]
    attention = torch.ones((1, cur_len), dtype=torch.bool, device=device)
    decoder_attention = torch.nn.functional.pad(attention, (0, N), value=True)
    stopping = model._prepare_ar_stopping_criteria(config, None)
    finished = torch.zeros(1, dtype=torch.bool, device=device)
    records: list[DenoiseRecord] = []
    sequence = input_ids
    for canvas in range(-(-max_new_tokens // N)):
        # encode: everything before this canvas into the cache (the prompt, then each finished canvas)
        unencoded, encoder_masks = model._prepare_encoder_inputs(
            input_ids=sequence, attention_mask=attention, encoder_position_ids=encoder_positions,
            past_key_values=cache, is_prefill=canvas == 0, canvas_length=N, batch_size=1)
        cache = model.model.encoder(input_ids=unencoded, attention_mask=encoder_masks, past_key_values=cache,
                                    position_ids=encoder_positions).past_key_values
        current = torch.randint(low=0, high=V, size=(1, N), device=device)      # the canvas starts as noise
        masks = model.model.decoder.create_diffusion_decoder_attention_mask(
            config=model.config, inputs_embeds=current.unsqueeze(-1), past_key_values=cache,
            decoder_attention_mask=decoder_attention)
        argmax, self_conditioning, history = current, None, []
        for step, steps_left in enumerate(reversed(range(1, config.max_denoising_steps + 1))):
            current, argmax, self_conditioning, stop, record = _denoise(
                model, config, current, self_conditioning, masks, cache, decoder_positions, steps_left, history)
            records.append(DenoiseRecord(canvas=canvas, step=step, **record))
            if stop:
                break
        sequence = torch.cat([sequence, argmax], dim=-1)
        sequence, finished = model._finalize_canvas(
            input_ids=sequence, finished_sequences=finished, generation_config=config, stopping_criteria=stopping,
            canvas_length=N, eos_tensor=eos)
        if finished.all():
            break
        cur_len, decoder_attention, attention, encoder_positions, decoder_positions = model._prepare_kwargs_for_next_canvas(
            attention_mask=attention, decoder_attention_mask=decoder_attention, decoder_position_ids=decoder_positions,
            canvas_length=N, cur_len=cur_len)
    tokens = sequence[0, prompt_len:].tolist()
    settings = {"canvas_length": N, "max_denoising_steps": config.max_denoising_steps, "t_min": config.t_min,
                "t_max": config.t_max, "entropy_bound": config.sampler_config.entropy_bound,
                "stability_threshold": config.stability_threshold, "confidence_threshold": config.confidence_threshold,
                "max_new_tokens": max_new_tokens, "seed": seed}
    answer = tokenizer.decode([t for t in tokens if t != config.pad_token_id]) if tokenizer is not None else ""
    return CanvasRun(model=name, prompt=prompt, prompt_ids=input_ids[0].tolist(), tokens=tokens, answer=answer,
                     settings=settings, records=records, pad_token_id=config.pad_token_id)


def _denoise(model, config, current, self_conditioning, masks, cache, positions, steps_left: int, history: list):
    """One denoising step of one canvas, in generate's order of random draws (sample, then renoise).
    current: [1, N]. -> (next canvas, argmax canvas, self-conditioning logits, stop, record fields)."""
    # predict: every position of the canvas, given the cache and the previous step's logits
    logits = model(decoder_input_ids=current, self_conditioning_logits=self_conditioning, decoder_attention_mask=masks,
                   past_key_values=cache, decoder_position_ids=positions).logits               # [1, N, V]
    left = torch.tensor(steps_left, device=current.device, dtype=torch.int32)
    temperature = linear_temperature(left, config.max_denoising_steps, config.t_min, config.t_max)
    scaled = logits / temperature
    # sample: one draw per position, and the argmax (the answer if this is the last step)
    probs = torch.softmax(scaled, dim=-1, dtype=torch.float32)
    sampled = torch.multinomial(probs.view(-1, probs.shape[-1]), num_samples=1).view(current.shape)
    argmax = torch.argmax(scaled, dim=-1)
    # accept: the low-entropy draws; renoise: a uniform random token everywhere else
    entropy = token_entropy(scaled)                                                            # [1, N]
    accepted = entropy_bound_accept(entropy, config.sampler_config.entropy_bound)
    kept = torch.where(accepted, sampled, current)
    noise = torch.randint(low=0, high=model.config.text_config.vocab_size, size=current.shape, device=current.device)
    following = torch.where(~accepted, noise, kept)
    # stop: the argmax stable for stability_threshold steps and the mean entropy under the threshold
    stop = _stable_and_confident(history, argmax, entropy, config)
    record = dict(steps_left=steps_left, temperature=float(temperature), tokens_in=current[0].tolist(),
                  sampled=sampled[0].tolist(), argmax=argmax[0].tolist(), entropy=entropy[0].tolist(),
                  accepted=accepted[0].nonzero().flatten().tolist(), renoised=(~accepted[0]).nonzero().flatten().tolist(),
                  stopped=stop)
    return following, argmax, scaled.to(model.model.decoder.embed_tokens.weight.dtype), stop, record


def _stable_and_confident(history: list, argmax: torch.Tensor, entropy: torch.Tensor, config) -> bool:
    """generate's stopping rule; `history` holds the last stability_threshold argmax canvases (changed
    in place: it is the loop's state for this canvas)."""
    if config.stability_threshold is None or config.confidence_threshold is None:
        return False
    need = config.stability_threshold
    stable = need == 0 or (len(history) == need and all(torch.equal(h, argmax) for h in history))
    if need:
        history.append(argmax)
        del history[:-need]
    return bool(stable and entropy.mean() < config.confidence_threshold)


# -- a folder on disk: load it, decode a prompt, save the trace ------------------------------------
def check_diffusion_gemma(path) -> None:
    """ValueError unless the folder `path` is DiffusionGemma's in its config and in its weights, which
    cover what the config describes: a config saying `diffusion_gemma` over another model's weights (a
    Qwen2's `model.layers.*`) would be taken for one and only fail when decoded. Reads config.json and the
    safetensors headers, no tensor (call lopa.models.folder.check_folder first: it refuses files that
    could block)."""
    from lopa.models.folder import check_fits, quoted, read_config, stored_shapes
    raw, where = read_config(path), quoted(path)
    if raw.get("model_type") != "diffusion_gemma":
        raise ValueError(f"{where} is not a DiffusionGemma checkpoint (config.json: model_type "
                         f"{str(raw.get('model_type'))[:30]!r})")
    architectures = raw.get("architectures") or ["DiffusionGemmaForBlockDiffusion"]
    names = stored_shapes(path)
    ours = any(n.startswith("model.encoder.") for n in names) and any(n.startswith("model.decoder.") for n in names)
    if not isinstance(raw.get("text_config"), dict) or "DiffusionGemmaForBlockDiffusion" not in architectures \
            or not ours:
        found = next(iter(sorted(names)), "none")
        raise ValueError(f"`config.json` in {where} says diffusion_gemma over another model's weights "
                         f"(`{found[:40]}`): fix its model_type")
    check_fits(path, raw)


def load_diffusion_gemma(path, device: str | None = None):
    """(model, tokenizer) of a DiffusionGemma folder, through the loaders' checks (the folder's files and
    sizes, safetensors only, a config and weights that are both DiffusionGemma's, local files, the device
    and dtype every loader picks)."""
    from pathlib import Path

    from huggingface_hub.errors import StrictDataclassError
    from transformers import DiffusionGemmaForBlockDiffusion

    from lopa.models.folder import quoted
    from lopa.models.loading import check_weights, from_pretrained_kwargs, load_tokenizer, pick_device
    path, dev = Path(path), pick_device(device)
    check_weights(path)
    check_diffusion_gemma(path)
    try:
        model = DiffusionGemmaForBlockDiffusion.from_pretrained(path, **from_pretrained_kwargs(dev))
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"could not load DiffusionGemma from {path}: {err}") from err
    except StrictDataclassError as err:         # transformers' own checks of a config's fields
        raise ValueError(f"`config.json` in {quoted(path)}: {str(err).splitlines()[-1].strip()[:120]}") from None
    return model.to(dev).eval(), load_tokenizer(path)


def main(argv=None) -> int:
    """python -m lopa.models.diffusion_gemma --model DIR --prompt TEXT [--out trace.json]"""
    import argparse

    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig
    parser = argparse.ArgumentParser(prog="python -m lopa.models.diffusion_gemma",
                                     description="Decode one prompt with DiffusionGemma's own sampler and save the "
                                                 "step-by-step trace (lopa-canvas-trace/1).")
    parser.add_argument("--model", required=True, help="a DiffusionGemma folder (config.json, safetensors, tokenizer)")
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the tokenizer's chat template")
    parser.add_argument("--device")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, help="default: the checkpoint's generation config, else 256")
    parser.add_argument("--max-denoising-steps", type=int, help="default: the generation config's, else 48")
    parser.add_argument("--entropy-bound", type=float, help="default: the generation config's, else 0.1")
    parser.add_argument("--out", help="write the trace here (JSON)")
    args = parser.parse_args(argv)
    try:
        model, tokenizer = load_diffusion_gemma(args.model, args.device)
        text = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}], tokenize=False,
                                             add_generation_prompt=True) if args.chat else args.prompt
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=not args.chat)["input_ids"]
        generation = {k: v for k, v in (("max_new_tokens", args.max_new_tokens),
                                        ("max_denoising_steps", args.max_denoising_steps)) if v is not None}
        if args.entropy_bound is not None:
            generation["sampler_config"] = EntropyBoundSamplerConfig(entropy_bound=float(args.entropy_bound))
        run = decode(model, ids.to(next(model.parameters()).device), tokenizer=tokenizer, prompt=args.prompt,
                     seed=args.seed, name=str(args.model).rstrip("/").split("/")[-1], **generation)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", flush=True)
        return 2
    print(run.answer)
    print(f"{len(run.tokens)} tokens, {run.forwards} denoising forwards, {run.tokens_per_forward():.2f} tokens/forward")
    if args.out:
        print(f"trace: {run.save(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
