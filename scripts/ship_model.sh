#!/usr/bin/env bash
# Re-measures everything the project ships for a bundled model once its weights change: the bench on fresh
# held-out problems of its family, the four studies, the app's examples, the tour's traces and the
# screenshots. Each study writes the model's weights digest into its JSON, and the app flags results made
# on other weights, so a model is shipped only when every step has run on its weights.
#
# Usage: bash scripts/ship_model.sh SEED [MODEL_DIR]
#   SEED       a problem seed never used before (it draws the held-out problems of every step)
#   MODEL_DIR  default assets/models/open-gsm-dllm; results go to assets/{bench,studies}/<its name>
#
# Resumable: a step that finished on these weights leaves runs/ship/<name>/<step>.done holding the
# digest, and is skipped on a rerun. Two lanes run side by side, one torch thread each (a 2-core CPU);
# the timings they print are from that shared machine. Logs: runs/ship/<name>/<step>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
SEED=${1:?usage: bash scripts/ship_model.sh SEED [MODEL_DIR]}
MODEL=${2:-assets/models/open-gsm-dllm}
NAME=$(basename "$MODEL")
PY=${PYTHON:-python}
export PYTHONPATH=.
STATE=runs/ship/$NAME
mkdir -p "$STATE"
DIGEST=$($PY -c "import sys; from lopa.study.common import weights_digest; print(weights_digest(sys.argv[1]))" "$MODEL")
NOTE='shared: two ship lanes side by side'
STUDY=(--model "$MODEL" --threads 1 --problem-seed "$SEED" --hardware-note "$NOTE" --out "assets/studies/$NAME")

step() {   # step NAME COMMAND...: run unless done on these weights
  local name=$1; shift
  if [ "$(cat "$STATE/$name.done" 2>/dev/null)" = "$DIGEST" ]; then echo "skip $name (done on $DIGEST)"; return; fi
  echo "$(date +%T) start $name"
  "$@" > "$STATE/$name.log" 2>&1
  echo "$DIGEST" > "$STATE/$name.done"
  echo "$(date +%T) done $name"
}

lane_a() {
  step bench $PY -m lopa.bench --model "$MODEL" --problem-seed "$SEED" --n 300 --threads 1 --max-new-tokens 128 \
    --decoders d2f,lopa-k1,lopa-k2,lopa-k4,lopa-k8,lopa-k14,lopa-k4-random,lopa-k4-left_to_right,lopa-k1-least_confident,lopa-k4-least_confident,lopa-k14-least_confident,lopa-k14-highest_entropy \
    --out "assets/bench/$NAME"
  rm -f "assets/bench/$NAME/problems.csv"     # the per-problem rows (about 1 MB) are not shipped, only the summary
  step calibration $PY -m lopa.study calibration --n 40 "${STUDY[@]}"
  step adaptive $PY -m lopa.study adaptive --n 40 --ks 0,1,2,4,8,14 --k-max 14 --adaptive-rank least_confident --repeats 10 --timing-repeats 5 "${STUDY[@]}"
}

lane_b() {
  step orders $PY -m lopa.study orders --n 200 --random 10 "${STUDY[@]}"
  step headroom $PY -m lopa.study headroom --n 60 --random 10 "${STUDY[@]}"
}

# The model's adaptive budget first (config.json "lopa.decode"): retraining rewrites config.lopa without it.
step budget $PY scripts/fit_budget.py --models "$MODEL" --seed "$((SEED + 1))" --write
lane_a & A=$!
lane_b & B=$!
wait $A && wait $B
step examples $PY scripts/pick_examples.py --model "$MODEL"
step tour $PY -m app.panels.tour --record --model "$MODEL"
step screenshots env LOPA_UPDATE_SCREENSHOTS=1 $PY -m pytest -q tests/test_app_browser.py tests/test_tour_browser.py
echo "shipped $NAME on $DIGEST: review git diff assets/, then the model card, README and docs/ figures"
