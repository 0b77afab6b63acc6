#!/usr/bin/env bash
# Installs everything the tests need into a fresh virtual environment, then runs the lint and every test.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LOPA_TEST_VENV:-.venv-test}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r requirements-test.txt
# Browser tests drive Debian's Chromium through Playwright (playwright install cannot download here).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; browser tests will be skipped"
  else
    echo "warning: /usr/bin/chromium missing and not root; browser tests will be skipped"
  fi
fi
"$VENV/bin/ruff" check .          # the lint pre-commit runs (configured in pyproject.toml)
exec "$VENV/bin/python" -m pytest -q "$@"
