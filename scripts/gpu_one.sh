#!/usr/bin/env bash
# What every one-GPU call shares (kind nvidia-h200, carry the wheels): install the carried
# wheels, record the GPU's clocks and power before and after, run the command with its output
# teed to $OUT/LOG. The scripts gpu_components.sh, gpu_block_ops.sh, gpu_layers.sh and
# gpu_attention_holdout.sh name their command through it:
#
#   OUT=out/x scripts/gpu_one.sh LOG COMMAND [ARGS...]
set -o pipefail
cd "$(dirname "$0")/.."
log=$1
shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "${WHL:-.whl}"/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"
query=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw
nvidia-smi --query-gpu=$query --format=csv > "$OUT/gpu.csv"
"$@" 2>&1 | tee "$OUT/$log"
code=$?
nvidia-smi --query-gpu=$query --format=csv,noheader >> "$OUT/gpu.csv"
exit $code
