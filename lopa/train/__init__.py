"""Training the bundled model: the tokenizer, the sequence layout the engine expects, the trainer.

    python -m lopa.train --out runs/tiny --export assets/models/sure-gsm-dllm

Layer: imports the core and lopa.models; nothing imports it but the tests.
"""
