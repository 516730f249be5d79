"""DeepEP normal's MoE runner on quantised experts: DeepGEMM's m-grouped contiguous GEMM with
SGLang's layout kernels around it (`epsim.cost.quant.layout_kb`), as AIC's collector times it
(CUDA events around one eager call) and as the simulator prices it.

AIC's rows lay the experts' rows out unpadded, so their GEMM runs fewer blocks over fewer
experts' weights than a served step (`unaligned_blocks`; the record path only). Three terms
beyond the quantised grouped GEMM of `epsim.cost.quant` (`EXPERT_LAYOUT_TERMS`):

  t = max(host_us, device_us)
  device_us = the grouped GEMM's row at `CONTIGUOUS_BLOCK_M`-row tiles (`contiguous_gemm`)
              + layout_ratio x layout_kb / HBM_datasheet

  layout_ratio  the layout's bytes at a rate of their own (>= 0), not the weight stream's
                `hbm_frac`
  host_us       the eager call's launches, which outlast a short device time (`eager_floor`);
                the simulator prices an eager step's host overhead on its own
                (`<backend>/experts/host`) and reads the device part alone
"""

from __future__ import annotations

import dataclasses

import numpy as np

from epsim.cost.experts import ExpertGemm
from epsim.cost.linear import LinearTerms
from epsim.cost.quant import EXPERT_QUANT_TERMS

# AIC's H200 rows: the layout runs at ~1.3x the datasheet HBM rate for the bytes `layout_kb`
# names while the weights stream at ~0.8x (one shared rate pinned both at its bound); the host
# floor is 370-380 µs at EP 8-256 up to 128 tokens a rank, whatever the weights
# (docs/calibration.md, issue 37)
EXPERT_LAYOUT_TERMS = LinearTerms(EXPERT_QUANT_TERMS.params + ("layout_ratio", "host_us"),
                                  EXPERT_QUANT_TERMS.inverse)
# DeepGEMM's m-grouped contiguous GEMM (the normal runner's) takes each expert's rows aligned to
# its block M, 128 (`get_mk_alignment_for_contiguous_layout`; SGLang's `ep_scatter` pads each
# expert's segment to it): its token tiles are 128 rows, not the fused kernel's `TILE_M`
CONTIGUOUS_BLOCK_M = 128


def eager_floor(row, coefficients) -> np.ndarray:
    """[..., n] `row` (`EXPERT_LAYOUT_TERMS` order, the host floor's column last) on the side
    the record lies: where its device time `row @ coefficients` falls under the eager call's
    host floor (`coefficients[-1]`, `host_us`), the call times its launches, `max(host_us,
    device)`: the floor's column alone (1), the device columns 0."""
    row, coefficients = np.asarray(row, dtype=np.float64), np.asarray(coefficients)
    floor = (row @ coefficients < coefficients[-1])[..., None]
    host = np.zeros_like(row)
    host[..., -1] = 1.0
    return np.where(floor, host, row)


def layout_rate_scale(params) -> float:
    """Factor on `layout_kb`'s bytes that prices them, at the experts' fitted HBM rate
    (`hbm_frac` x HBM: `epsim.cost.moe.received_layout_us`), at their own fitted rate instead
    (`layout_ratio` x the datasheet's: `EXPERT_LAYOUT_TERMS`): `layout_ratio x hbm_frac`; 1
    for a profile fitted before `layout_ratio` (the layout at the experts' rate)."""
    if "layout_ratio" not in params:
        return 1.0
    return float(params["layout_ratio"]) * float(params["hbm_frac"])


def contiguous_gemm(gemm: ExpertGemm) -> ExpertGemm:
    """`gemm` in DeepGEMM's contiguous layout (DeepEP normal's runner): token tiles of
    `CONTIGUOUS_BLOCK_M` rows."""
    return dataclasses.replace(gemm, tile_rows=CONTIGUOUS_BLOCK_M)


def unaligned_blocks(rows, block_m: int = CONTIGUOUS_BLOCK_M) -> tuple[np.ndarray, np.ndarray]:
    """([1] M-blocks, [1] experts whose weights they read) of DeepGEMM's contiguous GEMM over
    `rows` [experts] laid end to end without padding, as AIC's collector lays them: its
    `DeepEPNormalDispatchOutput` carries `num_recv_tokens_per_expert` of the bare per-expert
    counts (`collector/sglang/collect_wideep_deepep_moe.py`, `benchmark_moe_layer_prefill`: `[T
    top_k ep / 256] x` the local experts, 4-64 rows at 16-512 tokens a rank), where SGLang's
    serving dispatch aligns each expert's rows to 128 (`expert_alignment=128` under DeepGEMM,
    `token_dispatcher/deepep.py`), the `row_tiles` the simulator keeps. DeepGEMM's scheduler
    takes a block's expert from its first row (`deep_gemm/include/deep_gemm/common/
    scheduler.cuh`, `get_global_idx`: `grouped_layout[m_block_idx * BLOCK_M]` for
    `MGroupedContiguous`): `ceil(sum / block_m)` blocks, the distinct experts at their first
    rows the weights streamed (64 experts of 64 rows: 32 blocks and 32 experts' weights, half
    of what a padded layout reads; of 128 rows: 64 and 64)."""
    rows = np.asarray(rows, dtype=np.float64)
    total = float(rows.sum())
    starts = np.arange(0.0, total, block_m)
    owner = np.searchsorted(np.cumsum(rows), starts, side="right")
    return np.array([float(len(starts))]), np.array([float(len(np.unique(owner)))])
