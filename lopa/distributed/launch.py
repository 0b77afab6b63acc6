"""The command line's branch-parallel backend: `python -m lopa generate --backend bp`.

Under torchrun (RANK / WORLD_SIZE set) this process is one rank of the group; without torchrun a
local BPGroup of --workers rank processes decodes. Command-line glue only: nothing but lopa.cli
imports it, so the group (lopa.distributed.group) and the collectives (lopa.distributed.parallel) never import
their caller.
"""

from __future__ import annotations

import os

import torch

from lopa.distributed.group import BPGroup
from lopa.distributed.parallel import BPExecutor, Comm, dist_backend, serve
from lopa.engine import Decoder
from lopa.models import load
from lopa.models.loading import pick_device


def generate_bp(args, settings_from_args, report) -> int:
    """Under torchrun (RANK / WORLD_SIZE set) this process is one rank: rank 0 decodes and calls
    `report(args, decoder, description)`, the others serve. Without torchrun: a local BPGroup of
    --workers ranks. Every rank loads the model on its own device (cuda:LOCAL_RANK, npu:LOCAL_RANK)."""
    options = {name: getattr(args, name, None) for name in ("lora", "base_path", "lora_path")}
    options.update(trust_remote_code=args.trust_remote_code, allow_download=getattr(args, "allow_download", False))
    if not ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        with BPGroup.start(args.model, workers=args.workers, timeout_s=args.bp_timeout,
                           device=pick_device(args.device).type, **options) as group:
            return report(args, group.decoder(settings_from_args(args, group.spec)), group.description)
    device = torchrun_device(args.device)
    loaded = load(args.model, device=str(device), **options)
    comm = Comm.init(device, args.bp_timeout, start_timeout_s=max(600.0, args.bp_timeout))
    if comm.rank != 0:
        serve(loaded.model, loaded.spec, comm)
        comm.close()
        return 0
    try:
        settings = settings_from_args(args, loaded.spec)
        executor = BPExecutor(loaded.model, loaded.spec, settings, comm)
        description = f"{loaded.describe()} x {comm.world} ranks ({dist_backend(device.type)})"
        return report(args, Decoder(loaded.model, loaded.spec, settings, loaded.tokenizer, executor), description)
    finally:
        comm.send_control(("stop",))       # also after an error, so that the other ranks exit now
        comm.close()


def torchrun_device(requested: str | None) -> torch.device:
    """This rank's device: the requested type (default cuda if available) at index LOCAL_RANK."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    kind = torch.device(requested).type if requested else ("cuda" if torch.cuda.is_available() else "cpu")
    dist_backend(kind)                                 # fail early and clearly (e.g. torch_npu missing)
    if kind == "cuda":
        torch.cuda.set_device(local)
    elif kind == "npu":
        torch.npu.set_device(local)
    return torch.device("cpu") if kind == "cpu" else torch.device(kind, local)
