"""The D2F checkpoints the paper evaluates (Table 5) as presets, and where to find them on disk.
Loading a preset is lopa.models.load's job; this module only names and locates.

A preset is a base checkpoint plus a D2F LoRA adapter, named by their hub ids. Nothing is
downloaded unless the caller allows it: a preset resolves to an explicit path, to
CHECKPOINTS_DIR/<repo name> (where `hf download ... --local-dir` should put it), or to the local
Hugging Face cache, and otherwise fails with the command that fetches it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from lopa.models.loading import ROOT
from lopa.settings import PAPER_PRESETS

# Where `hf download ... --local-dir` should put checkpoints so presets find them without flags.
CHECKPOINTS_DIR = Path(os.environ.get("LOPA_CHECKPOINTS", ROOT / "checkpoints"))


@dataclass(frozen=True)
class PaperTask:
    """How the paper ran one task on one model: its Table 5 row and the authors' evaluation flags.
    settings: the PAPER_PRESETS key (block size, thresholds, LoPA branches k, Conf).
    shots: few-shot examples. chat: prompts through the model's chat template.
    harness: "lm-eval" (the authors' own lm-eval task) or "evalplus"."""
    settings: str
    shots: int
    chat: bool
    harness: str


# The D2F-Dream tasks as the authors ran them (zhijie-group/LoPA scale_dream_d2f/test_dream_d2f_LoPA.sh):
# lm-eval tasks gsm8k / mbpp / minerva_math with --apply_chat_template --fewshot_as_multiturn (that
# command is commented out in the published script, the flags are the only record we have), and
# humaneval 0-shot WITHOUT the chat template (add_bos_token=true, escape_until=true).
_DREAM_TASKS = {
    "gsm8k": PaperTask("gsm8k", shots=4, chat=True, harness="lm-eval"),
    "math": PaperTask("math", shots=4, chat=True, harness="lm-eval"),
    "humaneval": PaperTask("humaneval", shots=0, chat=False, harness="evalplus"),
    "mbpp": PaperTask("mbpp", shots=3, chat=True, harness="lm-eval"),
}


@dataclass(frozen=True)
class Preset:
    """A paper model: base checkpoint + D2F adapter (hub ids) and how the paper ran it per task."""
    base: str
    adapter: str
    chat: bool                                      # instruct model: prompts go through the chat template
    tasks: dict = field(default_factory=dict)       # task -> PaperTask (accuracy tables 1 and 2)
    description: str = ""


PRESETS = {
    # Section 4.1: "we integrate LoPA with the Dream-Instruct-7B ... trained with the D2F objective,
    # denoted as D2F-Dream"; the published script loads Dream-v0-Instruct-7B + D2F_Dream_Instruct_7B_Lora.
    "d2f-dream-instruct": Preset(
        "Dream-org/Dream-v0-Instruct-7B", "SJTU-Deng-Lab/D2F_Dream_Instruct_7B_Lora", chat=True,
        tasks=_DREAM_TASKS,
        description="D2F-Dream 7B (Dream-v0-Instruct + D2F LoRA): the paper's D2F-Dream, Table 1 (GSM8K, MATH, "
                    "HumanEval, MBPP) and the Instruct rows of Tables 3-4"),
    # The Base model appears only in the system tables (3, 4, 7: throughput at lowered thresholds).
    "d2f-dream-base": Preset(
        "Dream-org/Dream-v0-Base-7B", "SJTU-Deng-Lab/D2F_Dream_Base_7B_Lora", chat=False,
        description="D2F-Dream-Base 7B: only in the paper's system tables (3, 4, 7); no accuracy-table row"),
    # Section 4.1 and scale_diffucoder_d2f/test_diffucoder_*.sh: DiffuCoder-7B-Instruct + D2F LoRA,
    # through EvalPlus with the authors' own chat prompt (lopa.eval.codegen).
    "d2f-diffucoder": Preset(
        "apple/DiffuCoder-7B-Instruct", "SJTU-Deng-Lab/D2F_DiffuCoder_Instruct_7B_Lora", chat=True,
        tasks={"humaneval+": PaperTask("diffucoder-humaneval+", shots=0, chat=True, harness="evalplus"),
               "mbpp+": PaperTask("diffucoder-mbpp+", shots=0, chat=True, harness="evalplus")},
        description="D2F-DiffuCoder 7B (DiffuCoder-Instruct + D2F LoRA): Table 2 (HumanEval+, MBPP+; max_prob Conf)"),
}


def task_settings(preset: str, task: str) -> dict:
    """DecodeSettings fields of the paper's row for `task` with `preset`: Table 5, generation length
    512 (Table 5 note; the authors' scripts), greedy, and the authors' attention, full: their
    evaluation class defaults to use_full_attention=True and no published script changes it."""
    tasks = PRESETS[preset].tasks
    if task not in tasks:
        raise ValueError(f"{preset} has no paper row for {task!r}" + (f"; it has {', '.join(tasks)}" if tasks else
                                                                      " (it is in the paper's system tables only)"))
    return {**PAPER_PRESETS[tasks[task].settings], "max_new_tokens": 512, "temperature": 0.0, "attention": "full"}


def _hf_cached(repo_id: str) -> Path | None:
    """The snapshot of `repo_id` in the local Hugging Face cache, without touching the network."""
    try:
        from huggingface_hub import snapshot_download
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:   # not cached (the hub raises several types for this), or hub client missing
        return None


def _locate(repo_id: str, explicit, marker: str, allow_download: bool) -> tuple[Path | None, str]:
    """Path of one checkpoint: explicit path, CHECKPOINTS_DIR/<name>, HF cache, download if allowed."""
    local = CHECKPOINTS_DIR / repo_id.split("/")[-1]
    if explicit is not None:
        explicit = Path(explicit)
        ok = (explicit / marker).is_file()
        return (explicit if ok else None), (f"{explicit} has no {marker}" if not ok else str(explicit))
    for candidate in (local, _hf_cached(repo_id)):
        if candidate is not None and (candidate / marker).is_file():
            return candidate, str(candidate)
    if allow_download:
        from huggingface_hub import snapshot_download
        try:
            return Path(snapshot_download(repo_id, local_dir=local)), str(local)
        except Exception as err:   # network, auth or disk: report it with the manual command below
            return None, f"download of {repo_id} failed ({err}); try: hf download {repo_id} --local-dir {local}"
    return None, f"{repo_id} is not on disk; get it with: hf download {repo_id} --local-dir {local}"


def resolve_preset(name: str, base_path=None, lora_path=None, allow_download: bool = False) -> tuple[Path, Path]:
    """(base dir, adapter dir) of a preset, or ValueError naming what is missing and how to get it."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    base, base_msg = _locate(preset.base, base_path, "config.json", allow_download)
    adapter, adapter_msg = _locate(preset.adapter, lora_path, "adapter_config.json", allow_download)
    if base is None or adapter is None:
        missing = [m for p, m in ((base, base_msg), (adapter, adapter_msg)) if p is None]
        raise ValueError(f"preset {name} needs base {preset.base} and adapter {preset.adapter}: " + "; ".join(missing)
                         + f" (or pass --base-path DIR --lora-path DIR; set LOPA_CHECKPOINTS to change {CHECKPOINTS_DIR})")
    return base, adapter


def availability(name: str, base_path=None, lora_path=None) -> tuple[bool, str]:
    """(ok, message) for the app's model picker: whether `name` loads offline, and if not, why and how to fix it."""
    try:
        base, adapter = resolve_preset(name, base_path, lora_path)
    except ValueError as err:
        return False, str(err)
    return True, f"{name}: base {base}, adapter {adapter}"


def list_presets() -> list[dict]:
    """One row per preset for pickers: name, description, hub ids, tasks, availability."""
    rows = []
    for name, preset in PRESETS.items():
        ok, message = availability(name)
        rows.append({"name": name, "description": preset.description, "base": preset.base,
                     "adapter": preset.adapter, "tasks": list(preset.tasks), "available": ok, "message": message})
    return rows
