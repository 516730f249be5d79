#!/usr/bin/env bash
# The block's own ops (router, permute, top-k weighting: `block_ops`) on one GPU, in one call on
# kind nvidia-h200 (carry the wheels): `live.component_bench --kinds block_ops`, two passes, the
# three expert shapes x 1..16384 tokens. Writes into $OUT: block_ops.jsonl (the records),
# components_summary.json, bench.log (the output), gpu.csv (clocks, power at start and end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl BUDGET_S=300 scripts/gpu_block_ops.sh
set -o pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${WHL:-.whl}"/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-out/block_ops}
mkdir -p "$OUT"
query=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw
nvidia-smi --query-gpu=$query --format=csv > "$OUT/gpu.csv"
python3 -m live.component_bench --kinds block_ops --passes 2 --budget-s "${BUDGET_S:-300}" \
    --out "$OUT" --records-name block_ops.jsonl 2>&1 | tee "$OUT/bench.log"
code=$?
nvidia-smi --query-gpu=$query --format=csv,noheader >> "$OUT/gpu.csv"
exit $code
