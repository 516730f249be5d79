#!/usr/bin/env bash
# The attention hold-out grid on one GPU, in one call on kind nvidia-h200 (carry the wheels):
# `live.component_bench --grid holdout --kinds attention_prefill attention_decode`, a GQA shape no
# fit saw (Qwen3-Coder-480B-A35B) and decode batches above the calibration grid, to judge the
# attention fits on (epsim validate's shape and tokens axes). Writes into $OUT: bench.log,
# records.jsonl, gpu.csv (clocks, power at start and end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl scripts/gpu_attention_holdout.sh
set -o pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${WHL:-.whl}"/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out/attention_holdout}
mkdir -p "$OUT"
query=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw
nvidia-smi --query-gpu=$query --format=csv > "$OUT/gpu.csv"
python3 -m live.component_bench --grid holdout --kinds attention_prefill attention_decode \
    --out "$OUT" --budget-s "${BUDGET_S:-240}" 2>&1 | tee "$OUT/bench.log"
code=$?
nvidia-smi --query-gpu=$query --format=csv,noheader >> "$OUT/gpu.csv"
exit $code
