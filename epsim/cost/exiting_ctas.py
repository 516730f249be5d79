"""The CTAs FlashInfer's TRT-LLM MoE launches and that exit at once, per SM (`exit_us` each).

The runner (`csrc/trtllm_fused_moe_runner.cu`) launches each batched GEMM's token dimension at
its worst case, `Routing::getMaxNumCtasInBatchDim` (`include/flashinfer/trtllm/fused_moe/
runner.h`, called with the input's `T` tokens and the rank's `E_l` local experts):

    launched = min(E_l, T k) + floor((T k - E_l) / tile)       token tiles

since routing is not known at launch. The CTAs past the live tiles (`numNonExitingCtas`, the
routed rows' `sum_e ceil(n_e / tile)`) start, read the count and exit: one per weight-column
tile of each GEMM (`ceil(N / TILE_N)`), spread over the SMs. At EP > 1 a rank's input holds the
group's tokens (AIC's collector, SGLang's `none` backend) while about `T k / ep` slots are its
own, so most launched tiles exit -- per-GPU work that does not shrink with EP, twice as much at
a 64-row tile as at 128; at EP 1 a few where the balanced share is below the tile.

The formats whose fits price them are `EXIT_FORMATS`: NVFP4, whose EP > 1 op tables are fitted
(`epsim.calibrate.aic_records.EP_FIT_FORMATS`); elsewhere the column is 0.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.experts import TILE_N, ExpertGemm

EXIT_FORMATS = ("nvfp4",)


def launched_tiles(input_slots, local_experts, tile) -> np.ndarray:
    """[...] token tiles the runner launches for each GEMM, `min(E_l, T k) + floor(max(T k -
    E_l, 0) / tile)`.

    Args:
        input_slots: [...] `T k`, the token-expert slots of the kernel's input (its local
            experts' or not).
        local_experts: [...] or a scalar, `E_l`.
        tile: [...] or a scalar, rows per token tile.
    """
    slots = np.asarray(input_slots, dtype=np.float64)
    local = np.asarray(local_experts, dtype=np.float64)
    return np.minimum(local, slots) + np.floor(np.maximum(slots - local, 0.0) / tile)


def exiting_ctas_per_sm(input_slots, local_experts, live_tiles, tile,
                        gemm: ExpertGemm) -> np.ndarray:
    """[...] CTAs per SM that start and exit: `(launched - live tiles, at least 0) x sum over
    both GEMMs of ceil(N / TILE_N) / num_sms`.

    Args:
        input_slots, local_experts, tile: as `launched_tiles` takes them.
        live_tiles: [...] the routed rows' tiles (`epsim.cost.experts.row_tiles`).
    """
    idle = np.maximum(launched_tiles(input_slots, local_experts, tile)
                      - np.asarray(live_tiles, dtype=np.float64), 0.0)
    columns = sum(-(-n // TILE_N) for n, _ in gemm.gemm_shapes())
    return idle * columns / gemm.num_sms
