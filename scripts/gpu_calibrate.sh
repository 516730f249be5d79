#!/usr/bin/env bash
# The calibration measurements in one call on the 2x H200 machine (kind nvidia-h200-x2, carry
# .whl): the live bench sweep (live.bench.sweep: points start within a 240 s budget, the ranks are
# stopped 60 s after it at the latest), then the EPLB rebalance bench (live.bench.eplb, if
# present: 80 s budget, killed at 110 s). Worst case about 7 minutes with the install. Everything
# lands in $OUT (at most 8 files, flat): bench.jsonl, bench.log, bench_summary.json and
# eplb_records.jsonl, eplb.log, eplb_summary.json.
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) scripts/gpu_calibrate.sh            # GPU (NCCL)
#   scripts/gpu_calibrate.sh --cpu                                          # the same on CPU (gloo, tiny grid)
#   scripts/gpu_calibrate.sh -- --backends torch none                       # extra live.bench.sweep options
#
# Then, here (one command; docs/calibration.md):
#   epsim calibrate --records epsim/data/records/h200x2/*.jsonl* --out epsim/data/profiles/h200x2.json --name h200x2 \
#     && epsim validate --out docs/validation --doc docs/validation.md
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_calibrate}
CPU=0
BUDGET=240          # seconds in which bench points may start (see above)
EPLB_BUDGET=80
EPLB_TIMEOUT=110
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) CPU=1 ;;
        --budget-s) BUDGET="$2"; shift ;;
        --) shift; EXTRA=("$@"); break ;;       # the rest goes to live.bench.sweep as is
        *) echo "gpu_calibrate.sh: unknown option $1 (use --cpu, --budget-s S, -- BENCH ARGS)" >&2
           exit 2 ;;
    esac
    shift
done
mkdir -p "$OUT"
PY=python3
if [ "$CPU" = 1 ]; then
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    BENCH_ARGS=(--cpu --quick)
    EPLB_ARGS=(--quick --budget-s "$EPLB_BUDGET")
else
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site:$PWD
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    BENCH_ARGS=(--backends torch mooncake deepep none --iters 30)
    EPLB_ARGS=(--budget-s "$EPLB_BUDGET")
fi
start=$(date +%s)
"$PY" -m live.bench.sweep --out "$OUT" --budget-s "$BUDGET" --no-progress "${BENCH_ARGS[@]}" "${EXTRA[@]}"
bench_rc=$?
echo "gpu_calibrate: bench exit $bench_rc after $(( $(date +%s) - start )) s"
eplb_rc=0
probe=$("$PY" -c "
import importlib.util, sys
try:
    sys.exit(0 if importlib.util.find_spec('live.bench.eplb') else 1)
except Exception as exc:
    print(f'{type(exc).__name__}: {exc}'); sys.exit(2)" 2>&1)
case $? in
    0) timeout --kill-after=10 "$EPLB_TIMEOUT" "$PY" -m live.bench.eplb --out "$OUT" "${EPLB_ARGS[@]}"
       eplb_rc=$?
       echo "gpu_calibrate: live.bench.eplb exit $eplb_rc after $(( $(date +%s) - start )) s" ;;
    1) echo "gpu_calibrate: live.bench.eplb not present; no rebalance records" ;;
    *) echo "gpu_calibrate: live.bench.eplb does not import: $probe"; eplb_rc=1 ;;
esac
ls -l "$OUT"
[ "$bench_rc" = 0 ] || exit "$bench_rc"
exit "$eplb_rc"
