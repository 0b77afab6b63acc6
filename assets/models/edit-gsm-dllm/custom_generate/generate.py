"""LoPA (lookahead parallel decoding) for this masked diffusion LM, as transformers' generate().

transformers runs this file when the model is loaded with trust_remote_code=True (generate() is
then LoPA's), or when generate() is called with custom_generate=<this model> and
trust_remote_code=True. Without it, this model's generation_config.json makes plain generate()
stop with an error: a diffusion LM decoded left to right returns garbage.

The decoding itself is the `lopa` package (LoPA Explorer); this file only hands over to it.
Arguments: transformers' generate() ones plus LoPA's settings (k, tau_conf, tau_add, tau_act,
block_size, commit, confidence, attention, order, order_seed, branch_score, lookahead_min_prob, seed), by keyword or
in a lopa.hf.LopaGenerationConfig. The prompt ids must already carry the model's prompt template
(config.json: lopa.prompt_template).
"""

# Imported inside try: transformers then leaves the check to us (it would otherwise ask for a
# `pip install lopa`, a different package), and we can say how to get it.
try:
    from lopa.hf.generation import generate as _lopa_generate
except ImportError as err:
    raise ImportError(
        "this model decodes with LoPA, which needs the `lopa` package (LoPA Explorer): "
        "pip install lopa-explorer (or run from a checkout of the LoPA Explorer repository, with it on "
        f"sys.path). Import failed with: {err}") from err


def generate(*args, model, **kwargs):
    """See lopa.hf.generation.generate. `model` is keyword-only because transformers passes it by
    name: generate(model=model, ...) for custom_generate=..., and functools.partial(generate,
    model=model) as the model's generate() when loaded with trust_remote_code=True, where the
    caller's first positional argument is the input ids."""
    return _lopa_generate(model, *args, **kwargs)
