"""Ledger: what the priced steps spent, by part and by step kind, for the provenance shares.

A `CostModel` adds a row per priced step (`ledger_row`; leapt decode steps in blocks,
`BlockRows`); `epsim.cost.provenance` tags each column with the component that priced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from epsim.cost.step import StepBlock
from epsim.cost.moe import MoECost
from epsim.cost.params import StepKindParams

# ledger columns, in order
COLUMNS = ("attention", "dispatch", "experts", "combine", "shared_experts", "dense", "overhead",
           "dispatch_host", "experts_host", "combine_host", "sync", "network", "block_ops",
           "block_ops_host", "layout", "attention_ops", "forward_host", "sustained_clock")
# `layout` (the backend's own layout work) lies inside `experts`, `attention_ops` (the attention
# block's own ops) inside `attention`: like the `*_host` columns they repeat a part of another
COLUMN = {name: i for i, name in enumerate(COLUMNS)}


@dataclass
class Ledger:
    """Time the costed steps spent per part, by step kind `(graph, kernel mode)`.

    Attributes:
        sums: (graph, mode) -> [len(COLUMNS)] float64 µs summed over steps (stage columns
            include their host overhead; `*_host` columns repeat the host part alone).
        tokens: (graph, mode) -> [min, max] tokens per rank of the steps' busiest rank.
        steps: (graph, mode) -> number of steps.
    """

    sums: dict[tuple[bool, str], np.ndarray] = field(default_factory=dict)
    tokens: dict[tuple[bool, str], list[float]] = field(default_factory=dict)
    steps: dict[tuple[bool, str], int] = field(default_factory=dict)

    def add(self, graph: bool, mode: str, row: np.ndarray, max_tokens: float) -> None:
        key = (graph, mode)
        if key not in self.sums:
            self.sums[key] = np.zeros(len(COLUMNS))
            self.tokens[key] = [max_tokens, max_tokens]
            self.steps[key] = 0
        self.sums[key] += row
        lo_hi = self.tokens[key]
        if max_tokens > 0:
            lo_hi[0] = min(lo_hi[0], max_tokens) if lo_hi[0] > 0 else max_tokens
            lo_hi[1] = max(lo_hi[1], max_tokens)
        self.steps[key] += 1

    def add_rows(self, graph: bool, mode: str, rows: np.ndarray, max_tokens: float) -> None:
        """`add` of each row of `rows` ([steps, columns]) in turn (the same sums)."""
        self.add(graph, mode, rows[0], max_tokens)
        sums = self.sums[(graph, mode)]
        for row in rows[1:]:
            sums += row
        self.steps[(graph, mode)] += rows.shape[0] - 1

    @property
    def total_us(self) -> float:
        """Sum of every part's time (host counted once; the layer sync by magnitude, as it may
        be negative where stages overlap)."""
        return float(sum(v[:COLUMN["dispatch_host"]].sum() + abs(v[COLUMN["sync"]])
                         + v[COLUMN["network"]] + v[COLUMN["block_ops"]]
                         + v[COLUMN["forward_host"]] + v[COLUMN["sustained_clock"]]
                         for v in self.sums.values()))


def ledger_row(step: StepKindParams, moe: MoECost, attn: float, shared: float, dense: float,
               overhead: float, scale: float, num_layers: int, attn_ops: float = 0.0,
               forward_host: float = 0.0, sustained_clock: float = 0.0) -> np.ndarray:
    """[len(COLUMNS)] one step's parts as `Ledger` sums them.

    Args:
        step: the step kind's parameters (its host overheads).
        moe: the step's MoE layers (one micro-batch's under two-batch overlap).
        attn, shared: one layer's attention and shared experts (slowest rank, one micro-batch).
        attn_ops: the attention block's own ops inside `attn` (one layer, one micro-batch).
        dense, overhead: the step's dense layers and LM head, and its overhead (µs).
        forward_host: the eager prefill forward's host time beyond its device time (µs,
            `epsim.cost.forward_host`).
        sustained_clock: what the power-capped clock adds to the step's device compute (µs,
            `epsim.cost.sustained`); the other columns are priced at the tables' burst clock.
        scale: micro-batches per step (two-batch overlap: 2).
    """
    host = step.host_rows[moe.mode] * num_layers * scale
    dispatch, experts, combine, network = moe.sums
    network *= scale
    return np.array([attn * scale * num_layers, dispatch * scale - network, experts * scale,
                     combine * scale - network, shared * scale * num_layers, dense, overhead,
                     host[0], host[1], host[2], moe.sync_us * scale * num_layers,
                     2.0 * network, moe.block_ops_sum * scale,
                     step.block_ops_host[moe.mode] * num_layers * scale, moe.layout_sum * scale,
                     attn_ops * scale * num_layers, forward_host, sustained_clock])


class BlockRows:
    """The ledger rows of leapt decode steps (`CostModel.record_decode_steps`): what `step`
    would have added one by one, a row per distinct MoE cost remembered while its pool serves
    (each leap asks again)."""

    def __init__(self):
        self._memo: dict[tuple, tuple[MoECost, np.ndarray]] = {}

    def rows(self, step: StepKindParams, block: StepBlock, moes: list[MoECost]) -> np.ndarray:
        """[len(moes), len(COLUMNS)] the first `len(moes)` steps of `block`."""
        terms, num_layers = block.terms, block.parts.shape[2]
        per_step_dense = bool(np.ndim(block.dense_us))
        dense = 0.0 if per_step_dense else block.dense_us
        memo, base = self._memo, []
        for m in moes:
            key = (id(m), terms.graph, terms.shared_us, dense, block.overhead_us, block.scale,
                   num_layers, terms.attention_ops_us)
            hit = memo.get(key)
            if hit is None or hit[0] is not m:
                if len(memo) >= 64:
                    memo.clear()
                hit = memo[key] = (m, ledger_row(step, m, 0.0, terms.shared_us, dense,
                                                 block.overhead_us, block.scale, num_layers,
                                                 terms.attention_ops_us))
            base.append(hit[1])
        rows = np.stack(base)
        rows[:, 0] = block.attention_us[:len(moes)] * block.scale * num_layers  # as `ledger_row`
        if per_step_dense:
            rows[:, 5] = block.dense_us[:len(moes)]
        return rows
