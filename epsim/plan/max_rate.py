"""`epsim plan --max-rate`: for each deployment, the highest request rate that meets the SLO.

What capacity planners ask first. Per deployment point of the sweep, a bisection on
`workload.arrivals.rate_per_s` with the simulator: start at the scenario's rate, double (or
halve) until one rate meets the constraints and keep-up and another does not, then bisect
until the bracket is within `rel_tol` of its lower end. Every round runs all deployments'
next rates together on the plan's executor, and every run lands in the results directory's
cache, so a rerun resumes. Feasibility is the plan's (`epsim.plan.select.rejection`): keep-up
(`epsim.report.keep_up`) and every constraint. It assumes feasibility falls with the rate; a
point that meets the SLO only at some rates above a failing one is not searched for.

A closed-loop scenario (`concurrency` arrivals) has no rate to search: the bisection runs on
`workload.arrivals.clients` instead, in whole clients, and the answer is the most concurrent
clients that meet the SLO (what a `bench_serving --max-concurrency` sweep asks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epsim.errors import SpecError
from epsim.plan.columns import COST_COLUMNS, DERIVED_COLUMNS, METRIC_COLUMNS
from epsim.plan.points import build_point, load_base
from epsim.plan.runner import _axes, _row, _run_missing
from epsim.plan.select import parse_constraint, rejection
from epsim.plan.store import plan_dir, point_cache, prepare_dir
from epsim.plan.sweep import expand
from epsim.spec.scenario import scenario_from_dict
from epsim.text import brief

RATE_KEY = "workload.arrivals.rate_per_s"
CLIENTS_KEY = "workload.arrivals.clients"      # the closed loop's search key
MAX_FACTOR = 64.0          # search from rate / 64 to rate x 64


@dataclass(eq=False)
class MaxRate:
    """One deployment's answer.

    Attributes:
        deployment: `{swept key: value}` of the deployment point.
        rate_per_s: the highest rate found that meets the SLO (None: not even rate / 64).
        row: the plan row at that rate (None with it).
        fails_at_per_s: the lowest rate found that does not (None: not up to rate x 64).
        fails_because: why it fails there (`rejection`).
        tried: (rate, meets) of every run, in order.
        invalid: why the deployment is not a valid scenario ('' when it is).
    """

    deployment: dict
    rate_per_s: float | None = None
    row: dict | None = None
    fails_at_per_s: float | None = None
    fails_because: str = ""
    tried: list = field(default_factory=list)
    invalid: str = ""          # the deployment fails validation (nothing to search)
    whole: bool = False        # the value searched is a count of clients (closed loop)

    def next_rate(self, start: float, rel_tol: float) -> float | None:
        """The next rate (or clients) to try (None: the bracket is tight enough or out of range)."""
        lo, hi = self.rate_per_s, self.fails_at_per_s
        if self.invalid:
            return None
        if lo is None and hi is None:
            return start
        if lo is None:
            value = hi / 2.0 if hi / 2.0 >= start / MAX_FACTOR else None
        elif hi is None:
            value = lo * 2.0 if lo * 2.0 <= start * MAX_FACTOR else None
        else:
            value = (lo + hi) / 2.0 if (hi - lo) > rel_tol * lo else None
        if value is None or not self.whole:
            return value
        value = int(value)                     # whole clients, inside the bracket
        tried = {v for v, _ in self.tried}
        return value if value >= 1 and value not in tried else None


def find_max_rates(scenario, sweeps=(), *, constraints=(), overrides=None, seed=None, profile=None,
                   executor: str = "local", workers: int | None = None, ray_address: str | None = None,
                   out=None, rel_tol: float = 0.05, progress: bool = False,
                   keep_up: bool = True) -> list[MaxRate]:
    """Bisect the request rate of every deployment point of `sweeps` (see the module docstring).

    Args: as `run_plan` (the sweep must not include a `workload.*` key: the rate is searched
        and the rest of the workload is the scenario's); rel_tol: stop when the bracket is
        within this fraction of its lower end.
    Raises:
        SpecError: a swept workload key, arrivals without a rate, bad constraints.
    """
    if not 0 < rel_tol < 1:
        raise SpecError(f"rel_tol ({rel_tol}) must be in (0, 1)")
    axes = _axes(sweeps)
    workload_keys = [a.key for a in axes if a.key.startswith("workload.")]
    if workload_keys:
        raise SpecError(f"--sweep key ({workload_keys[0]}) must not be a workload key with "
                        f"--max-rate; the rate is searched, the rest of the workload is the scenario's")
    overrides = list(overrides or []) + ([f"seed={seed}"] if seed is not None else [])
    base = load_base(scenario, overrides)
    arrivals = scenario_from_dict(base.data, where=base.where, base_dir=base.base_dir).workload.arrivals
    closed = arrivals.kind == "concurrency"
    if not (hasattr(arrivals, "rate_per_s") or closed):
        raise SpecError(f"workload.arrivals.kind ({arrivals.kind}) must be poisson, bursty or "
                        f"concurrency for --max-rate (a rate or a number of clients to search)")
    search_key = CLIENTS_KEY if closed else RATE_KEY
    start = float(arrivals.clients if closed else arrivals.rate_per_s)
    keys = [a.key for a in axes]
    known = keys + list(DERIVED_COLUMNS) + list(METRIC_COLUMNS) + list(COST_COLUMNS)
    parsed = [parse_constraint(t, known) for t in constraints]
    profile_path = str(profile) if profile is not None else None
    answers = [MaxRate(values, whole=closed) for values in expand(axes)] if axes else [MaxRate({}, whole=closed)]
    out_dir = prepare_dir(out)
    with plan_dir(out_dir):                 # one command per results directory
        while True:
            todo = [(a, a.next_rate(start, rel_tol)) for a in answers]
            todo = [(a, r) for a, r in todo if r is not None]
            if not todo:
                break
            points = []
            for i, (answer, rate) in enumerate(todo):
                point = build_point(base, i, {**answer.deployment, search_key: rate}, profile_path)
                if not hasattr(point, "scenario"):          # invalid deployment: nothing to search
                    answer.invalid = point.reason
                    continue
                points.append((answer, rate, point))
            results, _ = _run_missing([p for _, _, p in points], point_cache(out_dir), executor,
                                      workers, ray_address, progress)
            for answer, rate, point in points:
                row = _row(point, keys + [search_key], results[point.key])
                why = rejection(row, parsed, keep_up)
                answer.tried.append((rate, not why))
                if why:
                    answer.fails_at_per_s, answer.fails_because = rate, why
                else:
                    answer.rate_per_s, answer.row = rate, row
    return answers


def max_rate_lines(answers: list[MaxRate], constraints, rel_tol: float = 0.05) -> list[str]:
    """The CLI's answer: one line per deployment."""
    rule = " and ".join(list(constraints) + ["keep-up"])
    closed = any(a.whole for a in answers)
    key, unit = (CLIENTS_KEY, "clients") if closed else (RATE_KEY, "req/s")
    lines = [f"max rate   per deployment, the highest {key} meeting {rule} "
             f"(bisection on the simulator to {rel_tol:.0%}"
             + (", in whole clients):" if closed else "):")]
    for a in answers:
        name = ", ".join(f"{k}={v}" for k, v in a.deployment.items()) or "the scenario's deployment"
        if a.invalid:
            lines.append(f"  {name}: skipped, {a.invalid}")
            continue
        if a.rate_per_s is None:
            lines.append(f"  {name}: none down to {a.tried[-1][0] if a.tried else 0:.3g} {unit} "
                         f"({a.fails_because})")
            continue
        row = a.row
        above = (f"fails at {brief(a.fails_at_per_s, 4)}: {a.fails_because}" if a.fails_at_per_s
                 else f"still meets it at {MAX_FACTOR:g}x the scenario's rate")
        # requests_per_s is one instance's (the run simulates one), num_gpus every instance's
        served_rps = row["requests_per_s"] * row["num_instances"]
        served = (f"{brief(served_rps / row['num_gpus'], 3)} req/s/GPU served" if closed
                  else f"{brief(a.rate_per_s / row['num_gpus'], 3)} req/s/GPU")
        lines.append(f"  {name}: {brief(a.rate_per_s, 4)} {unit} on {row['num_gpus']:g} GPUs "
                     f"({served}; TPOT p99 "
                     f"{brief(row['tpot_ms.p99'], 4)} ms, TTFT p99 {brief(row['ttft_ms.p99'], 4)} ms; "
                     f"{len(a.tried)} runs); {above}")
    return lines
