"""One step's plan: the batch the cost model prices and what the scheduler applies after it.

`epsim.sim.batching.Scheduler.plan` forms it before a step runs; `Scheduler.commit` applies it
when the step ends (restricted to the live slots if a rank failed meanwhile,
`epsim.sim.rank_loss.without_freed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.attention import BatchCounts


@dataclass(eq=False)
class Plan:
    """One step's batch: per-rank counts for the cost model and what `commit` applies."""

    batch: BatchCounts
    decoding: np.ndarray                  # [ranks, slots] bool, slots that decode one token
    prefill_alloc: np.ndarray | None      # [ranks, slots] int64 prefill tokens this step
    finishing_prefill: np.ndarray | None  # [ranks, slots] bool, prompt completes this step
    fresh_ids: np.ndarray | None          # decode instances: requests whose first step this is
    num_waiting: int = 0                  # arrived requests still without a slot
    requests: np.ndarray | None = None    # speculative: [ranks] requests the verify step runs
    context: np.ndarray | None = None     # speculative: [ranks] their contexts' sum (+1 each)

    @property
    def num_tokens(self) -> float:
        return float(self.batch.tokens.sum())
