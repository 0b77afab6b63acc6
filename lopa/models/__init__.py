"""Models: local Hugging Face directories (loading), Dream / LLaDA / SDAR checkpoint families
(families, sdar_llada_moe), LLaDA 2.x on a class of our own (llada2_moe, llada2_family), the paper's D2F presets (presets), and `load`, the one entry point that
picks among them (loader). DiffusionGemma, not a masked diffusion LM, has its own sampler and trace
(diffusion_gemma, canvas_trace).

    from lopa.models import load
    loaded = load()                     # the bundled model; load("dir"), load("d2f-dream-base"), ...
    decoder = loaded.decoder(DecodeSettings(k=4))

Layer: imports the core; imported by distributed, train, bench, cli and app.
"""

from lopa.models.loader import add_model_arguments, load, load_from_args
from lopa.models.loading import ASSETS, DEFAULT_MODEL, LoadedModel

__all__ = ["load", "add_model_arguments", "load_from_args", "LoadedModel", "ASSETS", "DEFAULT_MODEL"]
