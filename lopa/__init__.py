"""LoPA: Lookahead Parallel Decoding for masked diffusion language models.

The engine decodes D2F-style pipelined blocks and, each round, verifies an anchor branch and
``k`` lookahead branches in one batched forward (Xu et al., arXiv 2512.16229; the method as we
implement it is restated in ``docs/method.md``). Every round yields a :class:`RoundRecord`.

Shape notation, used in every shape comment of the package; each letter means one thing:

    B   branches verified together in one forward (k + 1)
    W   window length: generated positions not yet in the prefix cache
    L   length of a forward's input (W, plus the prompt in the first round)
    P   prefix length: prompt + cached blocks, stored once in the KV cache
    V   vocabulary size
    N   block size
    H   attention heads, Hkv key/value heads, G = H // Hkv, D head dim
    M   masked positions under consideration
    R   ranks (world size) of a branch-parallel group (lopa.distributed)
    S   sequences in a training batch (lopa.train)
"""

from typing import TYPE_CHECKING

# The package's names, each loaded from its module when first asked for (PEP 562): `import lopa.trace`, the
# trace reader the app, the figures and the budget checks use, loads no torch (2 s a process on a 2-core CPU).
_WHERE = {
    "Decoder": "lopa.engine", "decode": "lopa.engine", "fork": "lopa.engine",
    "resolve": "lopa.resolution",
    "DECODERS": "lopa.settings", "PAPER_PRESETS": "lopa.settings", "DecodeSettings": "lopa.settings",
    "ModelSpec": "lopa.settings", "decoder_settings": "lopa.settings",
    "RoundRecord": "lopa.trace", "RunResult": "lopa.trace",
}
__all__ = [
    "DecodeSettings", "ModelSpec", "resolve", "decoder_settings", "PAPER_PRESETS", "DECODERS",
    "RoundRecord", "RunResult", "Decoder", "decode", "fork",
]

if TYPE_CHECKING:
    from lopa.engine import Decoder, decode, fork
    from lopa.resolution import resolve
    from lopa.settings import DECODERS, PAPER_PRESETS, DecodeSettings, ModelSpec, decoder_settings
    from lopa.trace import RoundRecord, RunResult


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'lopa' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_WHERE])
