"""Branch parallelism over torch.distributed: the collectives and rank-side shard (parallel), a
persistent group for long-lived callers (group) and the processes behind it (ranks).

Layer: imports the core and lopa.models; imported by bench, cli and app.
"""
