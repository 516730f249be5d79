"""Two-tier planning (`epsim plan --screen`): screen every point analytically, simulate few.

Tier 1 prices every valid point with `epsim.plan.screen` (no event loop; chunks of
`SCREEN_CHUNK` points per task through the same executors as simulations, results kept in the
results directory's `screen.jsonl`, so a rerun screens only new points). Tier 2 simulates the
candidates: per workload point, the screen-feasible points (keep-up, and each constraint met
by the screen's estimate within `margin`) that lie on the screen's Pareto frontier (one point
per distinct estimate) or rank in the first `top` by the objectives, plus every neighbour of
those `top` (one swept value one step away on one axis, feasible or not, so the simulation can
correct the screen near its boundary). The plan then chooses among the simulated points only, as without a screen;
screened-only rows keep their `screen.*` columns and NaN simulation metrics.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from epsim.errors import EpsimError
from epsim.plan.answers import group_by_workload
from epsim.plan.columns import derived_columns
from epsim.plan.executors import execute, progress_bar
from epsim.plan.points import Point, build_point
from epsim.plan.screen import SCREEN_METRICS, screen_metrics
from epsim.sim.steady import steady_start
from epsim.plan.select import Constraint, Objective, lexicographic_best, pareto_mask
from epsim.plan.store import SCREEN_CACHE, PointCache, cell
from epsim.default_profile import default_profile
from epsim.profile import load_profile

SCREEN_COLUMNS = tuple(f"screen.{name}" for name in SCREEN_METRICS) + ("tier",)
SCREEN_CHUNK = 64
DEFAULT_MARGIN = 0.25
DEFAULT_TOP = 3

# simulation metric -> the screen estimate it is compared with (latency percentiles with the
# screen's steady-state mean; inter-token gaps with TPOT)
_LATENCY_ESTIMATE = {"tpot_ms": "tpot_ms", "itl_ms": "tpot_ms", "ttft_ms": "ttft_ms",
                     "step_ms": "step_ms"}
_SAME_NAME = {"throughput_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu", "requests_per_s"}


@dataclass(frozen=True, eq=False)
class ScreenTask:
    """A chunk of points for one worker: `(scenario, profile_path)` each."""

    items: list


def screen_chunk(task: ScreenTask) -> dict:
    """Screen every point of a chunk: `{"results": [{"metrics": {...}} | {"error": msg}]}`."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the simulation tier reports warnings
        for scenario, profile_path in task.items:
            try:
                profile = load_profile(profile_path, shared=True) if profile_path \
                    else default_profile(scenario.cluster.gpu)           # read, never changed
                out.append({"metrics": screen_metrics(scenario, profile)})
            except EpsimError as exc:
                out.append({"error": str(exc)})
    return {"results": out}


def screen_points(points: list[Point], out_dir: Path | None, executor: str, workers: int | None,
                  ray_address: str | None, progress: bool) -> dict[str, dict]:
    """Screen metrics by point key (`{}` for a point the screen cannot price)."""
    cache = PointCache(out_dir, SCREEN_CACHE, SCREEN_METRICS)
    results, missing = cache.split(points, lambda entry: entry["metrics"])
    chunks = [missing[i:i + SCREEN_CHUNK] for i in range(0, len(missing), SCREEN_CHUNK)]
    tasks = [ScreenTask([(p.scenario, p.profile_path) for p in chunk]) for chunk in chunks]
    with cache, progress_bar(len(missing), f"screen ({executor})", progress) as advance:
        def on_done(i: int, result: dict) -> None:
            for point, one in zip(chunks[i], result["results"]):
                results[point.key] = one.get("metrics", {})
                if "metrics" in one:
                    cache.add(point.key, one)
            advance(len(chunks[i]))

        execute(tasks, on_done, executor, workers, ray_address, fn=screen_chunk)
    return results


def warm_started(base, points: list[Point], screened: dict[str, dict]) -> dict[int, Point]:
    """`--warm-start`: by point index, each decode point rebuilt to start at the screen's
    steady batch (`workload.initial_running_per_rank` = its running requests per rank, whole,
    within [1, max_running_requests]; the batch limit for a point that does not keep up, whose
    steady state is a full batch). Points of other modes, points that set a start of their own
    and points the screen cannot price are left out (they run as they are).

    A run that starts empty spends about a request's lifetime filling its batch, longer near
    capacity, and a short run can end before the steady state it is meant to measure
    (`keep_up.settled`); the fleet's verification starts its decode pools the same way."""
    out: dict[int, Point] = {}
    for point in points:
        s = point.scenario
        running = screened.get(point.key, {}).get("running_per_rank")
        if (s.deployment.disaggregation_mode != "decode" or s.workload.initial_running_per_rank
                or running is None or not np.isfinite(running)):
            continue
        built = build_point(base, point.index, {
            **point.values, "workload.initial_running_per_rank":
                steady_start(running, s.deployment.max_running_requests)}, point.profile_path)
        if isinstance(built, Point):
            out[point.index] = built
    return out


def screen_estimate(metric: str, row: dict) -> float | None:
    """The screen's estimate of a plan metric in a row (`screen.*`, derived and swept columns
    are already there); None where the screen has none (the metric is not screened)."""
    head = metric.split(".")[0]
    if metric in _SAME_NAME:
        return row.get(f"screen.{metric}")
    if head in _LATENCY_ESTIMATE:
        return row.get(f"screen.{_LATENCY_ESTIMATE[head]}")
    if metric == "keep_up.ok":
        return row.get("screen.keep_up")
    value = row.get(metric)
    return value if isinstance(value, (int, float)) else None


def _column(rows: list[dict], metric: str) -> np.ndarray:
    values = [screen_estimate(metric, row) for row in rows]
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def _relaxed(c: Constraint, margin: float) -> Constraint:
    """`c` loosened by `margin` of its bound (the screen estimates, the simulation decides)."""
    slack = abs(c.bound) * margin
    if c.op in ("<", "<="):
        return Constraint(c.metric, c.op, c.bound + slack)
    if c.op in (">", ">="):
        return Constraint(c.metric, c.op, c.bound - slack)
    return c


def select_candidates(points: list[Point], rows: list[dict], keys: list[str],
                      axes_values: dict[str, tuple], constraints: list[Constraint],
                      objectives: list[Objective], pareto: list[Objective], keep_up: bool,
                      margin: float = DEFAULT_MARGIN, top: int = DEFAULT_TOP) -> list[int]:
    """Indices (into `points` / `rows`) of the points to simulate (module doc)."""
    n = len(rows)
    ok = np.ones(n, dtype=bool)
    if keep_up:
        ok &= _column(rows, "keep_up.ok") == 1.0
    for c in constraints:
        values = _column(rows, c.metric)
        ok &= np.isnan(values) | _relaxed(c, margin).met(values)    # NaN: not screened
    frontier = np.zeros(n, dtype=bool)
    best = np.zeros(n, dtype=bool)
    pareto_costs = np.stack([o.cost(_column(rows, o.metric)) for o in pareto], axis=1)
    costs = np.stack([o.cost(_column(rows, o.metric)) for o in objectives], axis=1)
    for answer in group_by_workload(rows, keys):
        idx = np.array(answer.rows, dtype=np.int64)
        good = idx[ok[idx]]
        if good.size == 0:        # nothing passes the screen: simulate the closest few
            good = idx[np.argsort(costs[idx, 0], kind="stable")[:top]]
        # the frontier, one point per distinct screen estimate (points the screen cannot tell
        # apart, e.g. batch limits a light load never reaches, count once)
        _, first = np.unique(np.round(pareto_costs[good], 9), axis=0, return_index=True)
        distinct = good[np.sort(first)]
        frontier[distinct[pareto_mask(pareto_costs[distinct])]] = True
        remaining = np.zeros(n, dtype=bool)
        remaining[good] = True
        remaining &= np.isfinite(costs[:, 0])      # later objectives only break ties
        for _ in range(top):
            pick = lexicographic_best(costs, remaining)
            if pick is None:
                break
            best[pick] = True
            remaining[pick] = False
    chosen = frontier | best
    return sorted(set(np.flatnonzero(chosen).tolist())
                  | _neighbours(points, np.flatnonzero(best), keys, axes_values))


def _neighbours(points: list[Point], chosen: np.ndarray, keys: list[str],
                axes_values: dict[str, tuple]) -> set[int]:
    """Points one step away on one axis from a chosen point."""
    def position(point: Point) -> tuple:
        return tuple(axes_values[k].index(point.values[k]) for k in keys)

    where = {position(p): i for i, p in enumerate(points)}
    out: set[int] = set()
    for i in chosen.tolist():
        pos = position(points[i])
        for axis in range(len(keys)):
            for step in (-1, 1):
                other = pos[:axis] + (pos[axis] + step,) + pos[axis + 1:]
                if other in where:
                    out.add(where[other])
    return out


def screen_row_values(screen: dict, simulated: bool) -> dict:
    """The `SCREEN_COLUMNS` of one row."""
    row = {f"screen.{name}": float(screen.get(name, float("nan"))) for name in SCREEN_METRICS}
    row["tier"] = "simulated" if simulated else "screened"
    return row


def screen_tier(points: list[Point], keys: list[str], axes, out_dir: Path | None, executor: str,
                workers: int | None, ray_address: str | None, progress: bool,
                constraints: list[Constraint], objectives: list[Objective],
                pareto: list[Objective], keep_up: bool, margin: float | None,
                top: int | None) -> tuple[list[Point], list[dict], dict[str, dict]]:
    """Tier 1 for `run_plan`: (points to simulate, `SCREEN_COLUMNS` values per point, screen
    metrics by point key)."""
    screened = screen_points(points, out_dir, executor, workers, ray_address, progress)
    rows = []
    for point in points:
        row = {key: cell(point.values[key]) for key in keys}
        row.update(derived_columns(point.scenario, point.profile_path))
        row.update(screen_row_values(screened.get(point.key, {}), False))
        rows.append(row)
    chosen = select_candidates(points, rows, keys, {a.key: a.values for a in axes}, constraints,
                               objectives, pareto, keep_up,
                               DEFAULT_MARGIN if margin is None else margin,
                               DEFAULT_TOP if top is None else top)
    for i in chosen:
        rows[i]["tier"] = "simulated"
    screen_cols = [{name: row[name] for name in SCREEN_COLUMNS} for row in rows]
    return [points[i] for i in chosen], screen_cols, screened
