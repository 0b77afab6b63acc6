"""Make a model folder the engine decodes usable from transformers (`lopa hf-export DIR`):

1. `custom_generate/` (generate.py + requirements.txt), copied from the bundled model's: with
   trust_remote_code=True, transformers' generate() becomes LoPA decoding (lopa.hf.generation).
2. A guard in generation_config.json, so that plain generate() (no trust_remote_code) stops with
   an error that says how to decode the model, instead of returning left-to-right garbage.

Why the guard is `bad_words_ids`: a stock checkpoint (Qwen2 etc., no remote modeling code) has no
hook that runs at generate() time, and transformers 5 loads `custom_generate/` only when the caller
passes trust_remote_code=True, otherwise silently ignoring it. bad_words_ids is read as it is by
GenerationConfig (loading the model still works, our loader included) and is checked only when
generate() builds its logits processors, where a string fails with transformers' ValueError
"`bad_words_ids` has to be a non-empty list, but is <our message>". generate(custom_generate=...)
returns before that point, so the LoPA path never meets it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lopa.models.loading import DEFAULT_MODEL

CUSTOM_GENERATE = "custom_generate"
GUARD_KEY = "bad_words_ids"
GUARD_MESSAGE = (
    "[LoPA] this checkpoint is a masked diffusion LM: plain generate() would decode it left to right and "
    "return garbage. Decode it with LoPA (pip install lopa-explorer): load it with "
    "AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True), whose generate() then runs the "
    "model's custom_generate/generate.py, or call model.generate(..., custom_generate=path, "
    "trust_remote_code=True). See the model card, 'Use with transformers'. (This text is the model's "
    "generation_config.json bad_words_ids, placed there so that plain generate() stops here.)")


def add_transformers_support(path: str | Path) -> Path:
    """Give the model folder `path` LoPA's custom_generate/ and the plain-generate() guard. Additive
    and idempotent: other files and other generation_config.json keys are left as they are.
    ValueError if the engine cannot decode the folder through a stock transformers class."""
    from lopa.models.families import checkpoint_family
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is not a model folder (no config.json)")
    family = checkpoint_family(path)
    if family != "hf":
        raise ValueError(f"{path} is a {family} checkpoint: transformers loads it through its own remote modeling "
                         "code, not the stock class LoPA drives; decode it with `lopa generate --model` instead")
    _check_decodable(path)
    source = DEFAULT_MODEL / CUSTOM_GENERATE
    if path.resolve() != DEFAULT_MODEL.resolve():
        shutil.copytree(source, path / CUSTOM_GENERATE, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    config_file = path / "generation_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    config[GUARD_KEY] = GUARD_MESSAGE
    # sort_keys, indent 2 and a final newline: what GenerationConfig.save_pretrained writes.
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def _check_decodable(path: Path) -> None:
    """The folder has a spec the engine can use (a mask token, EOS ids): ValueError naming what is missing."""
    from transformers import AutoConfig

    from lopa.models.loading import load_tokenizer, spec_from_pretrained
    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    spec_from_pretrained(config, load_tokenizer(path), path.name)
