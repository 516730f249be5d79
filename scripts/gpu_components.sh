#!/usr/bin/env bash
# `epsim calibrate --live` on one GPU, in one call on kind nvidia-h200 (carry the wheels):
# every single-GPU component timed (live.component_bench), then fitted with the shipped
# two-GPU communication records. Writes into $OUT: calibrate.log (the command's output),
# records.jsonl (the single-GPU records), profile.json, gpu.csv (clocks, power at start/end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl BUDGET_S=360 scripts/gpu_components.sh
set -o pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${WHL:-.whl}"/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-out/components}
mkdir -p "$OUT"
query=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw
nvidia-smi --query-gpu=$query --format=csv > "$OUT/gpu.csv"
python3 -m epsim.cli calibrate --live --budget-s "${BUDGET_S:-360}" \
    --records-out "$OUT/records.jsonl" --out "$OUT/profile.json" 2>&1 | tee "$OUT/calibrate.log"
code=$?
nvidia-smi --query-gpu=$query --format=csv,noheader >> "$OUT/gpu.csv"
exit $code
