#!/usr/bin/env bash
# Scaling validation (issue #9) in one call per EP size: live.bench.sweep at EP N on one host over the
# grid of the committed predictions (benchmarks/results/scaling_predictions.jsonl: torch BF16,
# mooncake BF16 + FP8; Qwen3-30B-A3B and Qwen3-235B-A22B; tokens per rank 1..4096; uniform and
# the hot set of 16 experts on rank 0; 3 passes, 30 iterations), then the comparison against
# those predictions when this machine can import epsim's calibration (else run it locally).
# Kind nvidia-h200-x8 (or -x4 for EP 4), carry .whl. Points start within a 420 s budget; the
# ranks are stopped 60 s after it at the latest: at most about 9 minutes with the install
# (a dry run on 2 GPUs: 43 torch points in 22 s; what a spent budget drops is the last passes).
#
#   EPSIM_COMMIT=$(git rev-parse HEAD) scripts/gpu_scaling.sh --gpus 8     # then --gpus 4
#   scripts/gpu_scaling.sh --cpu --gpus 4                                   # gloo dry run, tiny grid
#
# $OUT receives bench_ep<N>.jsonl, bench.log, bench_summary.json, compare_ep<N>.md (and, --cpu,
# predictions_ep<N>.jsonl/.md: the CPU shapes are not in the committed predictions). Then, here:
#   python benchmarks/scaling_predict.py --compare <files_at>/bench_ep8.jsonl <files_at>/bench_ep4.jsonl
# prints MAPE per EP size, backend, dtype and kind against the predictions committed before.
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_scaling}
CPU=0
GPUS=""
BUDGET=420      # seconds in which bench points may start (see above)
CPU_TOKENS=1,4,16
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) CPU=1 ;;
        --gpus) GPUS="$2"; shift ;;
        --budget-s) BUDGET="$2"; shift ;;
        --tokens) CPU_TOKENS="$2"; shift ;;
        *) echo "gpu_scaling.sh: unknown option $1 (use --gpus N, --cpu, --budget-s S, --tokens T,T (cpu))" >&2
           exit 2 ;;
    esac
    shift
done
if [ -n "$GPUS" ] && ! [[ "$GPUS" =~ ^[0-9]+$ ]]; then
    echo "gpu_scaling.sh: --gpus ($GPUS) must be an integer >= 2" >&2
    exit 2
fi
mkdir -p "$OUT"
PY=python3
if [ "$CPU" = 1 ]; then
    GPUS=${GPUS:-2}
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
    BENCH_ARGS=(--cpu --models cpu-h256 --tokens "$CPU_TOKENS" --skews uniform hotset:2:0.5
                --iters 3 --passes 2)
    PREDICTIONS=$OUT/predictions_ep$GPUS.jsonl
else
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site:$PWD
    ls .whl/mooncake*.whl >/dev/null 2>&1 || echo "gpu_scaling: WARNING: no mooncake wheel in .whl:" \
        "only torch will be measured (the run's tree + carry must stay under 64 MiB)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    HAVE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    GPUS=${GPUS:-$HAVE}
    # live.bench.sweep refuses too few GPUs as well; this names the machine kind to ask for
    if [ "$HAVE" -lt "$GPUS" ]; then
        echo "gpu_scaling.sh: --gpus ($GPUS) must be <= the GPUs here ($HAVE); use kind nvidia-h200-x$GPUS" >&2
        exit 2
    fi
    BENCH_ARGS=(--models Qwen3-30B-A3B Qwen3-235B-A22B --skews uniform hotset:16:0.5
                --iters 30 --passes 3)
    PREDICTIONS=benchmarks/results/scaling_predictions.jsonl
fi
if [ "$GPUS" -lt 2 ]; then
    echo "gpu_scaling.sh: --gpus ($GPUS) must be >= 2" >&2
    exit 2
fi
RECORDS=bench_ep$GPUS.jsonl
start=$(date +%s)
"$PY" -m live.bench.sweep --out "$OUT" --records-name "$RECORDS" --gpus "$GPUS" --budget-s "$BUDGET" \
    --no-progress --backends torch mooncake --dtypes bf16 fp8 "${BENCH_ARGS[@]}"
bench_rc=$?
echo "gpu_scaling: bench at EP $GPUS exit $bench_rc after $(( $(date +%s) - start )) s"
[ "$bench_rc" = 0 ] || { ls -l "$OUT"; exit "$bench_rc"; }
if [ "$CPU" = 1 ]; then
    "$PY" benchmarks/scaling_predict.py --cpu --models cpu-h256 --ep "$GPUS" \
        --tokens "$CPU_TOKENS" --out "$PREDICTIONS" || exit $?
fi
compare_rc=0
if "$PY" -c "import scipy, epsim.calibrate.inputs, epsim.cost.record, epsim.validate.table" 2>/dev/null; then
    "$PY" benchmarks/scaling_predict.py --compare "$OUT/$RECORDS" --predictions "$PREDICTIONS" \
        --table-out "$OUT/compare_ep$GPUS.md"
    compare_rc=$?     # 1: measured counts differ from the predicted ones
else
    echo "gpu_scaling: epsim's comparison does not import here; run locally:"
    echo "  python benchmarks/scaling_predict.py --compare <files_at>/$RECORDS"
fi
ls -l "$OUT"
exit "$compare_rc"
