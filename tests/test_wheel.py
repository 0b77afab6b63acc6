"""The package as a user installs it: build the wheel, install it (not editable) into a fresh venv,
and decode on the bundled model from a directory outside the checkout.

The fresh venv sees this test environment's packages through a .pth file, and pip installs the
wheel with --no-index: so no download happens, and the install fails if the wheel's dependency
ranges do not accept the pinned versions the tests run with.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def run(cmd, cwd, env, timeout=300):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # Build from a clean copy: setuptools reuses a build/ folder, which could carry stale modules.
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or n.endswith(".egg-info") or n.startswith((".git", ".venv"))
        or (Path(folder) == ROOT and n in ("build", "dist", "runs", "checkpoints", "test-artifacts", "bench-out"))])
    run([sys.executable, "-m", "pip", "wheel", str(source), "-w", str(base / "dist"), "--no-deps",
         "--no-build-isolation", "-q"], cwd=base, env=env)
    wheel = next((base / "dist").glob("lopa_explorer-*.whl"))
    venv = base / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base, env=env)
    python = venv / "bin" / "python"
    purelib = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=base, env=env).strip())
    (purelib / "_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([str(python), "-m", "pip", "install", "--no-index", "--no-build-isolation", "-q", str(wheel)], cwd=base, env=env)
    return wheel, venv, purelib, env


def test_the_wheel_holds_the_bundled_model_and_no_generic_top_level_names(installed):
    wheel, _, purelib, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"lopa/assets/models/{m}/model.safetensors" for m in ("open-gsm-dllm", "sure-gsm-dllm")} <= set(names)
    # transformers' generate() with LoPA (lopa.hf): the folder `lopa hf-export` copies from
    assert {"lopa/assets/models/sure-gsm-dllm/custom_generate/generate.py", "lopa/hf/generation.py"} <= set(names)
    assert "lopa_explorer/app/wiring.py" in names and "lopa_explorer/visualizations/canvas.py" in names
    # every module of the app: both rooms and each panel's folder (pyproject lists every subpackage)
    modules = {f"lopa_explorer/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / "app").rglob("*.py")}
    assert modules <= set(names), sorted(modules - set(names))
    # the shipped study results, one folder per bundled model (the app's Studies section shows them)
    for m in ("open-gsm-dllm", "sure-gsm-dllm"):
        assert f"lopa/assets/studies/{m}/orders.json" in names and f"lopa/assets/studies/{m}/orders.png" in names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"lopa", "lopa_explorer", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert not (purelib / "app").exists() and not (purelib / "visualizations").exists()


def test_installed_lopa_generate_decodes_outside_the_checkout(installed, tmp_path):
    _, venv, purelib, env = installed
    out = run([str(venv / "bin" / "lopa"), "generate", "--prompt", "Tom has 23 apples. He gives 7 to Ann. "
               "How many apples does Tom have now?", "--k", "2", "--trace", "run.json"], cwd=tmp_path, env=env)
    assert "tpf_useful" in out and (tmp_path / "run.json").is_file()
    where = run([str(venv / "bin" / "python"), "-c", "import lopa, lopa_explorer.app as a; "
                 "print(lopa.__file__); print(a.__file__); a.build_demo()"], cwd=tmp_path, env=env)
    assert all(line.startswith(str(purelib)) for line in where.split()[:2]), where
    assert "usage" in run([str(venv / "bin" / "lopa"), "app", "--help"], cwd=tmp_path, env=env)


def test_installed_app_starts_a_decode_worker(installed, tmp_path):
    """A decode worker is a fresh interpreter started as `python -m <the app's serving package>.decode_worker`:
    from the wheel, lopa_explorer.app.serving.decode_worker, which says it is ready."""
    _, venv, _, env = installed
    code = ("import time; from lopa_explorer.app.serving.decode_pool import DecodePool; pool = DecodePool(1); "
            "pool.start(None, 1); end = time.monotonic() + 240\n"
            "while not pool.ready() and time.monotonic() < end: time.sleep(0.5)\n"
            "print('ready', pool.ready(), pool.replaced); pool.close()")
    assert "ready 1 0" in run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=env)


def test_installed_model_folder_generates_with_lopa_through_transformers(installed, tmp_path):
    """The installed bundled folder's custom_generate/ runs against the installed lopa (no checkout)."""
    _, venv, _, env = installed
    code = ("from transformers import AutoModelForCausalLM, AutoTokenizer; from lopa.models import DEFAULT_MODEL as p; "
            "import lopa.hf.generation as g; tok = AutoTokenizer.from_pretrained(p); "
            "m = AutoModelForCausalLM.from_pretrained(p, trust_remote_code=True); "
            "ids = tok('Question: Tom has 23 apples. He gives 7 to Ann. How many apples does Tom have now?\\nAnswer:', "
            "return_tensors='pt'); out = m.generate(**ids, k=2, max_new_tokens=32); "
            "print(g.__file__); print(out.shape[1] > ids['input_ids'].shape[1])")
    where, grew = run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1"}).split()[-2:]
    assert where.startswith(str(installed[2])) and grew == "True"


def test_installed_eval_layer_builds_its_lm_eval_tasks_outside_the_checkout(installed, tmp_path):
    """lopa.eval ships as modules only: its lm-eval task configs are built at run time from the
    installed lm-eval's YAML and the user's data, so the wheel needs no task files of its own."""
    wheel, venv, purelib, env = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"lopa/eval/{m}.py" for m in ("lmeval", "tasks", "code_eval", "codegen", "paper", "reproduce")} <= names
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "test.jsonl").write_text('{"task_id": 11, "text": "t", "code": "", "test_list": ["a", "b", "c"]}\n')
    code = ("import lopa.eval.tasks as t; from lopa.eval.tasks import task_configs; from lopa.tasks import TASKS; "
            "g = task_configs(TASKS['gsm8k'])['lopa_gsm8k']; m = task_configs(TASKS['mbpp'], 'mbpp')['lopa_mbpp']; "
            "print(t.__file__); print(all(__import__('os').path.isfile(f) for f in g['dataset_kwargs']['data_files']['test']), "
            "len(m['fewshot_config']['samples']))")
    where, gsm8k_found, shots = run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=env).split()[-3:]
    assert where.startswith(str(purelib)) and gsm8k_found == "True" and shots == "3"
