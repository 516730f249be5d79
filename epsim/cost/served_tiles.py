"""SGLang's served fused-MoE tiles against the collector's: a measured speed ratio by tokens.

aiconfigurator's collector times SGLang's Triton fused MoE for DeepSeek-V3/R1 block-FP8 on H200
at MoE-TP 8 with the E 256 tuned table (`triton_3_1_0`, 64-row tiles above a few tokens), and
epsim's fused experts fit (`epsim.cost.block_ops_parts.fused_moe_fit`) is fitted on those times. SGLang
0.5.9 serves the shared expert fused (E 257) with its own H200 tables
(`triton_3_5_1/E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json`
for w13 and its `_down.json` for w2, TMA on w2; 16-row tiles; earlier wheels -- 0.5.3rc2, 0.5.5,
0.5.6 -- ship the E 257 table for Triton 3.2.0 / 3.3.1 only, no `_down`). Its two GEMMs run
faster than the collector's tiles on the same E 257 problem.

`RATIOS`: the served config's w13 + w2 GEMM time over the collector's tiles' on the served
problem (`served` over `collector_tiles_e257`), by tokens per GPU entering the fused MoE, from
`benchmarks/results/fused_moe_configs_h100/records.jsonl` (`python
benchmarks/fused_moe_configs_gpu.py`, 2026-12-06, H100 80GB HBM3, Triton 3.6.0; median of 30
graph replays, L2 flushed) and, at prefill counts (384-8192), `prefill/records.jsonl` beside it
(the same script, `--sources served collector_tiles_e257 --tokens 384 ... 8192 --layers 4
--replays 20`, another H100 of the same kind). Above 8192 the ratio is held: the served tables'
keys end at 1024 (64-row tiles there; the nearest key rules above it), so every larger count runs
the tile timed at 1024-8192, where the ratio stays 0.83-0.87 (the TMA down GEMM). Measured on
H100, extrapolated to H200 (the same SM90 kernel and tiles; H200's HBM is faster, so the
memory-bound ratio is an estimate there).
`ratios_from_record` regenerates it (a test checks the two agree).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

RECORD = "benchmarks/results/fused_moe_configs_h100/records.jsonl"
PREFILL_RECORD = "benchmarks/results/fused_moe_configs_h100/prefill/records.jsonl"
SERVED, COLLECTOR = "served", "collector_tiles_e257"
# tokens per GPU -> served GEMMs' µs / collector tiles' GEMMs' µs (4 decimals; the records)
RATIOS = {1: 0.8894, 2: 0.7634, 4: 0.8497, 8: 0.89, 16: 0.7403, 32: 0.8394, 64: 0.916,
          128: 0.9151, 256: 0.9096, 384: 0.8782, 512: 0.8945, 768: 0.8731, 1024: 0.8699,
          2048: 0.8618, 4096: 0.8336, 8192: 0.8571}
GPUS = ("H200",)                 # where SGLang serves these tiles (H100 0.5.9: no N 256 table)
WEIGHT_DTYPE = "fp8_block"
INTERMEDIATE = 256               # per-GPU intermediate: DeepSeek-V3/R1 (2048) at MoE-TP 8
FROM_VERSION = (0, 5, 9)         # the first wheel read with the triton_3_5_1 E 257 tables
NOTE = ("routed experts at SGLang's served fused-MoE tiles (E 257 H200 tables): the collector "
        "fit times a measured ratio by tokens (measured on H100, extrapolated to H200; "
        "epsim.cost.served_tiles)")


def ratios_from_record(paths=(RECORD, PREFILL_RECORD), root: str | Path = ".") -> dict[int, float]:
    """`RATIOS` from the records' rows: {tokens: served (w13_us + w2_us) / collector's}."""
    gemm_us: dict[str, dict[int, float]] = {SERVED: {}, COLLECTOR: {}}
    for path in paths:
        for line in (Path(root) / path).read_text().splitlines():
            row = json.loads(line)
            if row["source"] in gemm_us:
                gemm_us[row["source"]][int(row["tokens"])] = row["w13_us"] + row["w2_us"]
    return {t: round(gemm_us[SERVED][t] / gemm_us[COLLECTOR][t], 4)
            for t in sorted(gemm_us[SERVED])}


def applies(gpu: str, fused_fit: bool, weight_dtype: str, intermediate_per_gpu: int,
            fused_shared: int, backend: str, served_tiles: bool) -> bool:
    """Whether the ratio prices a step's routed experts: SGLang's served tiles
    (`served_tiles`, `DeploymentSpec.moe_served_tiles`) on an H200 whose experts fit is the
    fused Triton MoE's (`fused_fit`), block-FP8 weights, 256 intermediate columns a GPU, the
    shared expert fused (E 257) and every GPU running the group's tokens (`none` backend)."""
    return (served_tiles and fused_fit and gpu in GPUS and weight_dtype == WEIGHT_DTYPE
            and intermediate_per_gpu == INTERMEDIATE and fused_shared > 0 and backend == "none")


def factor(tokens) -> np.ndarray:
    """The ratio at `tokens` [...] per GPU, interpolated in log(tokens), held below the first
    measured count and above the last (module doc: the same 64-row served tile from 1024 on)."""
    keys = np.log(np.array(sorted(RATIOS), dtype=np.float64))
    values = np.array([RATIOS[k] for k in sorted(RATIOS)])
    t = np.maximum(np.asarray(tokens, dtype=np.float64), 1.0)
    return np.interp(np.log(t), keys, values)
