#!/usr/bin/env bash
# Installs everything the tests need into a fresh virtual environment, then runs the lint and every test.
# Usage: bash scripts/test.sh [pytest args]
# The tests run on LOPA_TEST_WORKERS pytest-xdist workers (default 3 on the 2-core CI machine: a test waits
# for a served page, a browser or a subprocess for part of its time, and with 2 workers the suite kept only
# about 1.3 of the 2 cores busy, with 3 about 1.8; CONTRIBUTING.md, "How long the suite takes"), a test file
# per worker at a time (--dist loadfile), so a module's fixtures (a served app, a browser, a branch-parallel
# group) start once. LOPA_TEST_WORKERS=0 runs in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LOPA_TEST_VENV:-.venv-test}
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q --no-compile -r requirements-test.txt   # compiled below, on every core
# Browser tests drive Debian's Chromium through Playwright (playwright install cannot download here);
# generated code is graded under Debian's bubblewrap (the sandbox's tests skip only where it is not installed,
# and fail, with bwrap's reason, where it is installed but cannot start).
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v unshare >/dev/null || missing+=(util-linux)   # mounts the sandbox's tmpfs bounded in files
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
      || echo "warning: could not install ${missing[*]}; the tests that need them will be skipped"
  else
    echo "warning: ${missing[*]} missing and not root; the tests that need them will be skipped"
  fi
fi
# Compiled on both cores at once (pip compiles one file after another): the sandboxed graders read a read-only
# site-packages, where nothing compiled later could be kept. A file no Python 3 compiles (test data in some
# packages) is skipped, as pip skips it.
"$VENV/bin/python" -m compileall -q -j 0 "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
"$VENV/bin/ruff" check .          # the lint pre-commit runs (configured in pyproject.toml)
exec "$VENV/bin/python" -m pytest -q -n "${LOPA_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
