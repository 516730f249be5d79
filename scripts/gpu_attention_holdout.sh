#!/usr/bin/env bash
# The attention hold-out grid on one GPU, in one call on kind nvidia-h200 (carry the wheels):
# `live.bench.components --grid holdout --kinds attention_prefill attention_decode`, a GQA shape no
# fit saw (Qwen3-Coder-480B-A35B) and decode batches above the calibration grid, to judge the
# attention fits on (epsim validate's shape and tokens axes). Writes into $OUT: components.jsonl
# (the records), components_summary.json, bench.log, gpu.csv (clocks, power at start and end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl scripts/gpu_attention_holdout.sh
export OUT=${OUT:-out/attention_holdout}
exec "$(dirname "$0")/gpu_one.sh" bench.log python3 -m live.bench.components --grid holdout \
    --kinds attention_prefill attention_decode --out "$OUT" --budget-s "${BUDGET_S:-240}"
