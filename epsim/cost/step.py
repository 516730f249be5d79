"""A priced step: `StepCost` (one step's time by part) and `StepBlock` (k decode steps priced
at once), with what their pricing shares: a batch's `TokenTerms` and the stacked MoE costs a
block reads (`MoEStacks`). Two-batch overlap's layer time is `epsim.cost.tbo`'s.

`CostModel.step` and `CostModel.decode_steps` (epsim.cost.model) produce them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.moe import MoECost
from epsim.cost.tbo import Stages, overlapped_stages
from epsim.cost.traffic import Traffic
from epsim.fast_init import fast_init


@fast_init
@dataclass(frozen=True, eq=False)
class StepCost:
    """One step's time, by part. Per-layer arrays are `[moe_layers]` float64 microseconds.

    With two-batch overlap, the part arrays hold both micro-batches' work and `layer_us` the
    overlapped layer time, so `layer_us` may be less than the sum of the parts; `traffic` is
    then one micro-batch's (`traffic.fraction` = 0.5). So may it where the shared experts run
    beside the router and routed experts (`TokenTerms.shared_beside`).
    """

    attention_us: np.ndarray
    dispatch_us: np.ndarray
    experts_us: np.ndarray
    combine_us: np.ndarray
    shared_experts_us: np.ndarray
    block_ops_us: np.ndarray
    layer_us: np.ndarray
    dense_us: float
    overhead_us: float
    step_us: float
    phase: str
    mode: str
    traffic: Traffic
    parts: np.ndarray        # [7, layers]: the seven per-layer arrays above as rows, in order
    stages: Stages | None = None    # two-batch overlap: one micro-batch's stages (epsim.cost.tbo)


@dataclass(frozen=True)
class TokenTerms:
    """What a step costs that depends only on its tokens per rank (`CostModel._token_terms`):
    CUDA graph or eager, one layer's shared experts, the LM head, one dense layer's MLP, the
    per-step overhead (µs, slowest rank each), the busiest EP rank's tokens, and one layer's
    attention-block ops of one micro-batch (slowest rank; inside the attention time, for the
    ledger)."""

    graph: bool
    shared_us: float
    lm_head_us: float
    dense_mlp_us: float
    overhead_us: float
    max_tokens: float
    attention_ops_us: float = 0.0
    prepare_us: float = 0.0        # two-batch overlap: a micro-batch's attention before its kernel
    shared_beside: bool = False    # the shared experts beside the router and routed experts
    # ... and how much of the shorter of the two overlaps the longer (`epsim.cost.dual_stream`)
    beside_overlap_frac: float = 1.0


@fast_init
@dataclass(frozen=True, eq=False)
class StepBlock:
    """k decode steps priced at once (`CostModel.decode_steps`): `step_us` [k] and `parts`
    [k, 7, layers] (`StepCost.parts` of each step); `cost(i, moe)` is step i's StepCost."""

    step_us: np.ndarray
    parts: np.ndarray
    dense_us: float | np.ndarray      # [k] with dense layers (their attention differs by step)
    overhead_us: float
    phase: str
    attention_us: np.ndarray          # [k] one layer's attention (slowest rank, one micro-batch)
    terms: TokenTerms
    scale: float = 1.0                # micro-batches per step (two-batch overlap: 2)

    def dense(self, i: int) -> float:
        """Step i's dense layers and LM head (µs)."""
        return float(self.dense_us[i]) if np.ndim(self.dense_us) else self.dense_us

    def cost(self, i: int, moe: MoECost) -> StepCost:
        p = self.parts[i]
        stages = None
        if self.scale != 1.0:                 # two-batch overlap: decode's stages, as priced
            stages = overlapped_stages("decode", self.terms.prepare_us, self.terms.shared_us,
                                       self.attention_us[i], moe.stage_rows, moe.block_ops_us,
                                       (moe.dispatch_wire_us, moe.combine_wire_us), True)
        return StepCost(attention_us=p[0], dispatch_us=p[1], experts_us=p[2], combine_us=p[3],
                        shared_experts_us=p[4], block_ops_us=p[5], layer_us=p[6],
                        dense_us=self.dense(i), overhead_us=self.overhead_us,
                        step_us=float(self.step_us[i]), phase=self.phase, mode=moe.mode,
                        traffic=moe.traffic, parts=p, stages=stages)


@fast_init
@dataclass(frozen=True, eq=False)
class MoEStack:
    """A few MoE costs' arrays stacked for `CostModel.decode_steps`: experts, block ops and
    dispatch + combine `[moes, layers]`, the three stages `[moes, 3, layers]`, sync `[moes]`,
    the dispatch's and combine's parts off the compute stream `[moes, 2, layers]`."""

    experts: np.ndarray
    block: np.ndarray
    comm: np.ndarray
    stages: np.ndarray
    sync: np.ndarray
    wire: np.ndarray


class MoEStacks:
    """The arrays of the distinct MoE costs among a block's steps stacked, remembered for the
    last set (a pool's rows, asked for at every leap over it, in whatever order its steps
    drew them)."""

    def __init__(self):
        self._memo: tuple[dict[int, int], list[MoECost], MoEStack] | None = None

    def stack(self, moes: list[MoECost]) -> tuple[np.ndarray, MoEStack]:
        """(each step's row [len(moes)] int64, the distinct costs stacked `[distinct, ...]`)."""
        index, stacked = self._stacked(moes)
        pick = np.fromiter((index[id(m)] for m in moes), dtype=np.int64, count=len(moes))
        return pick, stacked

    def _stacked(self, moes: list[MoECost]) -> tuple[dict[int, int], MoEStack]:
        if self._memo is not None:
            index, held, stacked = self._memo
            if all(id(m) in index and held[index[id(m)]] is m for m in moes):
                return index, stacked
        distinct = list({id(m): m for m in moes}.values())
        layers = distinct[0].experts_us.shape
        stacked = MoEStack(
            _rows([m.experts_us for m in distinct], layers),
            _rows([m.block_ops_us for m in distinct], layers),
            _rows([m.comm_us for m in distinct], layers),
            _rows([m.stage_rows for m in distinct], distinct[0].stage_rows.shape),
            np.array([m.sync_us for m in distinct]),
            _rows([(m.dispatch_wire_us, m.combine_wire_us) for m in distinct], (2,) + layers))
        index = {id(m): i for i, m in enumerate(distinct)}
        self._memo = (index, distinct, stacked)
        return index, stacked


def _rows(parts: list, shape: tuple) -> np.ndarray:
    """`np.stack` of `parts` (arrays or floats, or pairs of them) each broadcast to `shape`,
    `[len(parts), *shape]`, filled row by row: the same values as stacking broadcast views,
    without a view and a stack call per row (a miss of `MoEStacks` stacked four pools' rows at
    every leap of a busy decode batch)."""
    pairs = isinstance(parts[0], tuple)
    arrays = [a for pair in parts for a in pair] if pairs else parts
    out = np.empty((len(parts),) + tuple(shape), dtype=np.result_type(*arrays))
    for i, part in enumerate(parts):
        if pairs:
            out[i, 0], out[i, 1] = part
        else:
            out[i] = part
    return out
