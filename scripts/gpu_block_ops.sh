#!/usr/bin/env bash
# The block's own ops (router, permute, top-k weighting: `block_ops`) on one GPU, in one call on
# kind nvidia-h200 (carry the wheels): `live.bench.components --kinds block_ops`, two passes, the
# three expert shapes x 1..16384 tokens. Writes into $OUT: block_ops.jsonl (the records),
# components_summary.json, bench.log (the output), gpu.csv (clocks, power at start and end).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) WHL=.whl BUDGET_S=300 scripts/gpu_block_ops.sh
export OUT=${OUT:-out/block_ops}
exec "$(dirname "$0")/gpu_one.sh" bench.log python3 -m live.bench.components --kinds block_ops \
    --passes 2 --budget-s "${BUDGET_S:-300}" --out "$OUT" --records-name block_ops.jsonl
