"""Fleet sizing for prefill/decode disaggregation (`epsim plan --fleet`).

The question: for a workload (the scenario's arrival rate and input/output length
distributions) and an SLO (`ttft_ms.p99<=T`, `tpot_ms.p99<=P`), how many prefill and how many
decode instances, each pool of which EP size and backend (the `--sweep` values), with the
fewest GPUs. Two tiers, as `epsim plan --screen`:

1. Screen (`epsim.plan.screen`): every pool option is the base scenario with the swept values
   and `disaggregation_mode` prefill or decode. Its highest per-instance rate under the SLO
   (bisection on the steady state) gives the instances the pool needs, `ceil(rate / max)`:
   decode keeps TPOT <= `(1 - HEADROOM) * P` and keeps up; prefill keeps
   `TTFT_prefill + KV transfer + first decode step <= (1 - HEADROOM) * T` and keeps up. Each
   pool takes its option with the fewest GPUs (ties: more spare rate per GPU).
2. Verify: the chosen pools are simulated (prefill instance at `rate / n_prefill`, decode
   instance at `rate / n_decode`, its batch starting at the screen's steady size) and their
   simulated p99s checked: `tpot_ms.p99 <= P` and keep-up for decode, `ttft_ms.p99 (prefill) +
   KV transfer + ttft_ms.p99 (decode) <= T` for the request (conservative: the p99s add) and
   keep-up for prefill. A pool that misses grows by 10 % (at least one instance) and is
   simulated again (up to `MAX_ROUNDS`).

The KV-cache transfer (`epsim.cost.kv_transfer`) is priced per request from the model's KV
layout and tagged datasheet or measured. Results (pool options, fleet.json) and the
simulations (points.jsonl) go to the results directory; a rerun reuses finished simulations.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from epsim.cost.kv_transfer import kv_transfer
from epsim.errors import SpecError
from epsim.io.write import write_text
from epsim.plan.executors import check_executor
from epsim.plan.points import Point, build_point, load_base
from epsim.plan.runner import _axes, _run_missing
from epsim.plan.screen import max_rate
from epsim.sim.steady import SteadyStateModel, steady_start
from epsim.plan.select import parse_constraint
from epsim.plan.store import plan_dir, point_cache, prepare_dir, write_csv
from epsim.plan.sweep import expand
from epsim.default_profile import default_profile
from epsim.profile import load_profile
from epsim.spec.scenario import scenario_from_dict

HEADROOM = 0.1        # the screen's mean must clear the p99 bound by this share
MAX_ROUNDS = 6        # verification rounds (a failing pool grows by 10 %, at least one instance)
ROLES = ("prefill", "decode")


@dataclass
class PoolOption:
    """One screened pool configuration.

    Attributes:
        role: "prefill" | "decode".
        values: the swept values (`deployment.ep_size`, ...).
        ep_size: GPUs per instance.
        max_rate_per_s: highest per-instance rate meeting the SLO by the screen (0: none).
        instances: instances the workload needs at that rate.
        latency_ms: the screen's TTFT (prefill) or TPOT (decode) at `rate / instances`.
        step_ms: the screen's step time there (a decode pool's first token takes one step).
    """

    role: str
    values: dict
    ep_size: int
    max_rate_per_s: float
    instances: int
    latency_ms: float
    step_ms: float
    point: Any = field(default=None, repr=False)
    model: Any = field(default=None, repr=False)      # its SteadyStateModel

    @property
    def num_gpus(self) -> int:
        return self.instances * self.ep_size if self.instances else 0

    def describe(self) -> str:
        extra = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in self.values.items()
                          if k != "deployment.ep_size")
        return f"{self.instances} x EP {self.ep_size}" + (f" ({extra})" if extra else "")


def slo_bounds(constraints: list[str]) -> tuple[float, float]:
    """(TTFT p99 ms, TPOT p99 ms) from `--constraint` texts.

    Raises:
        SpecError: either bound missing, or another constraint given.
    """
    bounds = {}
    for text in constraints:
        c = parse_constraint(text, ["ttft_ms.p99", "tpot_ms.p99"])
        if c.op not in ("<=", "<"):
            raise SpecError(f"--constraint ({text!r}) must be an upper bound (<=) with --fleet")
        bounds[c.metric] = c.bound
    if set(bounds) != {"ttft_ms.p99", "tpot_ms.p99"}:
        raise SpecError("--fleet needs --constraint 'ttft_ms.p99<=MS' and --constraint "
                        "'tpot_ms.p99<=MS' (the SLO the fleet is sized for)")
    return bounds["ttft_ms.p99"], bounds["tpot_ms.p99"]


def _options(base, axes, role: str, profile_path: str | None) -> list[Point]:
    points = []
    for i, values in enumerate(expand(axes)):
        built = build_point(base, i, {**values, "deployment.disaggregation_mode": role}, profile_path)
        if isinstance(built, Point):
            points.append(built)
    return points


def _screen_option(point: Point, role: str, rate: float, ttft_budget_ms: float,
                   tpot_ms: float, profile) -> PoolOption:
    """The option's highest rate under its SLO share, and the instances `rate` needs."""
    model = SteadyStateModel(point.scenario, profile)
    if role == "decode":
        ok = lambda s: s.keep_up and s.tpot_s * 1e3 <= (1 - HEADROOM) * tpot_ms     # noqa: E731
    else:
        ok = lambda s: s.keep_up and s.ttft_s * 1e3 <= (1 - HEADROOM) * ttft_budget_ms  # noqa: E731
    capacity = model.steady(1e9).served_rps          # saturated: what one instance can serve
    best, _ = max_rate(model, ok, capacity * 1.05)
    values = {k: v for k, v in point.values.items() if k != "deployment.disaggregation_mode"}
    ep = point.scenario.deployment.num_gpus          # GPUs per instance (tp_size)
    if best <= 0:
        return PoolOption(role, values, ep, 0.0, 0, math.inf, math.inf, point, model)
    instances = math.ceil(rate / best - 1e-9)
    at = model.steady(rate / instances)
    latency = (at.tpot_s if role == "decode" else at.ttft_s) * 1e3
    return PoolOption(role, values, ep, best, instances, latency, at.step_s * 1e3, point, model)


def _cheapest(options: list[PoolOption]) -> PoolOption | None:
    usable = [o for o in options if o.instances > 0]
    if not usable:
        return None
    return min(usable, key=lambda o: (o.num_gpus, -o.max_rate_per_s / o.ep_size))


@dataclass
class Fleet:
    """A fleet-sizing answer (see module doc)."""

    rate_per_s: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    prefill: PoolOption | None
    decode: PoolOption | None
    kv: Any
    options: list[PoolOption]
    verified: dict = field(default_factory=dict)   # role -> simulated metrics of the last round
    rounds: int = 0
    meets_slo: bool | None = None                  # by the simulation (None: not verified)
    request_ttft_p99_ms: float = math.nan          # prefill p99 + KV transfer + decode p99

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in (self.prefill, self.decode) if p is not None)

    def as_dict(self) -> dict:
        pool = lambda p: None if p is None else {          # noqa: E731
            "values": p.values, "ep_size": p.ep_size, "instances": p.instances,
            "num_gpus": p.num_gpus, "screen_max_rate_per_s": p.max_rate_per_s,
            "screen_latency_ms": p.latency_ms, "screen_step_ms": p.step_ms}
        return {"rate_per_s": self.rate_per_s,
                "slo": {"ttft_ms.p99": self.ttft_p99_ms, "tpot_ms.p99": self.tpot_p99_ms},
                "prefill": pool(self.prefill), "decode": pool(self.decode),
                "num_gpus": self.num_gpus, "kv_transfer": {**asdict(self.kv),
                                                           "transfer_us": self.kv.transfer_us},
                "verified": self.verified, "rounds": self.rounds, "meets_slo": self.meets_slo,
                "request_ttft_p99_ms": self.request_ttft_p99_ms}


def _verify_point(base, option: PoolOption, rate: float, steady_running: float,
                  profile_path: str | None) -> Point:
    values = {**option.values, "deployment.disaggregation_mode": option.role,
              "workload.arrivals.rate_per_s": rate / option.instances}
    if option.role == "decode":     # start at the steady batch the screen predicts
        values["workload.initial_running_per_rank"] = steady_start(
            steady_running, option.point.scenario.deployment.max_running_requests)
    built = build_point(base, 0, values, profile_path)
    if not isinstance(built, Point):
        raise SpecError(f"fleet {option.role} pool {option.describe()}: {built.reason}")
    return built


def size_fleet(scenario: str | Path | dict, sweeps: list[str], constraints: list[str], *,
               kv_path: str = "mooncake", verify: bool = True, executor: str = "local",
               workers: int | None = None, ray_address: str | None = None,
               out: str | Path | None = None, overrides: list[str] | None = None,
               profile: str | Path | None = None, progress: bool = False) -> Fleet:
    """Size prefill and decode pools for the scenario's workload under the SLO.

    Args:
        sweeps: pool options, `deployment.*` keys (`deployment.ep_size=8,16,32`, backend, ...);
            both pools choose from the same options.
        constraints: `ttft_ms.p99<=MS` and `tpot_ms.p99<=MS`.
        kv_path: "mooncake" | "nccl" (`epsim.cost.kv_transfer`).
        verify: simulate the chosen pools (tier 2); False: the screen's answer only.
    Raises:
        SpecError: bad SLO, a sweep key outside `deployment.*`, arrivals without a rate, or no
            option meeting the SLO in a pool.
    """
    check_executor(executor, workers)
    ttft_ms, tpot_ms = slo_bounds(constraints)
    axes = _axes(sweeps)
    bad = [a.key for a in axes if not a.key.startswith("deployment.")]
    if bad:
        raise SpecError(f"--sweep key ({bad[0]}) must be a deployment.* key with --fleet (the "
                        "workload is the scenario's)")
    base = load_base(scenario, overrides)
    sc = scenario_from_dict(base.data, where=base.where, base_dir=base.base_dir)
    if not hasattr(sc.workload.arrivals, "rate_per_s"):
        raise SpecError(f"workload.arrivals.kind ({sc.workload.arrivals.kind!r}) must have a "
                        "rate (poisson or bursty) with --fleet")
    rate = sc.workload.arrivals.rate_per_s
    profile_path = str(Path(profile).resolve()) if profile is not None else None
    prof = load_profile(profile_path) if profile_path else default_profile(sc.cluster.gpu)
    probe = SteadyStateModel(sc, prof)
    kv = kv_transfer(sc.model, sc.cluster, kv_path, probe.input_len, prof)

    decode_opts = [_screen_option(p, "decode", rate, math.inf, tpot_ms, prof)
                   for p in _options(base, axes, "decode", profile_path)]
    decode = _cheapest(decode_opts)
    if decode is None:
        raise SpecError(f"no decode option keeps TPOT under {tpot_ms:g} ms at any rate "
                        f"({len(decode_opts)} option(s) screened)")
    # the request's TTFT: prefill, then the KV transfer, then the decode pool's first step
    budget = ttft_ms - kv.transfer_us * 1e-3 - decode.step_ms
    prefill_opts = [_screen_option(p, "prefill", rate, budget, tpot_ms, prof)
                    for p in _options(base, axes, "prefill", profile_path)]
    prefill = _cheapest([o for o in prefill_opts
                         if o.instances and kv.link_utilization(rate / o.instances, o.ep_size) < 1])
    if prefill is None:
        raise SpecError(f"no prefill option keeps TTFT under {ttft_ms:g} ms with the KV transfer "
                        f"({kv.transfer_us * 1e-3:.1f} ms) and a decode step ({decode.step_ms:.1f} "
                        f"ms) ({len(prefill_opts)} option(s) screened)")
    fleet = Fleet(rate, ttft_ms, tpot_ms, prefill, decode, kv, decode_opts + prefill_opts)
    out_dir = prepare_dir(out)
    with plan_dir(out_dir, "plan --fleet") as rundir:
        if verify:
            _verify(fleet, base, rate, profile_path, out_dir, executor, workers, ray_address,
                    progress, _run_missing, point_cache)
        if rundir is not None:
            rundir.begin()
            rundir.finish(_write(fleet, out_dir))
    return fleet


def _verify(fleet: Fleet, base, rate, profile_path, out_dir, executor, workers, ray_address,
            progress, run_missing, cache_cls) -> None:
    """Tier 2: simulate both pools; add an instance to a pool that misses (module doc)."""
    for fleet.rounds in range(1, MAX_ROUNDS + 1):
        pools = {"prefill": fleet.prefill, "decode": fleet.decode}
        points = {}
        for role, option in pools.items():
            running = option.model.steady(rate / option.instances).running_per_rank
            points[role] = _verify_point(base, option, rate, running, profile_path)
        results, _ = run_missing(list(points.values()), cache_cls(out_dir), executor, workers,
                                 ray_address, progress)
        metrics = {role: results[p.key].get("metrics") or {} for role, p in points.items()}
        fleet.verified = {role: {k: metrics[role].get(k) for k in (
            "ttft_ms.p99", "tpot_ms.p99", "tpot_ms.mean", "keep_up.ok", "step_ms.mean",
            "throughput_tokens_per_s_per_gpu", "provenance.measured_share",
            "provenance.extrapolated_share", "provenance.datasheet_share")} for role in pools}
        d, p = metrics["decode"], metrics["prefill"]
        fleet.request_ttft_p99_ms = (p.get("ttft_ms.p99", math.nan) + fleet.kv.transfer_us * 1e-3
                                     + d.get("ttft_ms.p99", math.nan))
        decode_ok = d.get("keep_up.ok") == 1.0 and d.get("tpot_ms.p99", math.inf) <= fleet.tpot_p99_ms
        prefill_ok = (p.get("keep_up.ok") == 1.0
                      and fleet.request_ttft_p99_ms <= fleet.ttft_p99_ms)
        fleet.meets_slo = decode_ok and prefill_ok
        if fleet.meets_slo:
            return
        for ok, pool in ((decode_ok, fleet.decode), (prefill_ok, fleet.prefill)):
            if not ok:
                pool.instances += max(1, round(0.1 * pool.instances))


def _write(fleet: Fleet, out: Path) -> list[Path]:
    """pools.csv and fleet.json (atomically); returns their paths."""
    rows = [{"role": o.role, **{k: str(v) for k, v in o.values.items()}, "ep_size": o.ep_size,
             "screen_max_rate_per_s": o.max_rate_per_s, "instances": o.instances,
             "num_gpus": o.num_gpus, "screen_latency_ms": o.latency_ms} for o in fleet.options]
    columns = list(dict.fromkeys(k for row in rows for k in row))
    return [write_csv(rows, columns, out / "pools.csv"),
            write_text(out / "fleet.json", json.dumps(fleet.as_dict(), indent=1, default=str) + "\n")]
