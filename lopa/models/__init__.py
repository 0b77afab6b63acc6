"""Models: local Hugging Face directories, Dream/LLaDA checkpoint families, the paper's D2F presets.

Layer: imports the core (lopa.settings, lopa.engine); imported by dist, train, bench, cli and app.
"""
