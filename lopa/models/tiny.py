"""Tiny random checkpoints from the stock classes: what the tests decode, and a DiffusionGemma folder a
visitor can try the explorer's DiffusionGemma panel on without downloading 26B of weights:

    python -m lopa.models.tiny checkpoints/diffusiongemma-tiny

writes a two-layer DiffusionGemma (57 K parameters, a canvas of 8 tokens) with a word-level tokenizer,
using only the app's own dependencies. Its weights are random: it shows the sampler at work (canvases,
entropies, acceptances), not answers.

What DiffusionGemma's config needs beyond small text sizes: a small `vision_config` (the stock vision
tower alone makes 167 M parameters; a small `position_embedding_size` keeps its table small too) and a
`canvas_length` (the tokens one canvas denoises; 256 by default).
"""

from __future__ import annotations

import torch

# The word-level vocabulary: the mask, end-of-text and padding tokens first, digits, a few words.
WORDS = ["<|mask|>", "<|endoftext|>", "<|pad|>"] + [str(d) for d in range(10)] + \
        "Question : Answer how many apples does Tom have ? he buys gives + - = #### and".split()
DIFFUSION_GEMMA_VOCAB, DIFFUSION_GEMMA_CANVAS = 64, 8


def tiny_tokenizer():
    """A word-level tokenizer over WORDS (digits split one by one; an unknown word reads as "?")."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="?"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, mask_token="<|mask|>", eos_token="<|endoftext|>",
                                   pad_token="<|pad|>", unk_token="?")


def tiny_diffusion_gemma(seed: int = 0):
    """A two-layer DiffusionGemma (one sliding, one full attention layer, 4 experts) with a one-layer
    vision tower: the stock classes at a size a CPU runs in milliseconds."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    from transformers.models.diffusion_gemma.configuration_diffusion_gemma import DiffusionGemmaTextConfig
    text = DiffusionGemmaTextConfig(
        vocab_size=DIFFUSION_GEMMA_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=16, max_position_embeddings=256,
        sliding_window=16, layer_types=["sliding_attention", "full_attention"], num_experts=4, top_k_experts=2,
        moe_intermediate_size=16, eos_token_id=1, pad_token_id=0)
    vision = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 64}
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(DiffusionGemmaConfig(text_config=text, vision_config=vision,
                                                                 canvas_length=DIFFUSION_GEMMA_CANVAS)).eval()
    with torch.no_grad():   # sharper predictions than random weights give: several acceptances a step
        model.model.decoder.norm.weight.mul_(30)
    return model


def save_tiny_diffusion_gemma(folder, seed: int = 0):
    """tiny_diffusion_gemma(seed) saved in `folder` with tiny_tokenizer(): a folder lopa's loader and the
    explorer open. -> the folder (a Path)."""
    from pathlib import Path
    folder = Path(folder)
    tiny_diffusion_gemma(seed).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def main(argv=None) -> int:
    """python -m lopa.models.tiny OUT_DIR [--seed N]"""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m lopa.models.tiny",
                                     description="Write a tiny random DiffusionGemma folder (config, safetensors, "
                                                 "tokenizer) that `python -m lopa.models.diffusion_gemma` and the "
                                                 "explorer's DiffusionGemma panel decode.")
    parser.add_argument("out", help="the folder to write (created; files already there are replaced)")
    parser.add_argument("--seed", type=int, default=0, help="the random weights' seed")
    args = parser.parse_args(argv)
    try:
        folder = save_tiny_diffusion_gemma(args.out, args.seed)
    except OSError as err:
        print(f"error: cannot write {args.out}: {err.strerror or err}", flush=True)
        return 2
    print(f"wrote a tiny DiffusionGemma (random weights) to {folder}: type that folder in the explorer's model box "
          f"(a local run loads any folder; a server limited by LOPA_MODEL_DIRS must list it), or run "
          f"python -m lopa.models.diffusion_gemma --model {folder} --prompt 'how many apples'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
