"""transformers-native LoPA: `model.generate(...)` decoding with the engine.

    generate              the function a model's custom_generate/generate.py hands over to
    LopaGenerationConfig  GenerationConfig + LoPA's settings; the one mapping to DecodeSettings
    RoundStreamer         a streamer that sees every round (transformers' diffusion streamer protocol)
    add_transformers_support  give a model folder custom_generate/ and the plain-generate() guard

    model = AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)   # runs DIR/custom_generate
    out = model.generate(**tokenizer(prompt, return_tensors="pt"), k=4, max_new_tokens=64)

Layer: imports the core and models; imported by train (its export adds the same files) and the CLI.
"""

from lopa.hf.config import LopaGenerationConfig
from lopa.hf.export import GUARD_MESSAGE, add_transformers_support
from lopa.hf.generation import LopaGenerateOutput, generate
from lopa.hf.streaming import RoundStreamer

__all__ = ["generate", "LopaGenerationConfig", "LopaGenerateOutput", "RoundStreamer", "add_transformers_support",
           "GUARD_MESSAGE"]
