"""Speculative decoding as SGLang runs it (EAGLE / NEXTN, DeepSeek's MTP module as the draft).

One scheduler step of a speculative decode is one verify cycle (SGLang's `EAGLEWorker`,
python/sglang/srt/speculative/eagle_worker.py, `forward_batch_generation`):

1. draft: `num_steps - 1` forwards of the draft model over `eagle_topk` tokens per request (the
   first draft token came from the previous cycle's draft extend);
2. verify: one forward of the target model over `num_draft_tokens` tokens per request, the
   logits of all of them sampled;
3. draft extend: one draft forward over `num_steps + 1` tokens per request (the accepted ones,
   padded), the LM head on one row per request.

Each request then gets `k` tokens, 1 <= k <= num_steps + 1 (the accepted drafts and the target's
bonus token). The draft model of DeepSeek-V3/R1 is its MTP module: one decoder layer (MLA
attention and an MoE layer with the target's experts, dispatched the same way) and the shared
LM head, priced by the same cost model as a one-layer model (`DraftPricer`; under a run's
`coarse_pools`, its MoE layer from pools of draws, as the fast engine prices the target's steps:
`epsim.sim.stepper`). The verify step is
the target's decode step over `num_draft_tokens` tokens per request (`verify_counts`): every
token through the MoE layers and the LM head, the attention's FLOPs for every query, its KV
cache read once per request and its decode kernel run once per request, the draft tokens' queries
in one tile (`BatchCounts.decode_queries_per_seq`).

Acceptance (`Acceptance`): each draft token is accepted, given the ones before it were, with a
probability `a` alike at every position (a chain), so `P(k) = a^(k-1) (1 - a)` for k <= num_steps
and `P(num_steps + 1) = a^num_steps`; `a` is chosen so that the mean is the deployment's
`speculative_accept_length` (SGLang's `avg_spec_accept_length`: accepted drafts + 1, per request
and verify step), or, without one, taken from the published acceptance for the workload's
`prompt_kind` (`epsim.sim.accept_sources`: the DeepSeek-V3 report's 0.85 for natural text,
InferenceX's measurement for random token ids with and without the chat template).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.cost.model import CostModel
from epsim.cost.tables import build_tables, contiguous_placement
from epsim.eplb.placement import Placement
from epsim.routing.skew import SkewModel
from epsim.sim.accept_sources import SOURCES, chain_rate
from epsim.sim.stepper import DRIFT_STALE_FRAC, MAX_DRAWS, USES_PER_DRAW, moe_draws, nearby


# `Acceptance.draw` counts thresholds from this many draws (a leap's blocks of steps x slots);
# below, `searchsorted` is as fast
COUNT_DRAWS_FROM = 1024


class Acceptance:
    """Tokens a request gets per verify step (module doc), drawn from its own seeded stream.

    Args:
        steps: `speculative_num_steps`.
        accept_length: the mean (SGLang's `avg_spec_accept_length`); None: the published
            acceptance for `prompt_kind` (`epsim.sim.accept_sources.SOURCES`).
        seed: the run's seed.
        prompt_kind: the workload's `prompt_kind`.
    Attributes:
        rate: the per-position acceptance `a`; probs: [steps + 1] P(k = 1 .. steps + 1);
        source: where `rate` came from, one sentence; label: the same in a few words.
    """

    def __init__(self, steps: int, accept_length: float | None, seed: int,
                 prompt_kind: str = "natural"):
        if accept_length is None:
            found = SOURCES[prompt_kind]
            rate, self.source, self.label = found.rate, found.text, found.label
        else:
            rate = chain_rate(accept_length, steps)
            self.label = f"stated {accept_length:g}"
            self.source = f"deployment.speculative_accept_length {accept_length:g} (stated)"
        self.rate, self.steps = rate, steps
        k = np.arange(1, steps + 2)
        probs = rate ** (k - 1) * (1.0 - rate)
        probs[-1] = rate ** steps
        self.probs = probs / probs.sum()
        self.mean = float((k * self.probs).sum())
        self._cum = np.cumsum(self.probs)
        self._rng = np.random.default_rng([seed, 0x5EC])

    def draw(self, num: int) -> np.ndarray:
        """[num] int64 tokens per request of one verify step: 1 + how many of the cumulative
        probabilities lie at or below a uniform on [0, total). From `COUNT_DRAWS_FROM` draws
        up, counted threshold by threshold (steps + 1 vectorised compares, 5-10x faster than
        `searchsorted`'s binary search on many random keys; the same integers)."""
        u = self._rng.random(num) * self._cum[-1]
        if num < COUNT_DRAWS_FROM:
            return np.searchsorted(self._cum, u, side="right") + 1
        tokens = np.ones(num, dtype=np.int64)
        for threshold in self._cum.tolist():
            tokens += u >= threshold
        return tokens

    def verify_tokens(self, decoding: np.ndarray, out_left: np.ndarray) -> np.ndarray:
        """[ranks, slots] int32 tokens each decoding slot's request gets from one verify step:
        `draw` per decoding slot (`decoding`, [ranks, slots] bool), at most what its request has
        left (`out_left`, [ranks, slots] int32)."""
        made = np.zeros(decoding.shape, dtype=np.int32)
        slots = np.flatnonzero(decoding)
        made.reshape(-1)[slots] = np.minimum(self.draw(slots.shape[0]), out_left.reshape(-1)[slots])
        return made


def verify_counts(batch: BatchCounts, draft_tokens: int) -> BatchCounts:
    """The verify step's counts of a decode batch (`decode_tokens` requests per rank): every
    request runs `draft_tokens` queries, query j over its context + j + 1 keys, all sampled."""
    n = batch.decode_tokens
    extra = n * draft_tokens * (draft_tokens - 1) / 2.0
    return BatchCounts(n * draft_tokens, batch.decode_context * draft_tokens + extra,
                       batch.prefill_tokens, batch.prefill_context, batch.prefill_pairs,
                       batch.sampled_tokens + n * (draft_tokens - 1), batch.phase,
                       batch.prefill_seqs, float(draft_tokens))


class _Pool:
    """MoE draws of one draft forward shape: their costs `rows`, drawn at `t_s` for EP ranks'
    dispatched `tokens` ([ranks]), serving at most `max_uses` forwards."""

    def __init__(self, t_s: float, tokens: np.ndarray, rows: list, max_uses: int):
        self.t_s, self.rows, self.max_uses = t_s, rows, max_uses
        self.total, self.most = float(tokens.sum()), float(tokens.max(initial=0.0))
        self.used = 0


class DraftPricer:
    """The draft model's forwards of one verify cycle (module doc), priced as a one-layer model.

    Under `pooled` (a run's `coarse_pools`), its cycles (`cycle_us` on the run's stream) take
    the draft's MoE layer from pools of draws, one per forward of the cycle (the draft decode
    forwards, the extend, a prefill chunk's), as the fast engine's coarse pools serve the
    target's steps (`epsim.sim.stepper`: at most `USES_PER_DRAW` forwards per draw, `MAX_DRAWS`
    draws, redrawn past the drift window or for a shape not `nearby` the pool's; a trace skew
    draws every forward). Each forward still prices its own attention and dense parts; the
    draft's forwards cost an MTP decode run most of its time when each drew and priced its own
    MoE layer (an 8192-output MTP row: three quarters).
    Otherwise, and with a caller's own `rng` (the steady-batch model's price of one batch),
    every forward draws its own.

    Args:
        scenario, profile, seed: the run's.
        pooled: a run's cycles take the draft's MoE layer from pools (above).
    """

    def __init__(self, scenario, profile, seed: int, pooled: bool = False):
        sc = scenario
        m, c, d, w = sc.model, sc.cluster, sc.deployment, sc.workload
        self.steps, self.topk, self.draft_tokens = d.speculative_steps
        one = m.model_copy(update={"num_layers": 1, "num_dense_layers": 0})
        self.cost_model = CostModel(one, c, d, profile)
        # the scheduler's per-request loops run once a cycle, priced with the verify step
        self.cost_model.scheduler_host = replace(self.cost_model.scheduler_host, request_us=0.0)
        self.skew = SkewModel(w.skew, 1, m.num_experts, m.top_k, seed=seed, base_dir=sc.base_dir)
        placement = Placement.on_cluster(
            contiguous_placement(1, m.num_experts, d.ep_size, d.ep_num_redundant_experts),
            m.num_experts, d.ep_size, c.gpus_per_node_resolved)
        self.tables = build_tables(placement, d.ep_dispatch_algorithm)
        self.rng = np.random.Generator(np.random.SFC64([seed, 0xD4AF7]))
        # the step's fixed overhead and its scheduler host time, paid once by the cycle
        self.overhead_base_us = (self.cost_model.params.overhead["base_us"]
                                 + self.cost_model.scheduler_host.step_us)
        rate = getattr(w.skew, "drift_rate_per_s", 0.0)
        self.drift_window_s = DRIFT_STALE_FRAC / rate if rate > 0 else np.inf
        self.pooled = pooled and not self.skew.per_step   # a trace: popularity every forward
        self._pools: dict[tuple, _Pool] = {}     # (forward, phase, CUDA graph) -> its pool
        self._pick = np.random.Generator(np.random.SFC64([seed, 0xD4AF8]))   # a pool's row
        self.num_pools = self.num_forwards = 0      # pools drawn, forwards priced
        # the last pooled forward: (batch, MoE row, µs); a forward of the same batch object
        # served the same row costs the same (`step` is a function of the two)
        self._last: tuple | None = None

    def forward_us(self, batch: BatchCounts, t_s: float, rng: np.random.Generator,
                   pool: int | None = None) -> float:
        """One draft forward over `batch`, without the step's fixed overhead (the draft's
        forwards run inside the cycle that already pays it); `pool`: which of the cycle's
        forwards it is, its MoE layer from that forward's pool (class doc; None: drawn and
        priced alone)."""
        self.num_forwards += 1
        if pool is not None and self.pooled:
            moe = self._pooled_moe(batch, t_s, rng, pool)
            last = self._last
            if last is not None and last[0] is batch and last[1] is moe:
                return last[2]          # the cycle's draft decode forwards repeat one batch
            step = self.cost_model.step(batch, None, self.tables, moe=moe, record=False)
            us = step.step_us - self.overhead_base_us
            self._last = (batch, moe, us)
            return us
        loads = self.skew.loads(batch.routed_tokens, rng, t_s=t_s)
        step = self.cost_model.step(batch, loads, self.tables, record=False)
        return step.step_us - self.overhead_base_us

    def _pooled_moe(self, batch: BatchCounts, t_s: float, rng: np.random.Generator, which: int):
        """The `MoECost` of forward `which` of a cycle, over `batch` at `t_s`: a row of its pool,
        a new pool where that one has no use left, is past the drift window or drawn for
        another shape (M draws for twice what its last pool served, as
        `PoolStepper._new_pool`)."""
        cost_model = self.cost_model
        tokens = np.asarray(cost_model.ep_tokens(batch), dtype=np.float64)
        key = (which, batch.phase, cost_model.uses_graph(batch))
        pool = self._pools.get(key)
        if (pool is None or pool.used >= pool.max_uses or t_s - pool.t_s >= self.drift_window_s
                or not nearby(tokens, pool.total, pool.most)):
            lifetime = MAX_DRAWS * USES_PER_DRAW if pool is None else pool.used
            expected = max(1, min(MAX_DRAWS * USES_PER_DRAW, 2 * lifetime))
            num_draws = min(MAX_DRAWS, -(-expected // USES_PER_DRAW))
            _, rows = moe_draws(cost_model, self.skew, rng, self.tables, batch, num_draws, t_s)
            pool = self._pools[key] = _Pool(t_s, tokens, rows, num_draws * USES_PER_DRAW)
            self.num_pools += 1
        pool.used += 1
        if len(pool.rows) == 1:
            return pool.rows[0]
        return pool.rows[int(self._pick.integers(len(pool.rows)))]

    def cycle_us(self, requests: np.ndarray, context: np.ndarray, prefill: BatchCounts | None,
                 t_s: float, rng: np.random.Generator | None = None) -> float:
        """The draft forwards of one step: `requests` [dp] decoding requests per rank whose
        contexts sum to `context` [dp]; `prefill`: the step's prefill chunk, which the draft
        extends too (None: none); `rng`: the load draws' (None: the run's stream, from pools)."""
        # the cycle's forwards by pool (None: each its own draw): the draft decode forwards
        # (one batch), the extend, the prefill chunk's
        decode, extend_pool, prefill_pool = (0, 1, 2) if rng is None else (None, None, None)
        rng = self.rng if rng is None else rng
        total = 0.0
        if requests.any():
            per = np.where(requests > 0, context / np.maximum(requests, 1), 0.0)
            z = np.zeros_like(requests)
            tokens = requests * self.topk
            forward = BatchCounts(tokens, tokens * (per + 1), z, z, z, tokens, "decode")
            for _ in range(self.steps - 1):                     # draft decode forwards
                total += self.forward_us(forward, t_s, rng, decode)
            extend = requests * (self.steps + 1)                # draft extend after verify
            extend_us = self.forward_us(BatchCounts(extend, extend * (per + 1), z, z, z,
                                                    requests, "decode"), t_s, rng, extend_pool)
            # the cycle's host work that runs under the draft's graphs (scheduler_host)
            total += extend_us - float(self.cost_model.scheduler_host.hidden_us(
                total, extend_us, float(requests.max())))
        if prefill is not None and prefill.prefill_tokens.any():
            z = np.zeros_like(prefill.prefill_tokens)
            total += self.forward_us(BatchCounts(z, z, prefill.prefill_tokens,
                                                 prefill.prefill_context, prefill.prefill_pairs,
                                                 prefill.prefill_chunks, "prefill",
                                                 prefill.prefill_seqs), t_s, rng, prefill_pool)
        return total
