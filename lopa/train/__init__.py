"""Training the bundled model: the tokenizer, the trainer and its built-in evaluator (the sequence layout
the engine expects is the task layer's: lopa.tasks.layout).

    python -m lopa.train --out runs/tiny --export assets/models/sure-gsm-dllm      # the first stage
    python -m lopa.train --out runs/regime --init assets/models/sure-gsm-dllm --phrasing adverbs ...
                                            # open-gsm-dllm's second stage: its model card has the recipe
    python -m lopa.train filter --model assets/models/open-gsm-dllm --seed 0
                                            # the commit filter of commit=learned (lopa/train/filter.py)

Layer: a harness beside lopa.bench, lopa.eval and lopa.study, importing none of them (the core,
lopa.models and lopa.tasks); nothing imports it but the CLI and the tests.
"""
