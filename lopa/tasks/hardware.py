"""What the numbers ran on: one line for a table's caption or a report's header, and the software
beside it for a result file. Every benchmark and study writes these, so two runs compare by them."""

from __future__ import annotations

import os
import platform

import torch


def device_of(where) -> torch.device:
    """The device of a loaded model (lopa.models.LoadedModel), a torch module, or a device (name)."""
    model = getattr(where, "model", where)
    if isinstance(model, torch.nn.Module):
        return next(model.parameters()).device
    return torch.device(where)


def hardware(where, note: str = "") -> str:
    """"NVIDIA H100 80GB HBM3 GPU", "Ascend NPU", or "x86_64 CPU, 2 cores, 1 torch thread(s), no GPU";
    then `note` (a shared machine, a load average). `where`: see device_of."""
    device = device_of(where)
    if device.type == "cuda":
        line = f"{torch.cuda.get_device_name(device)} GPU"
    elif device.type == "npu":
        line = "Ascend NPU"
    else:
        line = (f"{platform.machine()} CPU, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s)"
                + ("" if torch.cuda.is_available() else ", no GPU"))
    return line + (f", {note}" if note else "")


def software() -> dict:
    """The versions a result depends on: Python, torch, and CUDA where torch has it."""
    return {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}


def environment(where) -> dict:
    """The hardware line, the device type and the software, for a report's JSON."""
    import transformers
    device = device_of(where)
    return {"device": hardware(device), "device_type": device.type, **software(),
            "transformers": transformers.__version__}
