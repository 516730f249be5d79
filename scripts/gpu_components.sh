#!/usr/bin/env bash
# `epsim calibrate --live` on one GPU, in one call on kind nvidia-h200 (carry the wheels):
# every single-GPU component timed (live.bench.components), then fitted with the shipped
# two-GPU communication records. Writes into $OUT: calibrate.log (the command's output),
# records.jsonl (the single-GPU records), profile.json, gpu.csv (clocks, power at start/end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl BUDGET_S=360 scripts/gpu_components.sh
export OUT=${OUT:-out/components}
exec "$(dirname "$0")/gpu_one.sh" calibrate.log python3 -m epsim.cli calibrate --live \
    --budget-s "${BUDGET_S:-360}" --records-out "$OUT/records.jsonl" --out "$OUT/profile.json"
