#!/usr/bin/env bash
# Issue #18's measurements on a two-H200 machine, in one device call (kind nvidia-h200-x2,
# carry .whl and .gpu/deepep). Everything lands under $OUT, one folder per part:
#
#   deepep/     the DeepEP build (scripts/build_deepep.sh; skipped if a wheel is carried in
#               .gpu/deepep/wheel/) and live.deepep_smoke at EP 2: normal and low-latency modes
#               against the single-device block
#   a2a/        benchmarks/torch_a2a_vs_nccl.py --gpus 2: the torch backend vs raw NCCL
#   rebalance/  benchmarks/rebalance_traffic.py: n tensors vs one buffer per EPLB chunk
#   bench/      scripts/gpu_calibrate.sh: every backend (deepep included), eager and graph
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) scripts/gpu_two_h200.sh [--budget-s S]
#
# Run it on two separately leased machines (give the first back in between) and commit both
# machines' records with their provenance; `epsim validate` judges one machine's fit on the other.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_two_h200}
BUDGET=180
while [ $# -gt 0 ]; do
    case "$1" in
        --budget-s) BUDGET="$2"; shift ;;
        *) echo "gpu_two_h200.sh: unknown option $1 (use --budget-s S)" >&2; exit 2 ;;
    esac
    shift
done
PY=python3
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "$OUT/deepep" "$OUT/a2a" "$OUT/rebalance" "$OUT/bench"
status=0

wheel=$(ls .gpu/deepep/wheel/deep_ep-*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
    scripts/build_deepep.sh --build .gpu/deepep/DeepEP-v1.2.1.tar "$OUT/deepep" > /dev/null || status=1
    wheel=$(ls "$OUT"/deepep/deep_ep-*.whl 2>/dev/null | head -1)
    mv "$wheel" /tmp/ 2>/dev/null && wheel=/tmp/$(basename "$wheel")   # 9 MB: leave it out of $OUT
fi
if [ -n "$wheel" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel" || status=1
    timeout 300 "$PY" -m live.deepep_smoke --out "$OUT/deepep" 2>&1 | tee "$OUT/deepep/smoke.log" || status=1
fi
timeout 300 "$PY" benchmarks/torch_a2a_vs_nccl.py --gpus 2 --out "$OUT/a2a" || status=1
timeout 300 "$PY" benchmarks/rebalance_traffic.py --out "$OUT/rebalance" || status=1
OUT="$OUT/bench" scripts/gpu_calibrate.sh --budget-s "$BUDGET" -- --graph || status=1
exit $status
