"""A model folder as every loader may read it: checked on disk before anything opens a file in it.

A folder's name comes from a command line, the app's model box, a share link or an API call, and its
files from whoever wrote them. Before a loader (loading, families, diffusion_gemma) or transformers
reads one:

- its name fits a file system (no part over NAME_MAX bytes, no NUL), so no lookup fails half-way
  with ENAMETOOLONG;
- it is a folder reached without a looping link, of at most MAX_ENTRIES entries, each a folder or a
  regular file: a named pipe opened for reading waits until something writes to it (a loader opening
  `model.safetensors` would hold the app's one model slot, every visitor's), and a device can be
  endless. Only `stat` looks at them (no open);
- its JSON and tokenizer files are within a size bound, by `stat` too: a 1 GiB config.json would
  otherwise be read whole on every pick;
- its JSON is read by read_json: opened non-blocking and checked again on the open file (a file swapped
  for a pipe after the check cannot block either), at most its bound read, parsed only when nested at
  most MAX_JSON_DEPTH deep (Python's parser recurses: 200,000 brackets overflow it);
- config.json's sizes are whole numbers in sane ranges (SIZES: a head count of 0 divides by zero in
  transformers, a million layers builds a million modules), and the model they describe is not bigger
  than its weights (check_fits): transformers allocates and initialises whatever the weights lack
  before it reports them missing.

Each refusal is a ValueError naming the file, the folder and what to fix, quoting at most QUOTE_CHARS
of a name. Transformers opens the files again after these checks; only a file replaced in between
(by someone who may write to the folder) escapes them.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from itertools import accumulate
from pathlib import Path

NAME_MAX = 255                       # bytes of one part of a path (Linux, macOS)
PATH_MAX = 4096                      # bytes of a whole path
MAX_ENTRIES = 4096                   # a model folder holds a few files; a sharded 70B checkpoint ~40
MAX_JSON_BYTES = 16 * 2**20          # config.json, generation_config.json, an index: kilobytes in practice
# tokenizer.json of a 262k vocabulary (Gemma 3, DiffusionGemma) is 33 MB; vocab.json / merges.txt a few MB.
MAX_TOKENIZER_BYTES = 64 * 2**20
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja")
MAX_JSON_DEPTH = 64                  # real configs and tokenizers nest fewer than 10 deep
QUOTE_CHARS = 60
# Whole-number sizes a config.json (or one of its `*_config` parts) may give, inclusive, by the names
# the families this package loads use (transformers' own, LLaDA's `d_model` / `n_layers` / ...). The
# ranges hold every published checkpoint with room to spare (Llama 3.1 405B: 126 layers, 16,384
# wide; Gemma 3: 262,144 tokens; Llama 4 Scout: 10M positions).
SIZES = {
    **dict.fromkeys(("num_hidden_layers", "n_layers"), (1, 1024)),
    **dict.fromkeys(("num_attention_heads", "n_heads", "num_key_value_heads", "n_kv_heads"), (1, 1024)),
    **dict.fromkeys(("hidden_size", "d_model"), (1, 131_072)),
    **dict.fromkeys(("intermediate_size", "mlp_hidden_size", "moe_intermediate_size"), (1, 2**20)),
    **dict.fromkeys(("head_dim", "global_head_dim"), (1, 4096)),
    **dict.fromkeys(("vocab_size", "embedding_size"), (1, 2**22)),
    **dict.fromkeys(("max_position_embeddings", "max_sequence_length"), (1, 2**24)),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "top_k_experts"),
                    (0, 4096)),
    "canvas_length": (1, 65_536),
}
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
# A JSON string (escapes included), and everything but brackets: what json_depth strips before counting.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def quoted(path) -> str:
    """A path as a message quotes it: in backticks, its last QUOTE_CHARS characters (where a typo shows);
    characters that are not text (a lone surrogate from undecodable bytes) as `?`, so the message can be sent."""
    text = str(path).encode("utf-8", "replace").decode("utf-8")
    return f"`{text}`" if len(text) <= QUOTE_CHARS else f"`...{text[-(QUOTE_CHARS - 3):]}` ({len(text)} characters)"


def _why(err: OSError) -> str:
    reasons = {errno.ELOOP: "a link in it loops", errno.ENOENT: "it does not exist",
               errno.ENOTDIR: "a part of it is a file", errno.EACCES: "permission denied",
               errno.ENAMETOOLONG: "its name is too long"}
    return reasons.get(err.errno, err.strerror or type(err).__name__)


def check_name(path) -> None:
    """ValueError unless `path` is a name a file system can hold (no NUL, no part over NAME_MAX bytes)."""
    try:
        raw = os.fsencode(path)
    except (UnicodeError, TypeError):
        raise ValueError(f"{quoted(path)} is not a file name: give the folder's path") from None
    if b"\0" in raw:
        raise ValueError(f"{quoted(path)} holds a NUL character: give the folder's path")
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise ValueError(f"{quoted(path)} has a name over {NAME_MAX} bytes (or is over {PATH_MAX}), which no folder "
                         "has: check the path")


def check_folder(path) -> None:
    """ValueError unless `path` is a folder a loader may read: see the module docstring (name, entries,
    sizes). Looks at nothing but names and `stat`; opens no file."""
    check_name(path)
    where = quoted(path)
    try:
        if not stat.S_ISDIR(os.stat(path).st_mode):
            raise ValueError(f"no model in {where}: it is a file; give its folder")
        with os.scandir(path) as entries:
            for count, entry in enumerate(entries, 1):
                if count > MAX_ENTRIES:
                    raise ValueError(f"{where} holds more than {MAX_ENTRIES} files; a model folder holds a few dozen")
                _check_entry(entry, where)
    except OSError as err:
        raise ValueError(f"no model in {where}: {_why(err)}") from None
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ValueError(f"no model in {where}: expected a Hugging Face folder with config.json and safetensors weights")


def _check_entry(entry: os.DirEntry, where: str) -> None:
    name = quoted(entry.name)
    try:
        info = os.stat(entry.path)          # through links: what a loader would open
    except OSError as err:
        raise ValueError(f"{name} in {where} cannot be read ({_why(err)}): remove or fix it") from None
    if stat.S_ISDIR(info.st_mode):
        return
    if not stat.S_ISREG(info.st_mode):
        kind = "named pipe" if stat.S_ISFIFO(info.st_mode) else "socket" if stat.S_ISSOCK(info.st_mode) else "device"
        raise ValueError(f"{name} in {where} is a {kind}, not a regular file (reading it could wait forever): "
                         "remove it")
    limit = file_limit(entry.name)
    if limit is not None and info.st_size > limit:
        raise ValueError(f"{name} in {where} is {info.st_size / 2**20:.0f} MiB; this file may be at most "
                         f"{limit / 2**20:.0f} MiB: replace it with the checkpoint's own")


def file_limit(name: str) -> int | None:
    """The bytes a file called `name` may have in a model folder (None: weights, bounded by their loader)."""
    if name in TOKENIZER_FILES:
        return MAX_TOKENIZER_BYTES
    return MAX_JSON_BYTES if name.endswith(".json") else None


def json_depth(text: str) -> int:
    """How deep a JSON text nests its arrays and objects (strings are skipped), without parsing it."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0)


def read_json(file, limit: int | None = None):
    """The JSON in `file`, read within `limit` bytes (default: file_limit of its name) from a regular file
    opened non-blocking, and nested at most MAX_JSON_DEPTH deep. ValueError naming the file and its folder."""
    file = Path(file)
    limit = limit if limit is not None else (file_limit(file.name) or MAX_JSON_BYTES)
    name, where = quoted(file.name), quoted(file.parent)
    check_name(file)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise ValueError(f"{name} in {where} cannot be read ({_why(err)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{name} in {where} is not a regular file (reading it could wait forever): remove it")
        if info.st_size > limit:
            raise ValueError(f"{name} in {where} is {info.st_size / 2**20:.0f} MiB; it may be at most "
                             f"{limit / 2**20:.0f} MiB")
        chunks, left = [], limit + 1            # one byte more than allowed: a file that grew is caught
        while left > 0:
            chunk = os.read(fd, min(left, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as err:
        raise ValueError(f"{name} in {where} cannot be read ({_why(err)})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise ValueError(f"{name} in {where} is over {limit / 2**20:.0f} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name} in {where} is not UTF-8 text: replace it with the checkpoint's own") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"{name} in {where} nests deeper than {MAX_JSON_DEPTH} levels: replace it with the "
                         "checkpoint's own")
    try:
        return json.loads(text)
    except ValueError as err:                   # JSONDecodeError, or an integer of thousands of digits
        raise ValueError(f"{name} in {where} is not valid JSON ({str(err)[:80]})") from None


def read_config(path) -> dict:
    """config.json of the folder `path` (read_json), its sizes checked (check_sizes)."""
    raw = read_json(Path(path) / "config.json")
    if not isinstance(raw, dict):
        raise ValueError(f"`config.json` in {quoted(path)} must hold a JSON object, not a {type(raw).__name__}")
    check_sizes(raw, path)
    return raw


def _parts(raw: dict, depth: int = 0):
    """The config and its `*_config` parts (text_config, vision_config, ...): each describes a model."""
    yield raw
    for key, value in raw.items():
        if isinstance(value, dict) and key.endswith("_config") and depth < MAX_JSON_DEPTH:
            yield from _parts(value, depth + 1)


def check_sizes(raw: dict, path) -> None:
    """ValueError naming the first size of config.json (SIZES) that is not a whole number in its range."""
    for part in _parts(raw):
        for key, (low, high) in SIZES.items():
            value = part.get(key)
            values = value if isinstance(value, list) and len(value) <= 4096 else [value]   # per-layer sizes
            for v in values:
                if v is None:
                    continue
                if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                    raise ValueError(f"`config.json` in {quoted(path)}: {key} must be a whole number from {low} to "
                                     f"{high}, got {str(v)[:20]}: fix the config")
        heads, kv = part.get("num_attention_heads"), part.get("num_key_value_heads")
        if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
            raise ValueError(f"`config.json` in {quoted(path)}: num_attention_heads ({heads}) must be a multiple of "
                             f"num_key_value_heads ({kv}): fix the config")


def stored_shapes(path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} over the folder's *.safetensors files, from their headers (no tensor is read).
    Call check_folder first: safetensors opens each file blocking. ValueError naming a file that is not valid."""
    from safetensors import SafetensorError, safe_open
    shapes = {}
    for file in sorted(Path(path).glob("*.safetensors")):
        try:
            with safe_open(file, framework="pt") as f:
                shapes.update({name: tuple(f.get_slice(name).get_shape()) for name in f.keys()})
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{file} is not a valid safetensors file (corrupt, truncated, or its header does not "
                             f"match its size): {err}") from None
    return shapes


def implied_parameters(raw: dict) -> int:
    """A lower bound on the parameters of the largest model config.json (or a `*_config` part) describes:
    its embeddings, a norm per layer and, without experts, a two-matrix MLP per layer. Every architecture
    this package loads has at least these."""
    def size(part, *keys):
        value = next((part[k] for k in keys if isinstance(part.get(k), int)), 0)
        return value if not isinstance(value, bool) else 0
    most = 0
    for part in _parts(raw):
        hidden, layers = size(part, "hidden_size", "d_model"), size(part, "num_hidden_layers", "n_layers")
        vocab, inner = size(part, "vocab_size", "embedding_size"), size(part, "intermediate_size", "mlp_hidden_size")
        dense = 0 if any(part.get(k) for k in EXPERT_KEYS) else 2 * hidden * inner
        most = max(most, vocab * hidden + layers * (hidden + dense))
    return most


def check_fits(path, raw: dict) -> None:
    """ValueError when config.json describes a model more than twice the parameters its safetensors hold
    (twice: packed low-bit weights store two values in one element). Folders without safetensors pass
    (their loader refuses them by name)."""
    stored = sum(math.prod(shape) for shape in stored_shapes(path).values())
    implied = implied_parameters(raw)
    if stored and implied > 2 * stored:
        raise ValueError(f"`config.json` in {quoted(path)} describes at least {implied:,} parameters, its weights "
                         f"hold {stored:,}: fix the config's sizes")
