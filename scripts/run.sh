#!/usr/bin/env bash
# Installs the app into .venv (once) and starts it on the bundled model: http://localhost:7860
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q -r requirements.txt
exec .venv/bin/python app.py "$@"
