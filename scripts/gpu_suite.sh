#!/usr/bin/env bash
# The live GPU suite in one call on the 2x H200 machine (kind nvidia-h200-x2, carry .whl).
# Installs the wheels the machine lacks (simpy, pydantic, mooncake) into /tmp/site, keeps NVLink
# multicast off, and writes records.jsonl, suite.log and summary.json into $OUT.
# Usage: scripts/gpu_suite.sh [--budget-s 330] [--parts hf_equality,ep_torch,...]
set -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-out/gpu_suite}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
exec python3 -m live.bench.gpu_suite --out "$OUT" "$@"
