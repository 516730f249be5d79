#!/usr/bin/env bash
# Issue #18's measurements on a two-H200 machine, in one device call of at most 10 minutes
# (kind nvidia-h200-x2; carry .whl and .gpu/deepep, whose wheel/ holds the DeepEP wheel built by
# scripts/build_deepep.sh; a Mooncake wheel in .whl is installed and measured too). Parts, in
# order of value, each started only if the call's time (--total-s, default 570 s) still allows
# it, under a timeout that ends inside that time:
#
#   a2a/        benchmarks/torch_a2a_vs_nccl.py --gpus 2: torch (normal, static), DeepEP normal
#               and low-latency, Mooncake against raw NCCL of the same bytes, eager and CUDA
#               graph (device time), hidden 4096 and 7168, tokens per rank 1 to 16384 where
#               memory allows (the low-latency paths to 1024)
#   bench/      only when Mooncake imports: scripts/gpu_calibrate.sh -- --graph-only, its
#               device-only (launched-ahead) records on the calibration grid, then
#               live.bench.eplb. live.bench.sweep runs torch and DeepEP in their normal modes, which
#               wait on the host for counts, so launched ahead they give no records (the a2a
#               part has their graph-capturable modes); both machines of
#               benchmarks/results/h200x2_issue18/ have the eager records
#   deepep/     live.bench.deepep_smoke at EP 2: normal and low-latency modes against the
#               single-device block (the DeepEP wheel is built first when none is carried)
#   rebalance/  benchmarks/rebalance_traffic.py: n tensors vs one buffer per EPLB chunk
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) scripts/gpu_two_h200.sh [--total-s S]
#   scripts/gpu_two_h200.sh --dry-run          # here, no GPU: the parts and the a2a plan
#
# Everything is written under $WORK (default /tmp/gpu_two_h200) and packed after each part into
# $OUT/gpu_two_h200.tgz (a device call returns at most 8 files), next to $OUT/parts.log (each
# part's exit code and seconds) and $OUT/a2a_table.md. Run it on two separately leased machines
# and commit both machines' results with their provenance; `epsim validate` judges one
# machine's fit on the other (RunPair in epsim/validate/extrapolation.py).
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_two_h200}
WORK=${WORK:-/tmp/gpu_two_h200}
TOTAL=570
DRY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --total-s) TOTAL="$2"; shift ;;
        --dry-run) DRY=1 ;;
        *) echo "gpu_two_h200.sh: unknown option $1 (use --total-s S, --dry-run)" >&2; exit 2 ;;
    esac
    shift
done
case "$TOTAL" in
    ''|*[!0-9]*) echo "gpu_two_h200.sh: --total-s ($TOTAL) must be a whole number of seconds" >&2
                 exit 2 ;;
esac
A2A_ARGS=(--gpus 2 --hidden 4096 7168 --tokens 1 4 16 64 256 1024 4096 8192 16384
          --ll-max-tokens 1024 --budget-s 200)
PY=python3
start=$(date +%s)
mkdir -p "$OUT" "$WORK"
: > "$OUT/parts.log"
left() { echo $(( TOTAL - ($(date +%s) - start) )); }

# run_part NAME MIN_S CAP_S CMD...: run CMD under a timeout of min(CAP_S, time left - 10 s),
# or skip it when less than MIN_S is left; log its exit code and seconds either way
run_part() {
    local name=$1 min=$2 cap=$3 t0 rc limit
    shift 3
    limit=$(( $(left) - 10 ))
    [ "$limit" -gt "$cap" ] && limit=$cap
    if [ "$limit" -lt "$min" ]; then
        echo "$name: skipped, $(left) s left (needs $min)" | tee -a "$OUT/parts.log"
        return 0
    fi
    if [ "$DRY" = 1 ]; then
        echo "$name: would run (timeout ${limit} s): $*" | tee -a "$OUT/parts.log"
        return 0
    fi
    t0=$(date +%s)
    timeout "$limit" "$@" 2>&1 | tee "$WORK/$name.log"
    rc=${PIPESTATUS[0]}
    echo "$name: exit $rc after $(( $(date +%s) - t0 )) s (timeout ${limit} s)" | tee -a "$OUT/parts.log"
    tar -czf "$OUT/gpu_two_h200.tgz" -C "$WORK" . 2>/dev/null
    [ -f "$WORK/a2a/table.md" ] && cp "$WORK/a2a/table.md" "$OUT/a2a_table.md"
    return "$rc"
}

if [ "$DRY" = 1 ]; then
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    "$PY" benchmarks/torch_a2a_vs_nccl.py "${A2A_ARGS[@]}" --dry-run --out "$OUT/a2a" || exit 1
else
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site:$PWD
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$WORK/gpus.txt"
    wheel=$(ls .gpu/deepep/wheel/deep_ep-*.whl 2>/dev/null | head -1)
    if [ -z "$wheel" ]; then
        mkdir -p "$WORK/deepep"
        run_part deepep_build 100 200 scripts/build_deepep.sh --build .gpu/deepep/DeepEP-v1.2.1.tar \
            "$WORK/deepep"
        wheel=$(ls "$WORK"/deepep/deep_ep-*.whl 2>/dev/null | head -1)
        mv "$wheel" /tmp/ 2>/dev/null && wheel=/tmp/$(basename "$wheel")   # 9 MB: not packed
    fi
    if [ -n "$wheel" ]; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
    fi
fi
mkdir -p "$WORK/a2a" "$WORK/bench" "$WORK/deepep" "$WORK/rebalance"
status=0
run_part a2a 60 300 "$PY" benchmarks/torch_a2a_vs_nccl.py "${A2A_ARGS[@]}" --out "$WORK/a2a" \
    || status=1
if [ "$DRY" = 1 ] || "$PY" -c "import mooncake.ep" 2>/dev/null; then
    run_part bench 120 240 env OUT="$WORK/bench" scripts/gpu_calibrate.sh --budget-s 80 -- \
        --graph-only --backends mooncake || status=1
else
    echo "bench: skipped, Mooncake is not installed (no host-sync-free backend in live.bench.sweep)" \
        | tee -a "$OUT/parts.log"
fi
run_part deepep_smoke 60 150 "$PY" -m live.bench.deepep_smoke --out "$WORK/deepep" || status=1
run_part rebalance 30 90 "$PY" benchmarks/rebalance_traffic.py --out "$WORK/rebalance" || status=1
echo "gpu_two_h200: done after $(( $(date +%s) - start )) s of $TOTAL" | tee -a "$OUT/parts.log"
exit $status
