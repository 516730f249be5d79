#!/usr/bin/env bash
# The whole-layer records on one GPU, in one call on kind nvidia-h200 (carry the wheels):
# `live.bench.layers` -- transformers' Qwen3 MoE decoder layer at EP 1 and as a virtual EP 2-16
# rank, stacks of layers, and their parts as the simulator sees them, for `epsim validate
# --composition`. Writes into $OUT: layers.jsonl (the records), layers_summary.json, bench.log,
# gpu.csv (clocks, power at start and end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl BUDGET_S=400 scripts/gpu_layers.sh
export OUT=${OUT:-out/layers}
exec "$(dirname "$0")/gpu_one.sh" bench.log python3 -m live.bench.layers --out "$OUT" \
    --budget-s "${BUDGET_S:-400}"
