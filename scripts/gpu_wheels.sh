#!/usr/bin/env bash
# Wheels for a bare, offline GPU machine: what `python -m lopa.bench.gpu` needs beyond an image with
# torch, transformers, safetensors, peft, pandas and pyarrow. Only pydantic: the engine core imports
# it at import time (lopa.trace validates traces through lopa.schema). Its compiled part is built
# per Python version, so wheels for CPython 3.10-3.13 on x86_64 Linux go into .whl/gpu/ (git
# ignores .whl/; carry it with the working tree). Run here, with network:
#
#     bash scripts/gpu_wheels.sh
#
# and there, in the repository root (installs nothing when pydantic already imports):
#
#     python -c "import pydantic" 2>/dev/null || pip install -q --no-index --find-links .whl/gpu pydantic
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-.venv/bin/pip}"
PYDANTIC="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("pydantic"))')"
mkdir -p .whl/gpu
for py in 3.10 3.11 3.12 3.13; do
    "$PIP" download -q --only-binary=:all: --dest .whl/gpu --python-version "$py" --implementation cp \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "pydantic==$PYDANTIC"
done
ls -1 .whl/gpu
du -sh .whl/gpu
