"""What a rebalance moved and how long it took: `RebalanceResult` (one rank, one rebalance)
and `rebalance_record`, the `rebalance` measurement record of one or more repeats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from live.timing import summarize_us


@dataclass(frozen=True)
class RebalanceResult:
    """What one rebalance moved and how long it took on this rank.

    Attributes:
        plan: `MovePlan.summary()` (bytes per rank and rank pair, local copies, reloads).
        chunk_layers: the layers of each chunk that moved something, in order (chunks with
            nothing to move are skipped on every rank).
        chunk_us: [chunks] wall time of each chunk here: votes, transfers, commit (µs).
        transfer_us: [chunks] the staging part (transfers + local copies + reloads, synced).
        commit_us: [chunks] copying the spare buffer into the slots + map update.
        total_us: the whole rebalance here, validation and plan included, serving between
            chunks excluded (µs).
        per_rank_total_us: [control ranks] every rank's total_us.
        spare_buffer_bytes: the one spare buffer this rank holds.
    """

    plan: dict
    chunk_layers: list[list[int]]
    chunk_us: list[float]
    transfer_us: list[float]
    commit_us: list[float]
    total_us: float
    per_rank_total_us: list[float]
    layers_per_chunk: int
    spare_buffer_bytes: int
    extra: dict = field(default_factory=dict)

    @property
    def slowest_us(self) -> float:
        return max(self.per_rank_total_us)

    @property
    def link_gbps(self) -> float:
        """Achieved rate: bytes over links / slowest rank's time (GB/s = 1e9 bytes/s)."""
        return self.plan["link_bytes"] / (self.slowest_us * 1e3)       # 1 GB/s = 1e3 bytes/µs

    def record_extra(self) -> dict:
        return {**self.plan, "chunk_layers": self.chunk_layers, "chunk_us": self.chunk_us,
                "transfer_us": self.transfer_us, "commit_us": self.commit_us,
                "layers_per_chunk": self.layers_per_chunk,
                "spare_buffer_bytes": self.spare_buffer_bytes,
                "timer": "host perf_counter, device synchronized", **self.extra}


def rebalance_record(results: Sequence[RebalanceResult], model, provenance: dict, /,
                     **fields) -> dict:
    """A `rebalance` record dict (`epsim.records.MeasurementRecord` fields) of one or more
    repeats of the same move: `bytes` = bytes over links (all ranks), times = the slowest
    rank's whole rebalance, median over repeats; the first repeat's tallies in `extra`, and
    `extra.gbps` = the busiest rank's max(sent, received) bytes / median time (the cost
    model's `t = max(sent, received) / link_gbps`)."""
    first = results[0]
    cfg, placement = model.config, model.placement
    slowest = [r.slowest_us for r in results]
    per_rank = np.median([r.per_rank_total_us for r in results], axis=0).tolist()
    busiest = max(max(first.plan["send_bytes_per_rank"]), max(first.plan["recv_bytes_per_rank"]))
    base = dict(kind="rebalance", backend=model.backend.name, ep_size=placement.num_ranks,
                num_tokens_per_rank=0, hidden_size=cfg.hidden_size,
                moe_intermediate_size=cfg.moe_intermediate_size, num_experts=cfg.num_experts,
                num_physical_experts=placement.num_physical, top_k=cfg.top_k,
                num_layers=len(model.layer_ids), bytes=first.plan["link_bytes"],
                num_iters=len(results), **summarize_us(slowest),
                per_rank_median_us=per_rank if len(per_rank) == placement.num_ranks else [],
                extra={**first.record_extra(), "gbps": busiest / (float(np.median(slowest)) * 1e3)},
                provenance=provenance)
    extra = fields.pop("extra", {})
    base.update(fields)
    base["extra"].update(extra)
    return base
