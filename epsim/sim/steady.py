"""The steady-batch model: a configuration's steady state from the cost model alone, no event loop.

A closed-form model of the engine (`epsim.sim.engine`): the same `CostModel` the simulator uses
prices a decode step and a prefill chunk at the *expected* batch (every rank alike: `B` running
requests of mean context `E[I] + E[O^2] / (2 E[O])`, the context a running request holds
averaged over its time in the batch; a chunk of `chunked_prefill_size` prompt tokens per rank,
each rank's from its own prompt drawn token-weighted; moments from `LENGTH_SAMPLES` draws of the
length specs), averaged over `NUM_DRAWS` draws of the expert loads from the skew model at t=0
(with EPLB, over the placement EPLB settles on for that popularity). Little's law closes the
loop — a rank with arrival rate `lam` (requests/s) and `O` output tokens per request holds
`B = lam * O * TPOT` requests. Prices are kept per whole request (or prompt token), so the
steady batch is the least whole number `b` with `lam * O * t(b) <= b`, found by bisection
(`least_fixed_point`: log2 of the batch limit prices, converged whatever the slope; iterating
`B <- lam * O * t(B)` from the limit converges slowly where that slope is near 1, the load a
rank can just carry):

  decode instance  TPOT = t_decode(B); TTFT = one decode step.
  prefill instance a step runs the prompt tokens that arrived during the previous one (at
                   least one prompt, at most a chunk): P = min(chunk, max(I, lam * I *
                   t_prefill(P))); TTFT = the wait for the running step, then ceil(I / chunk)
                   steps.
  speculative      a decode step is a verify cycle (`epsim.sim.speculative`): t_decode is its
                   time (verify step + draft forwards) over the accept length, per token.
  colocated        prefill steps pause decoding (SGLang without mixed chunks): n_p prefill
                   steps per second take a share n_p * t_prefill of the time, so
                   TPOT = t_decode / (1 - n_p * t_prefill).

A closed loop (`concurrency` arrivals, `epsim.sim.clients`) fixes the batch instead of the rate:
`B = clients / dp` per rank (at most `max_running_requests`; the rest wait), and the rate is what
the clients send, `lam = B / (think + TTFT + (O - 1) * TPOT)` per rank, found with the same step
prices (a colocated instance iterates, its prefill share depending on the rate).

The batch limit is `max_running_requests`, or fewer where the KV pool holds fewer requests of
the decode context with their reserves (`epsim.sim.memory.kv_running_limit`).

A rank that cannot keep up (B above the batch limit, or the prefill share reaching 1)
has `keep_up` False: TTFT is then infinite and throughput the saturated rate. What the model
leaves out, and the simulation has: queueing variance, per-request length spread, drift in
time, EPLB rebalance costs, stalls.

Two users: a run that starts at its steady batch (`workload.initial_running_per_rank:
steady`, `initial_running_per_rank`), and the planner's analytic screen (`epsim.plan.screen`,
tier 1 of `epsim plan --screen`), which reports these states as metrics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from pydantic import TypeAdapter

from epsim.cost.attention import BatchCounts
from epsim.cost.model import CostModel
from epsim.cost.tables import build_tables, contiguous_placement
from epsim.eplb import compute_placement
from epsim.eplb.placement import Placement
from epsim.errors import SpecError
from epsim.default_profile import default_profile
from epsim.profile import load_profile, profile_path
from epsim.routing.skew import SkewModel
from epsim.sim.arrivals import sample_lengths
from epsim.sim.memory import kv_running_limit, memory_plan
from epsim.sim.speculative import Acceptance, DraftPricer, verify_counts
from epsim.sim.stepper import moe_draws
from epsim.spec.workload import STEADY, LengthSpec

NUM_DRAWS = 2              # load draws averaged per priced step
LENGTH_SAMPLES = 20_000    # draws of the length specs for their moments
COLOCATED_MAX_ITERATIONS = 64   # until the whole-request batch repeats


@lru_cache(maxsize=64)
def _length_samples(input_spec: str, output_spec: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`LENGTH_SAMPLES` input and output lengths (float64) of two length specs (as JSON, so a
    sweep's points share one draw)."""
    adapter = TypeAdapter(LengthSpec)
    rng = np.random.default_rng([seed, 0x1E6])
    return tuple(sample_lengths(adapter.validate_json(spec), LENGTH_SAMPLES, rng).astype(np.float64)
                 for spec in (input_spec, output_spec))


@dataclass(frozen=True)
class Steady:
    """A rank's steady state (times in seconds)."""

    tpot_s: float
    ttft_s: float
    step_s: float
    running_per_rank: float
    served_rps: float
    tokens_per_s: float
    output_per_s: float
    keep_up: bool


class SteadyStateModel:
    """Prices expected batches of one scenario (see module doc).

    Args:
        scenario: a validated `Scenario`.
        profile: calibration profile (None: the shipped one).
    Raises:
        SpecError: arrivals without a mean rate (a trace) or lengths without a mean.
    """

    def __init__(self, scenario, profile=None, seed: int = 0):
        self.scenario = scenario
        m, c, d, w = scenario.model, scenario.cluster, scenario.deployment, scenario.workload
        closed = w.arrivals.kind == "concurrency"
        if not (hasattr(w.arrivals, "rate_per_s") or closed):
            raise SpecError(f"workload.arrivals.kind ({w.arrivals.kind!r}) must have a mean "
                            "rate (poisson or bursty) or clients (concurrency) for the screen")
        self.dp = scenario.dp_size
        inputs, outputs = _length_samples(w.input_len.model_dump_json(),
                                          w.output_len.model_dump_json(), scenario.seed)
        self.input_len, self.output_len = float(inputs.mean()), float(outputs.mean())
        self.decode_context = self.input_len + float((outputs ** 2).mean()) / (2 * self.output_len)
        # one prompt per rank, drawn with probability proportional to its tokens, and where in
        # it the rank's chunk lies (uniform)
        rng = np.random.default_rng([scenario.seed, 0x1E7])
        pick = rng.choice(LENGTH_SAMPLES, self.dp, p=inputs / inputs.sum())
        self._rank_prompts = (inputs[pick], rng.random(self.dp))
        self.set_arrivals(w.arrivals)
        self.max_running = self.batch_limit(scenario)
        if profile is None:       # the scenario's profile, else its GPU's default (`default_profile`)
            profile = load_profile(profile_path(scenario.profile, scenario.base_dir)) \
                if scenario.profile else default_profile(c.gpu)
        self.cost_model = CostModel(m, c, d, profile)
        self.skew = SkewModel(w.skew, m.num_moe_layers, m.num_experts, m.top_k, seed=scenario.seed,
                              base_dir=scenario.base_dir)
        self.seed = scenario.seed
        p2l = contiguous_placement(m.num_moe_layers, m.num_experts, d.ep_size,
                                   d.ep_num_redundant_experts)
        placement = Placement.on_cluster(p2l, m.num_experts, d.ep_size, c.gpus_per_node_resolved)
        if d.enable_eplb:          # the placement EPLB settles on for the t=0 popularity
            placement = compute_placement(d.eplb_algorithm, self.skew.popularity(0.0) * 1e6,
                                          placement.num_physical, m.num_expert_groups,
                                          placement.num_nodes, d.ep_size)
        self.tables = build_tables(placement, d.ep_dispatch_algorithm)
        self._cache: dict[tuple, float] = {}
        self.draft = None                    # speculative decoding: the draft's forwards
        if d.speculative_algorithm is not None:
            self.draft = DraftPricer(scenario, profile, scenario.seed)
            self.accept_length = Acceptance(d.speculative_steps[0], d.speculative_accept_length,
                                            scenario.seed, scenario.workload.prompt_kind).mean

    def batch_limit(self, scenario) -> int:
        """Requests a rank runs at most: `max_running_requests`, or what its KV pool holds at
        the decode context (at least one)."""
        d = scenario.deployment
        plan = memory_plan(scenario)
        kv = kv_running_limit(plan.max_total_num_tokens, self.decode_context,
                              d.num_reserved_decode_tokens)
        return max(1, min(d.max_running_requests, kv))

    def set_arrivals(self, arrivals) -> None:
        """The arrivals to find the steady state of: a rate, or a closed loop's clients per rank
        (whose rate follows from them, `_closed`)."""
        closed = arrivals.kind == "concurrency"
        self.clients_per_rank = arrivals.clients / self.dp if closed else None
        # a per-token wait (a P/D prefill's clients) at the mean output length
        self.think_s = (arrivals.think_time_s + arrivals.think_per_output_token_s
                        * max(self.output_len - 1.0, 0.0)) if closed else 0.0
        self.rate_per_rank = 0.0 if closed else getattr(arrivals, "rate_per_s", 0.0) / self.dp

    def step_s(self, batch: BatchCounts, key: tuple[int, int]) -> float:
        """Mean time of a step running `batch` over `NUM_DRAWS` load draws (seconds), drawn
        from a generator seeded by the scenario's seed and `key` (kind, size): a price depends
        on its batch alone, not on which prices were asked for before (so the executors agree)."""
        rng = np.random.Generator(np.random.SFC64([self.seed, 0x5C2E, *key]))
        _, rows = moe_draws(self.cost_model, self.skew, rng, self.tables, batch, NUM_DRAWS)
        return float(np.mean([self.cost_model.step(batch, None, self.tables, moe=moe).step_us
                              for moe in rows])) * 1e-6

    def decode_s(self, running: float) -> float:
        """A decode step with `running` requests on every rank (rounded up to whole ones); with
        speculative decoding, a token's share of a verify cycle (its verify step and the draft's
        forwards over the accept length, `epsim.sim.speculative`)."""
        b = max(1, math.ceil(running - 1e-9))
        key = ("decode", b)
        if key not in self._cache:
            batch = BatchCounts.uniform_decode(self.dp, b, self.decode_context)
            if self.draft is None:
                self._cache[key] = self.step_s(batch, (0, b))
            else:
                verify = self.step_s(verify_counts(batch, self.draft.draft_tokens), (0, b))
                rng = np.random.Generator(np.random.SFC64([self.seed, 0xD4AF7, b]))
                draft = self.draft.cycle_us(batch.decode_tokens, batch.decode_context, None, 0.0,
                                            rng) * 1e-6
                self._cache[key] = (verify + draft) / self.accept_length
        return self._cache[key]

    def prefill_s(self, tokens: float) -> float:
        """A prefill step of `tokens` prompt tokens per rank. Each rank's chunk comes from its
        own prompt (drawn token-weighted from the input lengths, at a uniformly drawn chunk of
        it), since the slowest rank's attention sets the pace of the step."""
        p = max(1, math.ceil(tokens - 1e-9))
        key = ("prefill", p)
        if key not in self._cache:
            prompt, u = self._rank_prompts                     # [dp] each
            num_chunks = np.ceil(prompt / p)
            prefix = np.where(prompt > p, np.floor(u * num_chunks) * p, 0.0)
            prefix = np.minimum(prefix, np.maximum(prompt - p, 0.0))
            full = np.full(self.dp, float(p))
            # a chunk of one long prompt, or whole short prompts of about the drawn length
            pairs = np.where(prompt > p, full * prefix + full * (full + 1.0) / 2.0,
                             full * (prompt + 1.0) / 2.0)
            sampled = np.where(prompt > p, 1.0 / num_chunks, full / prompt)
            z = np.zeros(self.dp)
            chunks = np.where(prompt > p, 1.0, full / prompt)      # prefill chunks per rank
            self._cache[key] = self.step_s(BatchCounts(z, z, full, prefix + full, pairs, sampled,
                                                       "prefill", chunks), (1, p))
        return self._cache[key]

    # -- the three instance kinds ---------------------------------------------------------
    def steady(self, rate_per_s: float | None = None) -> Steady:
        """The steady state at the scenario's arrival rate, or at `rate_per_s` (requests per
        second, whole instance; step prices are kept across rates)."""
        mode = self.scenario.deployment.disaggregation_mode
        if self.clients_per_rank is not None:
            return self._closed(mode)
        if rate_per_s is not None:
            self.rate_per_rank = rate_per_s / self.dp
        if mode == "decode":
            return self._decode()
        if mode == "prefill":
            return self._prefill()
        return self._colocated()

    def _decode(self) -> Steady:
        lam, out, cap = self.rate_per_rank, self.output_len, self.max_running
        needed = lambda b: lam * out * self.decode_s(b)         # noqa: E731  Little's law
        running = float(cap)
        t = self.decode_s(running)
        keep_up = needed(cap) < cap
        if keep_up:
            b = least_fixed_point(needed, 1, cap)
            running, t = max(1.0, needed(b)), self.decode_s(b)
        served = min(lam, running / (out * t))
        return Steady(t, t if keep_up else math.inf, t, running, served * self.dp,
                      served * out * self.dp, served * out * self.dp, keep_up)

    def _prefill(self) -> Steady:
        chunk, lam, i = self.scenario.deployment.chunked_prefill_size, self.rate_per_rank, self.input_len
        # a step's prompt tokens: those that arrived during the last step, at least one whole
        # prompt (the busiest rank sets the pace), at most a chunk
        needed = lambda n: min(chunk, max(i, lam * i * self.prefill_s(n)))   # noqa: E731
        p = float(chunk)
        t = self.prefill_s(p)
        keep_up = lam * i * t < chunk
        if keep_up:
            n = least_fixed_point(needed, min(chunk, max(1, math.ceil(i - 1e-9))), chunk)
            p, t = needed(n), self.prefill_s(n)
        served = min(lam, p / (i * t))
        ttft = 0.5 * t + math.ceil(i / chunk) * t if keep_up else math.inf
        return Steady(ttft, ttft, t, p / i, served * self.dp, served * i * self.dp,
                      served * self.dp, keep_up)

    def _colocated(self) -> Steady:
        d, lam, i, out = self.scenario.deployment, self.rate_per_rank, self.input_len, self.output_len
        cap, chunk = self.max_running, d.chunked_prefill_size
        running, t_d = float(cap), self.decode_s(cap)
        p, t_p = float(chunk), self.prefill_s(chunk)
        last_chunk = -1
        keep_up = True
        # both the batch and the prefill chunk settle together, so this one iterates, from the
        # batch limit down, until the whole-request batch and whole-token chunk repeat
        for _ in range(COLOCATED_MAX_ITERATIONS):
            # prefill steps per second: one per request's chunk when arrivals are sparse, at
            # most one per decode step when dense (the arrivals since the last one, batched)
            n_p = min(lam * math.ceil(i / chunk), 1.0 / (t_d + t_p))
            p = min(chunk, max(i, lam * i / n_p))
            t_p = self.prefill_s(p)
            busy = n_p * t_p
            if busy >= 1.0 or lam * i > chunk / t_p:
                keep_up = False
                break
            tpot = t_d / (1.0 - busy)
            new_running = lam * out * tpot
            if new_running >= cap:
                keep_up = False
                break
            repeated = (math.ceil(max(1.0, new_running) - 1e-9) == math.ceil(running - 1e-9)
                        and math.ceil(p - 1e-9) == last_chunk)
            running, last_chunk = max(1.0, new_running), math.ceil(p - 1e-9)
            t_d = self.decode_s(running)
            if repeated:
                break
        if not keep_up:
            running, t_d = float(cap), self.decode_s(cap)
            t_p = self.prefill_s(chunk)
            # saturated: the served rate that fills the batch, prefill share at that rate
            served = cap / (out * t_d + cap * i * t_p / chunk) if chunk else 0.0
            busy = min(0.99, served * i / chunk * t_p)
            tpot = t_d / (1.0 - busy)
            return Steady(tpot, math.inf, t_d, running, served * self.dp,
                          served * (i + out) * self.dp, served * out * self.dp, False)
        ttft = 0.5 * t_d + math.ceil(i / chunk) * t_p + (math.ceil(i / chunk) - 1) * t_d
        return Steady(t_d / (1.0 - n_p * t_p), ttft, t_d, running, lam * self.dp,
                      lam * (i + out) * self.dp, lam * out * self.dp, True)

    def _closed(self, mode: str) -> Steady:
        """A closed loop's steady state (module doc): the clients' rate at their batch."""
        cap, out, i = self.max_running, self.output_len, self.input_len
        running = float(min(self.clients_per_rank, cap))
        if mode == "prefill":       # each client's request ends with its first token
            t = self.prefill_s(min(self.scenario.deployment.chunked_prefill_size, running * i))
            cycle = self.think_s + t
            lam = running / cycle
            return Steady(t, t, t, running, lam * self.dp, lam * i * self.dp, lam * self.dp, True)
        t_d = self.decode_s(running)
        # a decode instance makes a request's every token, its first ending its first step
        lam = running / (self.think_s + t_d * out)
        if mode == "decode":
            return Steady(t_d, t_d, t_d, running, lam * self.dp, lam * out * self.dp,
                          lam * out * self.dp, True)
        steady = None
        for _ in range(COLOCATED_MAX_ITERATIONS):       # the rate sets the prefill share
            self.rate_per_rank = lam
            steady = self._colocated_at(running, t_d)
            new = running / (self.think_s + steady.ttft_s + (out - 1) * steady.tpot_s)
            if abs(new - lam) <= 1e-6 * lam:
                break
            lam = new
        return steady

    def _colocated_at(self, running: float, t_d: float) -> Steady:
        """A colocated rank's TPOT and TTFT at `running` requests and the rate `rate_per_rank`."""
        chunk, lam, i = self.scenario.deployment.chunked_prefill_size, self.rate_per_rank, self.input_len
        n_p = min(lam * math.ceil(i / chunk), 1.0 / (t_d + self.prefill_s(chunk)))
        p = min(chunk, max(i, lam * i / n_p))
        t_p = self.prefill_s(p)
        busy = min(0.99, n_p * t_p)
        ttft = 0.5 * t_d + math.ceil(i / chunk) * t_p + (math.ceil(i / chunk) - 1) * t_d
        out = self.output_len
        return Steady(t_d / (1.0 - busy), ttft, t_d, running, lam * self.dp,
                      lam * (i + out) * self.dp, lam * out * self.dp, True)


def least_fixed_point(needed, low: int, high: int) -> int:
    """The least whole number `n` in [low, high] with `needed(n) <= n`, given `needed(high) <= high`.

    `needed` is nondecreasing (a larger batch takes longer, so it needs more requests in flight),
    so `needed(n) - n` falls through zero once: bisection finds the crossing in
    `log2(high - low)` calls."""
    if needed(low) <= low:
        return low
    while high - low > 1:                    # needed(low) > low, needed(high) <= high
        mid = (low + high) // 2
        if needed(mid) <= mid:
            high = mid
        else:
            low = mid
    return high


_MODELS: dict[str, SteadyStateModel] = {}
_MAX_MODELS = 256
# fields that change no step price: a sweep's points that differ only in them share one model
_NOT_PRICED = {"name": True, "description": True, "base_dir": True,
               "workload": {"arrivals", "duration_s", "warmup_s"},
               "deployment": {"max_running_requests", "scheduler_recv_interval"}}


def steady_model(scenario, profile=None) -> SteadyStateModel:
    """A `SteadyStateModel` for `scenario`, shared with earlier scenarios of this process that
    differ only in arrivals and `max_running_requests` (their step prices are the same)."""
    key = json.dumps([scenario.model_dump(mode="json", exclude=_NOT_PRICED),
                      id(profile) if profile is not None else None], sort_keys=True)
    model = _MODELS.get(key)
    if model is None:
        if len(_MODELS) >= _MAX_MODELS:
            _MODELS.clear()
        model = _MODELS[key] = SteadyStateModel(scenario, profile)
    model.scenario = scenario
    model.max_running = model.batch_limit(scenario)
    model.set_arrivals(scenario.workload.arrivals)
    return model


def steady_state(scenario, profile=None) -> Steady:
    """The steady state of one scenario at its own arrival rate (`steady_model`'s).

    Raises:
        SpecError: see `SteadyStateModel`.
    """
    scenario = scenario.one_instance()          # one instance's share of the workload
    arrivals = scenario.workload.arrivals
    if not hasattr(arrivals, "rate_per_s"):
        if arrivals.kind != "concurrency":
            SteadyStateModel(scenario, profile)              # raises the arrivals error
        return steady_model(scenario, profile).steady()
    return steady_model(scenario, profile).steady(arrivals.rate_per_s)


def steady_start(running_per_rank: float, max_running: int) -> int:
    """Requests per rank to start a decode run with: a steady batch, whole, within
    [1, max_running] (`workload.initial_running_per_rank: steady`, `epsim plan --warm-start`,
    the fleet's verification)."""
    return int(min(max_running, max(1, round(running_per_rank))))


def initial_running_per_rank(scenario, profile=None) -> int:
    """Decode requests per rank a run of `scenario` starts with: its
    `workload.initial_running_per_rank`, "steady" resolved (`steady_running_per_rank`, with
    `profile`: None, the shipped one). The engine and the plan's columns both ask here."""
    per_rank = scenario.workload.initial_running_per_rank
    return steady_running_per_rank(scenario, profile) if per_rank == STEADY else per_rank


def steady_running_per_rank(scenario, profile=None) -> int:
    """`steady_start` of the scenario's own steady batch (`steady_state`'s running requests per
    rank; a full batch where the instance cannot keep up): what `initial_running_per_rank:
    steady` starts a run with, resolved per run, so every point of a sweep and every rate of a
    `--max-rate` bisection starts at its own."""
    running = steady_state(scenario, profile).running_per_rank
    max_running = steady_model(scenario.one_instance(), profile).max_running
    return steady_start(running, max_running) if np.isfinite(running) else max_running
