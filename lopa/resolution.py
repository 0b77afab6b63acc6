"""The one resolution of a request into the settings that run (style habit 21), and the command
line's flags that make such a request.

What the user set (None = unset), a paper preset, the model's own values (ModelSpec: attention,
trained block size, ModelSpec.decode), the surface's defaults and the engine's defaults
(lopa.settings.DecodeSettings) meet in `resolution`, with the precedence written once. Every surface
calls it: `lopa generate`, the benchmarks and the studies through their flags (add_settings_arguments,
settings_from_args), transformers' generate() and /decode through settings_for_model, the app
through resolve.
"""

from __future__ import annotations

import argparse

from lopa.settings import (
    DECODERS,
    MAX_NEW_TOKENS,
    PAPER_PRESETS,
    SETTINGS,
    DecodeSettings,
    ModelSpec,
    Setting,
    check_settings,
    decoder_settings,
)

# The lookahead a run gets when it names none (`lopa generate`, transformers' generate(), /decode).
DEFAULT_K = 4
# Where a resolved value came from (resolution()), highest precedence first.
SOURCES = ("user", "preset", "model", "surface", "engine")


def model_settings(spec: ModelSpec | None) -> dict:
    """The decode settings a checkpoint asks for: its attention, its trained block size (if known)
    and whatever else its spec carries (ModelSpec.decode)."""
    if spec is None:
        return {}
    own = {"attention": spec.attention, **({"block_size": spec.block_size} if spec.block_size else {})}
    return {**own, **spec.decode}


def resolution(request: dict | None = None, spec: ModelSpec | None = None, *, preset=None, decoder: str = "lopa",
               defaults: dict | None = None) -> tuple[DecodeSettings, dict[str, str]]:
    """The one resolution of a request into the settings that run (style habit 21), and where each
    value came from ({name: one of SOURCES}).

    request: what the user set, {name: value}; a value of None (or a name left out) is unset. Values
    are read by the registry (Setting.parse: text from a form or a link is fine), so a bad one fails
    here, naming the setting. preset: a PAPER_PRESETS name or a {name: value} dict. defaults: the
    surface's own starting point (the app's k = 4 and 64 tokens, a study's 128). Precedence, written
    once: request > preset > the model's own (model_settings) > defaults > the engine's default. The
    decoder's overrides (DECODERS: d2f is k = 0) come last, since choosing it is part of the request.
    A branch_cost set at any layer without a cost_curve there or above chooses the linear curve it prices.
    A max_new_tokens nobody asked for is rounded up to whole blocks of the resolved block size."""
    if isinstance(preset, str):
        if preset not in PAPER_PRESETS:
            raise ValueError(f"preset must be one of {tuple(PAPER_PRESETS)}, got {preset[:40]!r}")
        preset = PAPER_PRESETS[preset]
    layers = {  # lowest precedence first
        "surface": check_settings({n: v for n, v in (defaults or {}).items() if v is not None}),
        "model": model_settings(spec),
        "preset": check_settings({n: v for n, v in (preset or {}).items() if v is not None}),
        "user": check_settings({n: v for n, v in (request or {}).items() if v is not None}),
    }
    values, sources = {}, {}
    for source, layer in layers.items():
        values.update(layer)
        sources.update(dict.fromkeys(layer, source))
    below = list(layers).index                                    # a branch_cost asked for is the curve asked for
    if "branch_cost" in sources and ("cost_curve" not in sources
                                     or below(sources["cost_curve"]) < below(sources["branch_cost"])):
        values["cost_curve"], sources["cost_curve"] = "linear", sources["branch_cost"]
    block = values.get("block_size", SETTINGS["block_size"].default)
    length = values.get("max_new_tokens", SETTINGS["max_new_tokens"].default)
    if sources.get("max_new_tokens") not in ("user", "preset") and length % block:
        values["max_new_tokens"] = min(-(-length // block) * block, MAX_NEW_TOKENS // block * block)
    settings = decoder_settings(decoder, DecodeSettings(**values))      # its overrides (they never touch a length)
    sources.update(dict.fromkeys(DECODERS[decoder], "user"))
    return settings, {name: sources.get(name, "engine") for name in SETTINGS}


def resolve(request: dict | None = None, spec: ModelSpec | None = None, **kwargs) -> DecodeSettings:
    """resolution()'s settings alone: what every surface decodes with."""
    return resolution(request, spec, **kwargs)[0]


def settings_diff(settings: DecodeSettings, baseline: DecodeSettings) -> dict:
    """{name: value} of `settings` where it differs from `baseline`, in registry order: what a
    command or a link must say so that a surface resolving from `baseline` reproduces `settings`. A branch_cost
    it names comes with the cost_curve, which a branch_cost alone would set to linear (resolution)."""
    diff = {name: getattr(settings, name) for name in SETTINGS if getattr(settings, name) != getattr(baseline, name)}
    if "branch_cost" in diff:
        diff = {**diff, "cost_curve": settings.cost_curve}
        diff = {name: diff[name] for name in SETTINGS if name in diff}          # registry order
    return diff


def settings_for_model(spec: ModelSpec | None, **fields) -> DecodeSettings:
    """`fields` (None = unset) resolved on the model with k = DEFAULT_K when unset: how `lopa generate`,
    transformers' generate() (lopa.hf) and /decode fill what the user left unset."""
    return resolve(fields, spec, defaults={"k": DEFAULT_K})


# -- the command-line flags of these settings (lopa generate, the benchmarks, the studies) --------
def _flag_type(spec: Setting):
    """argparse's reading of a number flag: text to the setting's type, failing with the registry's
    message. The range is checked where every surface checks it, in DecodeSettings, so a value out
    of range ends in the CLI's one `error:` line like any other bad setting."""
    def read(text: str):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(str(spec.error(text, " (a number)"))) from None
        if spec.type is int:
            if not value.is_integer():
                raise argparse.ArgumentTypeError(str(spec.error(text, " (a whole number)")))
            return int(text) if text.strip().lstrip("+-").isdigit() else int(value)
        return value
    read.__name__ = spec.type.__name__
    return read


def choice_type(name: str, choices):
    """argparse's reading of a choice flag: the text if it is one of `choices`, else an error naming
    the flag and quoting at most a short prefix of the text. argparse checks choices= only after the
    type, so its own `invalid choice` message, which echoes a value of any length, is never reached;
    choices= stays for the help and the parity test."""
    choices = tuple(choices)

    def read(text: str):
        if text not in choices:
            shown = repr(text) if len(text) <= 60 else repr(text[:57]) + f"... ({len(text)} characters)"
            raise argparse.ArgumentTypeError(f"{name} must be one of {', '.join(choices)}; got {shown}")
        return text
    read.__name__ = name
    return read


def add_settings_arguments(parser, per_row=(), choose_decoder: bool = True, defaults: dict | None = None) -> None:
    """A flag for every registry setting, except those in `per_row`: the settings a command sets
    itself for each row it runs (a benchmark's k and commit rule), which a flag could not change.
    choose_decoder adds --decoder and --preset (`lopa generate`). defaults: the command's own
    defaults where they differ from the registry's, for the help text."""
    defaults = {"k": DEFAULT_K, **(defaults or {})}
    g = parser.add_argument_group("decoding settings (defaults: the paper's GSM8K row, Table 5)")
    if choose_decoder:
        g.add_argument("--decoder", type=choice_type("decoder", DECODERS), choices=tuple(DECODERS), default="lopa",
                       help="lopa (k lookahead branches), d2f (k=0), single_block (Fast-dLLM style), one_token")
        g.add_argument("--preset", type=choice_type("preset", PAPER_PRESETS), choices=tuple(PAPER_PRESETS),
                       help="start from a paper preset (Table 5)")
    for name, spec in SETTINGS.items():
        if name in per_row:
            continue
        paper = f"; paper: {spec.paper}" if spec.paper is not None else ""
        kind = dict(type=choice_type(name, spec.choices), choices=spec.choices) if spec.choices \
            else dict(type=_flag_type(spec))
        g.add_argument(spec.flag, dest=name, **kind, help=f"{spec.explain()} (default {defaults.get(name, spec.default)}{paper})")


def flag_settings(args) -> dict:
    """The DecodeSettings fields given as flags (add_settings_arguments), those left unset omitted."""
    return {name: getattr(args, name) for name in SETTINGS if getattr(args, name, None) is not None}


def settings_from_args(args, spec=None, defaults: dict | None = None) -> DecodeSettings:
    """resolve() of a command's flags: the preset (--preset), the settings of a trace given as
    --script, then explicit flags, over the model's own values and the command's `defaults`
    (k = DEFAULT_K unless given); --decoder's overrides (d2f: k = 0) last."""
    request = {**(getattr(args, "script_settings", None) or {}), **flag_settings(args)}
    return resolve(request, spec, preset=getattr(args, "preset", None),
                   decoder=getattr(args, "decoder", None) or "lopa", defaults={"k": DEFAULT_K, **(defaults or {})})
