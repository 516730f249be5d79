"""What a run records: one row per step, per-layer and per-rank sums after warm-up.

Per-step rows stay plain tuples while the loop runs (cheap to append) and become arrays in
`SimResult`; request latencies come from the scheduler's per-request arrays at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from epsim.cost.provenance import provenance
from epsim.cost.step import StepCost
from epsim.sim.token_gaps import NO_GAPS, StepGaps, WindowGaps

PARTS = ("attention_us", "dispatch_us", "experts_us", "combine_us", "shared_experts_us",
         "block_ops_us", "layer_us")
STEP_COLUMNS = (
    "start_us", "step_us", "is_prefill", "num_tokens", "prefill_tokens", "decode_tokens",
    "output_tokens", "num_running", "num_waiting", "attention_us", "dispatch_us", "experts_us",
    "combine_us", "shared_experts_us", "block_ops_us", "dense_us", "overhead_us", "extra_us",
    "draft_us", "imbalance",
    "balancedness", "num_alive", "placement_version", "itl_count", "itl_mean_us", "itl_max_us",
)


def balance(pairs: np.ndarray, num_live: int | None = None) -> tuple[float, float]:
    """(imbalance, balancedness) of one step over its live ranks.

    imbalance = mean over layers of max/mean pairs per rank; balancedness = mean over layers
    of mean/max (EPLB's measure, 1.0 = balanced). Both from the per-layer maxima: every layer
    routes the same number of pairs.

    Args:
        pairs: [layers, ranks] pairs each rank computes.
        num_live: ranks the mean is over; default all.
    """
    total = float(pairs[0].sum()) if pairs.size else 0.0     # = num_live * mean
    if total <= 0:
        return 1.0, 1.0
    num_live = pairs.shape[1] if num_live is None else num_live
    peak = pairs.max(axis=1)                                   # [layers]
    mean = total / num_live
    return float(peak.sum()) / (mean * peak.shape[0]), float((mean / peak).mean())


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
        self.charged_us: dict[str, float] = {}                   # extra step time by label
        self._stats_memo: dict[tuple[int, int], tuple] = {}
        self.by_tokens: list[tuple[int, np.ndarray]] = []     # speculative: (row, [k] requests)

    @property
    def layer_sums(self) -> dict[str, np.ndarray]:
        """Per-layer sums over measured steps, by part name (`[layers]` each)."""
        return dict(zip(PARTS, self.part_sums))

    def record(self, start_us: float, step_us: float, extra_us: float, cost: StepCost,
               output_tokens: float, num_running: int, num_waiting: int,
               placement_version: int, prefill_tokens: float, decode_tokens: float,
               num_alive: int | None = None, gaps: StepGaps = NO_GAPS, draft_us: float = 0.0) -> None:
        """One step's row; `gaps`: the inter-token gaps it closed (`itl_*` columns, µs);
        `draft_us`: a speculative step's draft forwards (part of `step_us`)."""
        if gaps.by_tokens is not None:
            self.by_tokens.append((len(self.rows), gaps.by_tokens))
        pairs = cost.traffic.pairs
        parts = cost.parts                                         # [7, layers] in PARTS order
        totals = parts.sum(axis=1).tolist()
        num_alive = pairs.shape[1] if num_alive is None else num_alive
        stats = self._pair_stats(cost.traffic, num_alive)
        self.rows.append((
            start_us, step_us, cost.phase == "prefill", prefill_tokens + decode_tokens, prefill_tokens,
            decode_tokens, output_tokens, num_running, num_waiting, *totals[:6], cost.dense_us,
            cost.overhead_us, extra_us, draft_us, stats[0], stats[1], num_alive, placement_version,
            gaps.count, gaps.mean_s * 1e6, gaps.max_s * 1e6))
        if start_us >= self.warmup_us:
            self.part_sums += parts
            self.rank_pairs_sum += stats[2]
            self.num_measured_steps += 1

    def record_steps(self, start_us: np.ndarray, step_us: np.ndarray, parts: np.ndarray,
                     moes: list, dense_us: float | np.ndarray, overhead_us: float, num_tokens: float,
                     output_tokens: float, num_running: list[int], num_waiting: list[int],
                     placement_version: int, num_alive: int, gaps: list[StepGaps],
                     emitted: list[float] | None = None,
                     draft_us: list[float] | None = None) -> None:
        """`record` of k decode steps at once (the engine's leap, `epsim.sim.leap`): `start_us`,
        `step_us` [k], `parts` [k, 7, layers], one MoE cost per step (its traffic), `dense_us`
        one for all or [k]; no prefill and no extra time. The same rows and sums as k calls.
        Speculative verify steps (`epsim.sim.spec_leap`): `emitted` [k] the tokens each gave
        (its decode and output tokens), `draft_us` [k] its draft forwards (in `step_us`)."""
        totals = parts.sum(axis=2).tolist()
        num = len(moes)
        dense = dense_us.tolist() if np.ndim(dense_us) else [dense_us] * num
        tokens = [num_tokens] * num if emitted is None else emitted
        outputs = [output_tokens] * num if emitted is None else emitted
        drafts = [0.0] * num if draft_us is None else draft_us
        for i, (start, step, moe, gap) in enumerate(zip(start_us.tolist(), step_us.tolist(),
                                                        moes, gaps)):
            if gap.by_tokens is not None:
                self.by_tokens.append((len(self.rows), gap.by_tokens))
            stats = self._pair_stats(moe.traffic, num_alive)
            self.rows.append((
                start, step, False, tokens[i], 0.0, tokens[i], outputs[i], num_running[i],
                num_waiting[i], *totals[i][:6], dense[i], overhead_us, 0.0, drafts[i], stats[0],
                stats[1], num_alive, placement_version, gap.count, gap.mean_s * 1e6,
                gap.max_s * 1e6))
            if start >= self.warmup_us:
                self.part_sums += parts[i]
                self.rank_pairs_sum += stats[2]
                self.num_measured_steps += 1

    def _pair_stats(self, traffic, num_alive: int) -> tuple[float, float, np.ndarray]:
        """(imbalance, balancedness, [ranks] whole-batch pairs summed over layers) of a step's
        traffic; remembered per Traffic object, since the fast engine's steps reuse a few."""
        key = (id(traffic), num_alive)
        hit = self._stats_memo.get(key)
        if hit is not None and hit[0] is traffic:
            return hit[1]
        pairs = traffic.pairs
        stats = (*balance(pairs, num_alive), pairs.sum(axis=0) / traffic.fraction)
        if len(self._stats_memo) >= 16:
            self._stats_memo.clear()
        self._stats_memo[key] = (traffic, stats)               # holds traffic: its id stays unique
        return stats

    def record_stall(self, start_us: float, stall_us: float, label: str) -> None:
        self.stalls.append((start_us, stall_us, label))

    def record_charge(self, us: float, label: str) -> None:
        self.charged_us[label] = self.charged_us.get(label, 0.0) + us

    def rank_pairs_mean(self) -> np.ndarray:
        """[ranks] mean pairs per rank per layer per measured step."""
        num_layers = self.part_sums.shape[1]
        return self.rank_pairs_sum / (max(self.num_measured_steps, 1) * num_layers)

    def itl_by_tokens(self, width: int) -> np.ndarray | None:
        """[steps, width] requests that got k = 1 .. width tokens in each step's gaps
        (speculative decoding; None without it)."""
        if not self.by_tokens:
            return None
        out = np.zeros((len(self.rows), width))
        for row, counts in self.by_tokens:
            out[row, :counts.shape[0]] = counts
        return out

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
        arrival_s, first_token_s, finish_s, input_len, output_len, is_initial, lost: [requests]
            (`lost`: on a rank that failed; never finishes).
        retry_of: [requests] int64, a client's resend of a lost request: the first send's id
            (its `arrival_s` is the first send's); -1 for a first send (`epsim.sim.retries`).
        window_gaps: per request, inter-token gaps that ended in the measurement window
            (`epsim.sim.token_gaps.WindowGaps`; TPOT = span_s / count).
        stalls: (start_us, stall_us, label) of every stop-the-world pause.
        charged_us: extra step time added by `Simulation.charge`, by label (µs, whole run).
        rebalances: one dict per EPLB rebalance (`epsim.sim.eplb_process.RebalanceEvent.as_dict`).
        elastic_events: one dict per rank failure or recovery (`epsim.sim.elastic`).
        initial_running_per_rank: requests per rank running at t=0, "steady" resolved.
        itl_by_tokens: [steps, k] with speculative decoding, the requests whose gap a step
            closed that got k = 1, 2, ... tokens in it (None: one token each).
        accept_length: with speculative decoding, tokens per request per verify step (SGLang's
            `avg_spec_accept_length`, the bonus token included) over the window.
        accept_source: with speculative decoding, where the chain's acceptance came from (the
            deployment's stated length, or the published one for the workload's prompt_kind).
        kv_cache: the KV pool's capacity and how often it held admissions back.
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
    lost: np.ndarray | None = None
    charged_us: dict = field(default_factory=dict)
    rebalances: list = field(default_factory=list)
    elastic_events: list = field(default_factory=list)
    window_gaps: WindowGaps | None = None
    initial_running_per_rank: int = 0   # decode requests per rank at t=0 ("steady" resolved)
    itl_by_tokens: np.ndarray | None = None   # [steps, k] requests that got k tokens (speculative)
    accept_length: float | None = None        # tokens per request per verify step (speculative)
    accept_source: str | None = None          # where the acceptance came from (`Acceptance.source`)
    kv_cache: dict = field(default_factory=dict)   # the KV pool and when it bound (`epsim.sim.kv_pool`)
    retry_of: np.ndarray | None = None        # [requests] a resend's first send, -1 (`epsim.sim.retries`)


def sim_result(sim, wall_seconds: float) -> SimResult:
    """The `SimResult` of `sim` (an `epsim.sim.engine.Simulation`) as it stands: its steps,
    requests, events, profile and KV pool; `wall_seconds` the host time the run took (s)."""
    sched, metrics, w = sim.scheduler, sim.metrics, sim.scenario.workload
    requests = sched.trimmed_state()            # per request: lengths, times, losses
    n = max(metrics.num_measured_steps, 1)
    prof = sim.profile
    return SimResult(
        scenario=sim.stated, seed=sim.seed, duration_s=w.duration_s, warmup_s=w.warmup_s,
        num_gpus=sim.scenario.deployment.num_gpus, steps=metrics.step_table(),
        layer_mean_us={k: v / n for k, v in metrics.layer_sums.items()},
        rank_pairs_mean=metrics.rank_pairs_mean(), num_measured_steps=metrics.num_measured_steps,
        arrival_s=requests.arrival_s, first_token_s=requests.first_token_s,
        finish_s=requests.finish_s, input_len=requests.input_len,
        output_len=requests.output_len, is_initial=requests.is_initial,
        stalls=list(metrics.stalls), lost=requests.lost, charged_us=dict(metrics.charged_us),
        retry_of=sched.retries.retry_of(requests.count),
        window_gaps=sched.window_gaps(trim=True),
        rebalances=[e.as_dict() for e in sim.eplb.events] if sim.eplb is not None else [],
        elastic_events=[dict(e) for e in sim.elastic.events] if sim.elastic is not None else [],
        profile_info={"name": prof.name, "path": prof.path, "hardware": prof.hardware,
                      "records_sha256": prof.provenance.records_sha256,
                      "applies": sim.cost_model.params.profile_applies,
                      "rule": sim.cost_model.profile_rule,
                      "components": {k: v.source for k, v in sorted(prof.components.items())},
                      "provenance": provenance(sim.cost_model)},
        wall_seconds=wall_seconds, last_step=sim.last_step,
        initial_running_per_rank=sim.initial_running_per_rank,
        kv_cache={**sim.memory.as_dict(), **sim.kv_pool.summary()},
        itl_by_tokens=(metrics.itl_by_tokens(sim.scenario.deployment.speculative_steps[0] + 1)
                       if sim.acceptance is not None else None),
        accept_length=(sched.spec_tokens / sched.spec_verifies
                       if sim.acceptance is not None and sched.spec_verifies else None),
        accept_source=sim.acceptance.source if sim.acceptance is not None else None)