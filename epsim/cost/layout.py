"""A backend's own work around the grouped GEMM: the layout its dispatch delivers rows in, and
back, priced apart from the kernel (`epsim.cost.experts`) and the block's own ops
(`epsim.cost.block_ops`), so that one model prices the experts whatever the backend.

Low-latency kernels (`pair` copies: Mooncake EP, DeepEP low-latency) deliver each (token,
expert) copy into a per-expert receive buffer and reduce the top-k outputs inside their combine,
so the block runs no permute and no weighting of its own. The live block gathers the rows of
that buffer into the grouped GEMM's layout (`live.backends.packed.unpack`) and scatters the
outputs back (`pack`): per pair a rank receives, a gather and a scatter of one row,

    t = base_us + pairs * 8 H / hbm_gbps * 1e-3        (read + write 2H each way)

  base_us    the layout's launches (index, gather, scatter; device time in a CUDA graph)
  hbm_gbps   the rate its gathers reach (<= datasheet HBM)

The harness's gather also writes the padding rows of a buffer sized for the most pairs a rank
can receive (`ranks x max tokens x min(top_k, local experts)`); at EP 2, where it was measured,
that static size and the pairs fit the stage alike, and beyond EP 2 the padding is the
harness's own (a serving engine's grouped GEMM reads the valid rows): the term follows the
pairs, bounded in EP at a given batch. Other backends (`torch`, DeepEP normal, `none`) hand the
block the rows of the pairs it computes; their permute and weighting are the block's own ops,
and their own term, where measured, is the same form.

Fitted as `<backend>/layout[/graph][/fp8]` on the two-GPU `experts` stage records, measured less
the kernel model and the block ops inside the stage at the same counts
(`epsim.cost.record`). No backend's own work is assumed where none was measured: without
that fit the term is not charged (a serving engine's grouped GEMM can read the low-latency
layout directly, as DeepGEMM's masked kernel does). At EP 1 no a2a backend runs: no term.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.linear import LAYOUT_TERMS
from epsim.cost.roofline import HBM_EFFICIENCY
from epsim.spec.hardware import HardwareSpec

BYTES_PER_ROW_PER_HIDDEN = 8.0      # gather (read + write 2H) and scatter back (read + write 2H)


def layout_defaults(hardware: HardwareSpec) -> dict[str, float]:
    """Starting values of `<backend>/layout` for a fit: no fixed cost, HBM times the stated
    efficiency; unfitted, the term is not charged (module docstring)."""
    return {"base_us": 0.0, "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY}


def layout_features(rows, hidden_size: int) -> np.ndarray:
    """[..., 2] design columns (1 where a rank has rows, KB moved) of `rows` ([...]: the pairs
    a rank receives); times `LAYOUT_TERMS.coefficients(params)` gives `layout_us`."""
    r = np.asarray(rows, dtype=np.float64)
    return np.stack([(r > 0).astype(np.float64), r * BYTES_PER_ROW_PER_HIDDEN * hidden_size
                     * 1e-3], axis=-1)


def layout_us(rows, hidden_size: int, params) -> np.ndarray:
    """[...] microseconds of the layout work over `rows` ([...]: the pairs a rank receives);
    0 where there are none."""
    base, per_kb = LAYOUT_TERMS.coefficients(params)
    r = np.asarray(rows, dtype=np.float64)
    return np.where(r > 0, base + r * (BYTES_PER_ROW_PER_HIDDEN * hidden_size * 1e-3 * per_kb),
                    0.0)
