"""What a run records: one row per step, per-layer and per-rank sums after warm-up.

Per-step rows stay plain tuples while the loop runs (cheap to append) and become arrays in
`SimResult`; request latencies come from the scheduler's per-request arrays at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from epsim.cost.model import StepCost

PARTS = ("attention_us", "dispatch_us", "experts_us", "combine_us", "shared_experts_us", "layer_us")
STEP_COLUMNS = (
    "start_us", "step_us", "is_prefill", "num_tokens", "prefill_tokens", "decode_tokens",
    "output_tokens", "num_running", "num_waiting", "attention_us", "dispatch_us", "experts_us",
    "combine_us", "shared_experts_us", "dense_us", "overhead_us", "extra_us", "imbalance",
    "placement_version",
)


def imbalance(pairs: np.ndarray) -> float:
    """Mean over layers of max/mean token-expert pairs per rank (1.0 = balanced).

    Every layer routes the same number of pairs, so the mean over layers of max/mean is
    the mean of the per-layer maxima over the per-layer mean.

    Args:
        pairs: [layers, ranks] pairs each rank computes.
    """
    total = float(pairs[0].sum()) if pairs.size else 0.0     # = num_ranks * mean
    return float(pairs.max(axis=1).sum()) * pairs.shape[1] / (total * pairs.shape[0]) if total > 0 else 1.0


class MetricsRecorder:
    """Collects step rows and, for steps starting at or after `warmup_us`, sums per layer and
    per rank."""

    def __init__(self, num_layers: int, num_ranks: int, warmup_us: float):
        self.warmup_us = warmup_us
        self.rows: list[tuple] = []
        self.part_sums = np.zeros((len(PARTS), num_layers))          # rows follow PARTS
        self.rank_pairs_sum = np.zeros(num_ranks)
        self.num_measured_steps = 0
        self.stalls: list[tuple[float, float, str]] = []

    @property
    def layer_sums(self) -> dict[str, np.ndarray]:
        """Per-layer sums over measured steps, by part name (`[layers]` each)."""
        return dict(zip(PARTS, self.part_sums))

    def record(self, start_us: float, step_us: float, extra_us: float, cost: StepCost,
               output_tokens: float, num_running: int, num_waiting: int,
               placement_version: int, prefill_tokens: float, decode_tokens: float) -> None:
        pairs = cost.traffic.pairs
        parts = cost.parts                                         # [6, layers] in PARTS order
        totals = parts.sum(axis=1).tolist()
        self.rows.append((
            start_us, step_us, cost.phase == "prefill", prefill_tokens + decode_tokens, prefill_tokens,
            decode_tokens, output_tokens, num_running, num_waiting, *totals[:5], cost.dense_us,
            cost.overhead_us, extra_us, imbalance(pairs), placement_version))
        if start_us >= self.warmup_us:
            self.part_sums += parts
            self.rank_pairs_sum += pairs.sum(axis=0) / cost.traffic.fraction   # whole batch
            self.num_measured_steps += 1

    def record_stall(self, start_us: float, stall_us: float, label: str) -> None:
        self.stalls.append((start_us, stall_us, label))

    def rank_pairs_mean(self) -> np.ndarray:
        """[ranks] mean pairs per rank per layer per measured step."""
        num_layers = self.part_sums.shape[1]
        return self.rank_pairs_sum / (max(self.num_measured_steps, 1) * num_layers)

    def step_table(self) -> dict[str, np.ndarray]:
        """Columns `STEP_COLUMNS` -> [steps] arrays."""
        if not self.rows:
            return {name: np.zeros(0) for name in STEP_COLUMNS}
        table = np.array(self.rows, dtype=np.float64)
        return {name: table[:, i] for i, name in enumerate(STEP_COLUMNS)}


@dataclass(eq=False)
class SimResult:
    """Everything a finished run produced (inputs to `epsim.report`).

    Attributes:
        steps: `STEP_COLUMNS` -> [steps] arrays.
        layer_mean_us: per-layer means over measured steps, `[moe_layers]` each.
        rank_pairs_mean: [ranks] mean token-expert pairs per rank per layer per measured step.
        arrival_s, first_token_s, finish_s, input_len, output_len, is_initial: [requests].
    """

    scenario: object
    seed: int
    duration_s: float
    warmup_s: float
    num_gpus: int
    steps: dict[str, np.ndarray]
    layer_mean_us: dict[str, np.ndarray]
    rank_pairs_mean: np.ndarray
    num_measured_steps: int
    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    is_initial: np.ndarray
    stalls: list = field(default_factory=list)
    profile_info: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    last_step: object = None     # StepInfo of the last completed step (for a timeline)
