"""The SimPy engine: one process steps every DP rank in lockstep; time is microseconds.

Each step: admit arrivals and form batches (`Scheduler.plan`) -> sample the step's expert
loads at the current simulated time (`SkewModel.loads`) -> traffic over the current placement
and the `CostModel` -> `yield env.timeout(step_us)` -> apply the step (`Scheduler.commit`).
No SimPy event per request or token. The middle part is the engine's `stepper`
(`epsim.sim.stepper`): the `fast` engine draws and prices many steps of one batch shape at
once, the `reference` engine one step at a time.

Extension points, kept small:
  `sim.placement`          PlacementState the step reads; `update()` / `set_alive()` between steps.
  `sim.add_process(f)`     `f(sim)` returns a generator, run as a SimPy process from t=0.
  `sim.add_observer(f)`    `f(StepInfo)` after each step (expert loads for a statistics window).
  `sim.stall(us, label)`   stop-the-world: the next step starts `us` later.
  `sim.charge(us, label)`  adds `us` to the next step's time (e.g. one chunk of weight moves).

The scenario's own processes use them: with `deployment.enable_eplb` an `EPLBManager`
(`epsim.sim.eplb_process`), with `deployment.failures` an `ElasticEP` (`epsim.sim.elastic`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable, Generator

import numpy as np
import simpy
from tqdm import tqdm

from epsim.cost.model import CostModel
from epsim.cost.step import StepCost
from epsim.errors import SpecError
from epsim.eplb.placement import Placement
from epsim.default_profile import default_profile
from epsim.fast_init import fast_init
from epsim.profile import Profile, load_profile, profile_path
from epsim.routing.skew import SkewModel
from epsim.sim.arrivals import sample_requests
from epsim.sim.batching import Scheduler
from epsim.sim.clients import ClosedLoop
from epsim.sim.elastic import ElasticEP
from epsim.sim.eplb_process import EPLBManager
from epsim.sim.first_use import FirstUseTerms, first_use_compiles
from epsim.sim.first_use_alloc import PagedAllocCompiles
from epsim.sim.initial_placement import initial_placement
from epsim.sim.initial_requests import initial_requests
from epsim.sim.kv_pool import KVPool, longest_context
from epsim.sim.leap import Leaper
from epsim.sim.memory import memory_plan
from epsim.sim.metrics import MetricsRecorder, SimResult, sim_result
from epsim.sim.placement import PlacementState
from epsim.sim.prefill_pool import prefill_hold, reserve_tokens
from epsim.sim.rank_queues import routes_by_room
from epsim.sim.recv import forms_ahead
from epsim.sim.speculative import Acceptance, DraftPricer
from epsim.sim.steady import initial_running_per_rank
from epsim.sim.stepper import default_engine, make_stepper
from epsim.sim.tokenizer_queue import TokenizerQueue
from epsim.spec.scenario import Scenario


@fast_init
@dataclass(frozen=True, eq=False)
class StepInfo:
    """A finished step, as observers see it.

    Attributes:
        loads: [moe_layers, experts] token-expert pairs per logical expert.
        tokens_per_rank: [dp] tokens each DP rank ran.
    """

    index: int
    start_us: float
    end_us: float
    loads: np.ndarray
    tokens_per_rank: np.ndarray
    cost: StepCost
    placement_version: int


class Simulation:
    """One run of a scenario.

    Args:
        scenario: validated `Scenario`.
        profile: calibration profile (default: the scenario's `profile`, else the default
            profile of its GPU, `epsim.default_profile`).
        seed: overrides `scenario.seed`.
        progress: show a tqdm bar over simulated seconds.
        scenario_processes: run the scenario's EPLB manager and failures (False: only what
            `add_process` / `add_observer` add, e.g. to hold a hand-made placement fixed).
        engine: "fast" or "reference" (`epsim.sim.stepper`; None: `$EPSIM_ENGINE`, else fast).
        leap: the fast engine leaps over saturated decode steps (`epsim.sim.leap`; the same
            results; False: one step at a time, the yardstick its tests compare with).
        coarse_pools: the fast engine's pools of MoE draws serve nearby batch shapes too, and
            the speculative draft's forwards take theirs from pools (`epsim.sim.stepper`,
            `epsim.sim.speculative.DraftPricer`): steps priced at a batch up to 2 % off, for
            speed (the silicon scoreboard's hundreds of closed loops); False: each shape its
            own pool, each draft forward its own draw.
    Attributes:
        initial_running_per_rank: decode requests running per rank at t=0 (the scenario's,
            "steady" resolved).
        eplb: the `EPLBManager` (None without `enable_eplb` or scenario processes).
        elastic: the `ElasticEP` failure process (None without `failures`).
    """

    def __init__(self, scenario: Scenario, profile: Profile | None = None, seed: int | None = None,
                 progress: bool = False, scenario_processes: bool = True,
                 engine: str | None = None, leap: bool = True, coarse_pools: bool = False):
        self.stated = scenario              # as written; the run is one instance's share of it
        scenario = scenario.one_instance()
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.progress = progress
        m, c, d, w = scenario.model, scenario.cluster, scenario.deployment, scenario.workload
        if profile is None:       # the scenario's profile, else its GPU's default (`default_profile`)
            profile = load_profile(profile_path(scenario.profile, scenario.base_dir), shared=True) \
                if scenario.profile else default_profile(c.gpu)
        self.profile = profile
        self.env = simpy.Environment()
        self.cost_model = CostModel(m, c, d, self.profile)
        self.skew = SkewModel(w.skew, m.num_moe_layers, m.num_experts, m.top_k, seed=self.seed,
                              base_dir=scenario.base_dir)
        self.placement = PlacementState(Placement.on_cluster(
            initial_placement(scenario, self.skew),       # deployment.init_expert_location
            m.num_experts, d.ep_size, c.gpus_per_node_resolved), d.ep_dispatch_algorithm)
        self.requests = sample_requests(w, self.seed, scenario.base_dir)
        dp = scenario.dp_size
        max_running = d.max_running_requests
        self.memory = memory_plan(scenario)               # weights, the KV pool (`epsim.sim.memory`)
        if not self.memory.fits:
            raise SpecError(f"deployment ({scenario.name}) does not fit: {self.memory.reason}")
        # "steady" resolved: the steady-batch model's batch of this scenario (`epsim.sim.steady`)
        self.initial_running_per_rank = initial_running_per_rank(scenario, self.profile)
        initial, progress_done = initial_requests(         # `epsim.sim.initial_requests`
            w, d.num_reserved_decode_tokens, self.memory.max_total_num_tokens,
            self.initial_running_per_rank, dp, max_running, self.seed)
        closed = None
        if w.arrivals.kind == "concurrency":        # closed loop (`epsim.sim.clients`)
            closed = ClosedLoop(w, self.seed, 0 if initial is None else len(initial))
        elif len(self.requests) == 0 and initial is None:
            raise SpecError(f"workload ({scenario.name}) must bring at least one request: none arrives "
                            f"in duration_s ({w.duration_s:g}) and initial_running_per_rank is 0; "
                            f"raise the arrival rate or the duration")
        self.kv_pool = KVPool(self.memory.max_total_num_tokens, reserve_tokens(d), max_running,
                              longest_context(w, self.requests, initial), w.warmup_s,
                              colocated=d.disaggregation_mode == "null")
        self.prefill_hold = prefill_hold(scenario, self.memory.max_total_num_tokens, self.profile)
        # speculative decoding: tokens per verify step and the draft's forwards (`speculative`)
        self.acceptance = self.draft = None
        if d.speculative_algorithm is not None:
            self.acceptance = Acceptance(d.speculative_steps[0], d.speculative_accept_length,
                                         self.seed, w.prompt_kind)
            self.draft = DraftPricer(scenario, self.profile, self.seed, pooled=coarse_pools)
        # kernels compiled on first use inside the run (`epsim.sim.first_use`); the harness
        # warms up on the run's first prompt
        first_prompt, first_output = (
            (int(x[0]) for x in closed.lengths(0, 1)) if closed is not None else
            (self.requests.input_len[0], self.requests.output_len[0]) if len(self.requests) else
            (w.input_len.mean_tokens, w.output_len.mean_tokens))
        self.first_use = first_use_compiles(scenario, int(first_prompt), int(first_output))
        self.forms_ahead = forms_ahead(d)      # SGLang's overlap loop (`epsim.sim.recv`)
        self.scheduler = Scheduler(self.requests, dp, max_running, d.chunked_prefill_size,
                                   d.disaggregation_mode, d.enable_mixed_chunk, initial, progress_done,
                                   window_start_s=w.warmup_s, closed=closed, kv=self.kv_pool,
                                   spec=self.acceptance, draft_tokens=d.speculative_steps[2],
                                   recv_interval=d.scheduler_recv_interval or 1, retry=w.retry,
                                   rooms_seed=self.seed if routes_by_room(d, dp) else None,
                                   tokenizer=(None if d.server_tokenize == "off" else
                                              TokenizerQueue(d.server_tokenize == "serial")),
                                   max_prefill_tokens=d.max_prefill_tokens)
        self.end_us = w.duration_s * 1e6
        self.metrics = MetricsRecorder(m.num_moe_layers, d.ep_size, w.warmup_s * 1e6)
        # SFC64: a fast generator for the step loop's normal draws (seeded like the others)
        self.routing_rng = np.random.Generator(np.random.SFC64([self.seed, 0x70AD]))
        self.engine = default_engine() if engine is None else engine
        self.coarse_pools = coarse_pools            # read by the fast engine's stepper
        self.stepper = make_stepper(self.engine, self)
        self.leap = leap
        self.leaper: Leaper | None = None       # set as the run starts, where it applies
        self.step_index = 0
        self.last_step: StepInfo | None = None
        self._observers: list[Callable[[StepInfo], None]] = []
        self.wants_fresh_loads = False     # an observer sums loads over steps (EPLB statistics)
        self._processes: list[Callable[["Simulation"], Generator]] = []
        self._stall_us = 0.0
        self._stall_labels: list[str] = []
        self._charge_us = 0.0
        self.eplb = self.elastic = None
        if scenario_processes and d.enable_eplb:
            self.eplb = EPLBManager(self)
        if scenario_processes and d.failures:
            self.elastic = ElasticEP(self)

    @property
    def watched(self) -> bool:
        """Something reads the run step by step besides EPLB's statistics window (which takes
        leapt steps' loads at once, `EPLBManager.on_quiet_steps`): another observer, an added
        process or failures (the fast engine's leap then stays off, `epsim.sim.leap`)."""
        eplb = [self.eplb.on_step] if self.eplb is not None else []
        return bool(self._processes or self.elastic is not None or self._observers != eplb)

    @property
    def time_added(self) -> bool:
        """A stall or a charge waits for the next step."""
        return self._stall_us > 0 or self._charge_us > 0

    # -- extension hooks --------------------------------------------------------------------------
    def add_observer(self, observer: Callable[[StepInfo], None], fresh_loads: bool = False) -> None:
        """Call `observer(StepInfo)` after every step.

        Args:
            fresh_loads: the observer sums `info.loads` over many steps and needs them drawn
                independently per step (EPLB's statistics window); the fast engine then draws
                each step's loads afresh. A passive observer (a load trace for plots) leaves
                this False, so watching a run never changes its results.
        """
        self._observers.append(observer)
        self.wants_fresh_loads |= fresh_loads

    def add_process(self, factory: Callable[["Simulation"], Generator]) -> None:
        """Run `factory(self)` as a SimPy process from the start of `run()`."""
        self._processes.append(factory)

    def stall(self, us: float, label: str = "") -> None:
        """Stop the world: the next step starts `us` later (recorded as a stall)."""
        if us < 0:
            raise ValueError(f"stall us ({us}) must be >= 0")
        self._stall_us += us
        self._stall_labels.append(label)

    def charge(self, us: float, label: str = "") -> None:
        """Add `us` to the next step's time (shows as `extra_us` in the time series)."""
        if us < 0:
            raise ValueError(f"charge us ({us}) must be >= 0")
        self._charge_us += us
        self.metrics.record_charge(us, label)

    # -- the loop ------------------------------------------------------------------------------------
    def _step_loop(self) -> Generator:
        env, sched, placement = self.env, self.scheduler, self.placement
        leaper = self.leaper = Leaper(self) if self.leap and Leaper.applies(self) else None
        # the start of the step that just ended, where SGLang's overlap loop formed the next
        # batch (`epsim.sim.recv.forms_ahead`); None: no step in flight, the batch forms now
        in_flight_s = None
        while True:
            if self._stall_us > 0:
                stall, self._stall_us = self._stall_us, 0.0
                self.metrics.record_stall(env.now, stall, "+".join(filter(None, self._stall_labels)))
                self._stall_labels = []
                yield env.timeout(stall)
                in_flight_s = None         # host work between steps: the next batch forms after it
                continue
            if leaper is not None:
                leapt = leaper.leap(env.now)
                if leapt is not None:
                    for step_us in leapt.step_us:     # applied already; SimPy's clock follows
                        yield env.timeout(step_us)
                    self.step_index += len(leapt.step_us)
                    in_flight_s = leapt.last_start_us * 1e-6
                    self.last_step = StepInfo(self.step_index - 1, leapt.last_start_us,
                                              leapt.last_end_us, leapt.last_loads,
                                              leapt.last_tokens, leapt.last_cost,
                                              leapt.placement_version)
                    continue
            now_s = env.now * 1e-6
            alive = self.elastic.serving() if self.elastic is not None else \
                (None if placement.all_alive else placement.alive)
            plan = sched.plan(now_s, alive, in_flight_s if self.forms_ahead else None)
            num_tokens = plan.num_tokens
            if num_tokens <= 0 and in_flight_s is not None and self.forms_ahead:
                # the loop formed no batch behind the last step: once it ends, the idle loop
                # receives and forms one at once
                in_flight_s = None
                continue
            if num_tokens <= 0:
                # wait for the next arrival, even past the end (the run stops there first): a
                # run `extend`ed wakes where one of its new length would
                next_us = sched.next_arrival_s(now_s) * 1e6
                yield env.timeout(max(next_us - env.now, 1.0))
                continue
            loads, cost = self.stepper.price(plan.batch, now_s, self.step_index)
            version, num_alive = placement.version, placement.num_alive   # as the step saw them
            extra, self._charge_us = self._charge_us, 0.0
            if self.first_use is not None:
                compile_us = (self.first_use.stall_us(plan, sched.context, sched.slot_req)
                              if isinstance(self.first_use, (PagedAllocCompiles, FirstUseTerms))
                              else self.first_use.stall_us(plan.batch))
                if compile_us:
                    extra += compile_us
                    self.metrics.record_charge(compile_us, "first_use_compile")
            start = env.now
            in_flight_s = start * 1e-6
            batch = plan.batch
            if self.draft is None:
                yield env.timeout(cost.step_us + extra)
                gaps = sched.commit(plan, env.now * 1e-6)
                prefill_tokens = float(batch.prefill_tokens.sum())
                if self.prefill_hold is not None:     # the pool frees once the KV has gone
                    self.stall(self.prefill_hold.wait_us(float(batch.prefill_tokens.max())),
                               "prefill pool: KV transfer")
                self.metrics.record(
                    start, cost.step_us + extra, extra, cost,
                    output_tokens=float(batch.sampled_tokens.sum()),
                    num_running=int(sched.occupied.sum()), num_waiting=plan.num_waiting,
                    placement_version=version, prefill_tokens=prefill_tokens,
                    decode_tokens=num_tokens - prefill_tokens, num_alive=num_alive, gaps=gaps)
            else:
                yield from self._speculative_step(plan, cost, extra, start, version, num_alive)
            info = StepInfo(self.step_index, start, env.now, loads, batch.tokens, cost, version)
            self.last_step = info
            for observer in self._observers:
                observer(info)
            self.step_index += 1

    def _speculative_step(self, plan, cost: StepCost, extra: float, start: float, version: int,
                          num_alive: int) -> Generator:
        """One step with speculative decoding: the draft's forwards, then the target's (a
        verify step where requests decode), `epsim.sim.speculative`."""
        env, sched, batch = self.env, self.scheduler, plan.batch
        requests = plan.requests if plan.requests is not None else np.zeros(len(batch.tokens))
        context = plan.context if plan.context is not None else requests
        prefill = batch if batch.phase == "prefill" else None
        draft = self.draft.cycle_us(requests, context, prefill, env.now * 1e-6)
        yield env.timeout(cost.step_us + draft + extra)
        gaps = sched.commit(plan, env.now * 1e-6)
        prefill_tokens = float(batch.prefill_tokens.sum())
        # first tokens of prompts that finished prefill (rows sampled beyond the verify's), and
        # the tokens the verify gave its requests
        first = float(batch.sampled_tokens.sum()) - float(requests.sum()) * sched.draft_tokens
        emitted = sched.emitted_tokens if plan.requests is not None else 0.0
        self.metrics.record(
            start, cost.step_us + draft + extra, extra, cost, output_tokens=emitted + first,
            num_running=int(sched.occupied.sum()), num_waiting=plan.num_waiting,
            placement_version=version, prefill_tokens=prefill_tokens, decode_tokens=emitted,
            num_alive=num_alive, gaps=gaps, draft_us=draft)

    def _progress_loop(self, bar) -> Generator:
        tick_us = max(self.end_us / 200.0, 1e3)
        while True:
            yield self.env.timeout(tick_us)
            bar.update(tick_us * 1e-6)

    def run(self) -> SimResult:
        """Simulate `workload.duration_s` and return the recorded result."""
        d = self.scenario.deployment
        unhandled = [text for text, on in (
            ("deployment.enable_eplb is set but no EPLB process runs: the placement stays static",
             d.enable_eplb and self.eplb is None),
            ("deployment.failures is set but no failure process runs: every rank stays alive",
             bool(d.failures) and self.elastic is None)) if on]
        if unhandled and not self._processes and not self._observers:
            # scenario_processes=False and nothing added in their place
            warnings.warn("; ".join(unhandled), stacklevel=2)
        wall_start = time.perf_counter()
        self.env.process(self._step_loop())
        for factory in self._processes:
            self.env.process(factory(self))
        bar = None
        if self.progress:
            bar = tqdm(total=round(self.end_us * 1e-6, 3), unit="sim s", desc=self.scenario.name,
                       bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} sim s [{elapsed}<{remaining}]")
            self.env.process(self._progress_loop(bar))
        try:
            self.env.run(until=self.end_us)
        finally:
            if bar is not None:
                bar.n = bar.total
                bar.close()
        return sim_result(self, time.perf_counter() - wall_start)

    def extend(self, duration_s: float) -> SimResult:
        """Go on from where `run` (or the last `extend`) stopped to `duration_s` (s) and return
        the result of a run of that `workload.duration_s` from t=0, the same bits: nothing
        before a run's end depends on where it lies -- a closed loop's clients send as their
        requests finish, a leap stops before the end as stepping would (`epsim.sim.leap`: a
        leap gives the bits of stepping), an idle step loop waits for the next arrival, and a
        step in flight at the end commits as it would have (for a benchmark run that must be
        long enough for every request's first token, `epsim.validate.silicon.run`).

        Raises:
            ValueError: arrivals other than closed-loop clients (drawn up to the run's end at
                the start), or `duration_s` not after the run's end.
        """
        kind = self.stated.workload.arrivals.kind
        if kind != "concurrency":
            raise ValueError(f"workload.arrivals.kind ({kind!r}) must be 'concurrency' to extend "
                             f"a run: other arrivals are drawn up to its end when it starts")
        if not duration_s * 1e6 > self.end_us:
            raise ValueError(f"duration_s ({duration_s}) must be after the run's end "
                             f"({self.end_us * 1e-6})")
        self.stated, self.scenario = (
            sc.model_copy(update={"workload": sc.workload.model_copy(
                update={"duration_s": duration_s})}) for sc in (self.stated, self.scenario))
        self.end_us = duration_s * 1e6
        wall_start = time.perf_counter()
        self.env.run(until=self.end_us)
        return sim_result(self, time.perf_counter() - wall_start)


def simulate(scenario: Scenario, profile: Profile | None = None, seed: int | None = None,
             progress: bool = False, engine: str | None = None,
             coarse_pools: bool = False) -> SimResult:
    """Run a scenario once (see `Simulation` for hooks and `coarse_pools`; `engine`: "fast" |
    "reference")."""
    return Simulation(scenario, profile=profile, seed=seed, progress=progress, engine=engine,
                      coarse_pools=coarse_pools).run()
