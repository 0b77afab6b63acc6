"""Training the bundled model: the tokenizer, the sequence layout the engine expects, the trainer.

    python -m lopa.train --out runs/tiny --export assets/models/sure-gsm-dllm      # the first stage
    python -m lopa.train --out runs/regime --init assets/models/sure-gsm-dllm --phrasing adverbs ...
                                            # open-gsm-dllm's second stage: its model card has the recipe

Layer: imports the core and lopa.models; nothing imports it but the tests.
"""
