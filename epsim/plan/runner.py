"""`run_plan`: expand a sweep, run the points not already done, and choose among them.

Flow: sweep axes -> base scenario (+ overrides) -> one validated scenario per point (invalid
ones skipped with their reason) -> run the points missing from the results directory's cache
-> table rows in sweep order (swept values, derived columns, metrics) -> feasible, Pareto and
best columns (`epsim.plan.choice`) -> files (results.csv/.parquet, skipped.csv, plan.json, PNG plots).
"""

from __future__ import annotations

import json
import platform
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from epsim.budget import check_run, check_sweep, run_cost
from epsim.errors import SpecError
from epsim.io.write import write_text
from epsim.plan.answers import answer_line, workload_text
from epsim.plan.choice import PlanResult, check_numeric_keys, choose_rows, rejected
from epsim.plan.columns import (COST_COLUMNS, DERIVED_COLUMNS, METRIC_COLUMNS, cost_columns,
                                derived_columns)
from epsim.plan.executors import check_executor, default_workers, execute, progress_bar
from epsim.plan.plots import write_plots
from epsim.plan.points import (BaseScenario, Point, PointTask, Skipped, build_point, load_base,
                               run_point)
from epsim.plan.select import (DEFAULT_OBJECTIVES, DEFAULT_PARETO, SLO_MARGIN, InfeasibleError,
                               Objective, keep_up_statement, parse_constraint, parse_objective,
                               rule_text)
from epsim.plan.store import (PointCache, cell, plan_dir, point_cache, prepare_dir, write_csv,
                              write_parquet)
from epsim.plan.sweep import SweepAxis, check_axes, expand, num_points, parse_sweep
from epsim.plan.tiers import screen_points, screen_tier, warm_started
from epsim.spec.scenario import scenario_from_dict

ID_COLUMNS = ("point", "point_id")
FLAG_COLUMNS = ("error", SLO_MARGIN, "marginal", "feasible", "pareto", "best")


def _axes(sweeps) -> list[SweepAxis]:
    if isinstance(sweeps, dict):
        axes = [SweepAxis(key, tuple(values if isinstance(values, (list, tuple)) else [values]))
                for key, values in sweeps.items()]
        for axis in axes:
            if not axis.values:
                raise SpecError(f"--sweep key ({axis.key}) must have at least one value")
    else:
        axes = [s if isinstance(s, SweepAxis) else parse_sweep(s) for s in sweeps]
    check_axes(axes)
    return axes


def _group_reason(reason: str) -> str:
    """A skip reason with its numbers elided, so that one rule counts once."""
    return re.sub(r"\([^()]*\)", "(…)", reason)


def skip_reasons(skipped: list[Skipped], limit: int = 3) -> str:
    """`30 like deployment.ep_size (12) must divide ...; 10 like ...`: the commonest rules
    (a rule counts once whatever its numbers), each with its first message."""
    counts = Counter(_group_reason(s.reason) for s in skipped)
    first: dict[str, str] = {}
    for s in skipped:
        first.setdefault(_group_reason(s.reason), s.reason)
    parts = [f"{n} like {first[rule]}" for rule, n in counts.most_common(limit)]
    if len(counts) > limit:
        parts.append(f"{len(counts) - limit} other reason(s)")
    return "; ".join(parts)


def _objectives(texts, default, known, flag) -> list[Objective]:
    return [parse_objective(t, known, flag) for t in (texts or default)]


def run_plan(scenario: str | Path | dict, sweeps: list[str] | dict[str, list] | list[SweepAxis] = (),
             *, constraints: list[str] = (), objectives: list[str] = (), pareto: list[str] = (),
             executor: str = "local", workers: int | None = None, ray_address: str | None = None,
             out: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None,
             seed: int | None = None, profile: str | Path | None = None, progress: bool = True,
             plots: bool = True, require_feasible: bool = True, keep_up: bool = True,
             screen: bool = False, screen_margin: float | None = None,
             screen_top: int | None = None, warm_start: bool = False,
             check_budget: bool = True) -> PlanResult:
    """Sweep a scenario and choose the best configuration.

    Args:
        scenario: a scenario YAML path, or the scenario as a mapping.
        sweeps: `["deployment.ep_size=8,16,32", ...]`, `{key: [values]}` or `SweepAxis` list.
        constraints: `["tpot_ms.p99<=50", ...]`; objectives: `["min:num_gpus", ...]` (default
            `DEFAULT_OBJECTIVES`); pareto: the frontier's objectives (default `DEFAULT_PARETO`).
        executor: "local" (processes; `workers`, default all CPUs) or "ray" (`ray_address`).
        out: results directory; finished points there are not recomputed.
        overrides: `--set` style overrides applied to the base scenario; seed: overrides its seed.
        profile: a profile JSON for every point (default: each scenario's own, or the shipped one).
        require_feasible: raise InfeasibleError (after writing the files) when constraints
            are given and no point meets them all.
        keep_up: a feasible point must also keep up with its offered load (served >= 97 % of
            offered, backlog not growing; `epsim.report.keep_up`); False: constraints only.
        screen: two tiers (`epsim.plan.tiers`): screen every point analytically, simulate the
            screen's candidates and their neighbours only (`screen_margin`, `screen_top`).
        warm_start: start each simulated decode point at the screen's steady batch
            (`epsim.plan.tiers.warm_started`; points that set `initial_running_per_rank` keep it).
        check_budget: refuse a sweep of more than `epsim.budget.MAX_SWEEP_POINTS` points and skip
            points over a run's budget (`epsim.budget`), each with its reason.
    Raises:
        SpecError: bad sweep syntax, unknown keys or metrics, no valid point, no feasible point.
    """
    check_executor(executor, workers)
    axes = _axes(sweeps)
    if check_budget:
        check_sweep(num_points(axes))        # the product, before anything expands it
    overrides = dict(overrides) if isinstance(overrides, dict) else list(overrides or [])
    if seed is not None:
        if isinstance(overrides, dict):
            overrides["seed"] = seed
        else:
            overrides.append(f"seed={seed}")
    base = load_base(scenario, overrides)
    keys = [axis.key for axis in axes]
    known = keys + list(DERIVED_COLUMNS) + list(METRIC_COLUMNS) + list(COST_COLUMNS) + [SLO_MARGIN]
    parsed_constraints = [parse_constraint(t, known) for t in constraints]
    parsed_objectives = _objectives(objectives, DEFAULT_OBJECTIVES, known, "--objective")
    parsed_pareto = _objectives(pareto, DEFAULT_PARETO, known, "--pareto")
    check_numeric_keys(axes, parsed_constraints + parsed_objectives + parsed_pareto)
    out_dir = prepare_dir(out)
    profile_path = str(Path(profile).resolve()) if profile is not None else None
    with plan_dir(out_dir) as rundir:          # held from here: one plan per directory
        points, skipped = _build_points(base, axes, profile_path, check_budget)
        result = _sweep(base, points, skipped, axes=axes, keys=keys, out_dir=out_dir,
                        executor=executor, workers=workers, ray_address=ray_address,
                        progress=progress, keep_up=keep_up,
                        rules=(parsed_constraints, parsed_objectives, parsed_pareto),
                        screen=(screen, screen_margin, screen_top), warm_start=warm_start)
        if rundir is not None:
            _write(result, base, executor, workers, plots, rundir)
    if result.infeasible and require_feasible:
        raise InfeasibleError(result.infeasible)
    return result


def _sweep(base: BaseScenario, points: list[Point], skipped: list[Skipped], *, axes, keys, out_dir,
           executor, workers, ray_address, progress, keep_up, rules, screen, warm_start
           ) -> PlanResult:
    """Run the points missing from the cache and choose among every point (`run_plan`'s
    arguments; `rules`: its constraints, objectives and Pareto axes; `screen`: screen, margin,
    top)."""
    parsed_constraints, parsed_objectives, parsed_pareto = rules
    screen, screen_margin, screen_top = screen
    cache = point_cache(out_dir)
    start = time.perf_counter()
    to_run, screen_cols, screened = points, [], None
    if screen:
        to_run, screen_cols, screened = screen_tier(
            points, keys, axes, out_dir, executor, workers, ray_address, progress,
            parsed_constraints, parsed_objectives, parsed_pareto, keep_up, screen_margin,
            screen_top)
    if warm_start:
        if screened is None:               # two tiers screened every point already
            screened = screen_points(to_run, out_dir, executor, workers, ray_address, progress)
        started = warm_started(base, to_run, screened)
        to_run = [started.get(p.index, p) for p in to_run]
        points = [started.get(p.index, p) for p in points]
    results, num_computed = _run_missing(to_run, cache, executor, workers, ray_address, progress)
    wall_s = time.perf_counter() - start

    rows = [_row(point, keys, results.get(point.key, {})) for point in points]
    for row, extra in zip(rows, screen_cols):
        row.update(extra)
    columns = (list(ID_COLUMNS) + keys + list(DERIVED_COLUMNS) + list(COST_COLUMNS)
               + list(METRIC_COLUMNS) + list(screen_cols[0] if screen_cols else [])
               + list(FLAG_COLUMNS))
    warning_counts = Counter(w for p in to_run for w in results[p.key].get("warnings", []))
    result = PlanResult(rows, columns, axes, parsed_constraints, parsed_objectives, parsed_pareto,
                        None, [], skipped, num_computed, len(to_run) - num_computed, wall_s, out_dir,
                        dict(warning_counts), keep_up=keep_up)
    result.workload = workload_text(scenario_from_dict(base.data, where=base.where,
                                                       base_dir=base.base_dir).workload)
    choose_rows(result)
    return result


def _build_points(base: BaseScenario, axes: list[SweepAxis], profile_path: str | None,
                  check_budget: bool = True) -> tuple[list[Point], list[Skipped]]:
    points: list[Point] = []
    skipped: list[Skipped] = []
    for index, values in enumerate(expand(axes)):
        built = build_point(base, index, values, profile_path)
        if check_budget and isinstance(built, Point):
            try:
                check_run(built.scenario, "point")
            except SpecError as exc:
                built = Skipped(index, values, str(exc).removeprefix("point: "))
        (points if isinstance(built, Point) else skipped).append(built)
    if not points:
        total = num_points(axes)
        raise SpecError(f"no valid configuration among the {total} sweep point(s): "
                        + skip_reasons(skipped))
    return points, skipped


def _run_missing(points: list[Point], cache: PointCache, executor: str, workers: int | None,
                 ray_address: str | None, progress: bool) -> tuple[dict[str, dict], int]:
    """Results by point key: cached ones, then the rest computed (each distinct key once)."""
    results, missing = cache.split(points)
    tasks = [PointTask(p.scenario, p.profile_path) for p in missing]
    task_bytes = max((run_cost(p.scenario).bytes for p in missing), default=0.0)
    with cache, progress_bar(len(tasks), f"plan ({executor})", progress) as advance:
        def on_done(i: int, result: dict) -> None:
            key = missing[i].key
            results[key] = result
            if "error" not in result:
                cache.add(key, result)
            advance(1)

        execute(tasks, on_done, executor, workers, ray_address, fn=run_point, task_bytes=task_bytes)
    return results, len(tasks)


def _row(point: Point, keys: list[str], result: dict) -> dict:
    row: dict[str, Any] = {"point": point.index, "point_id": point.key}
    row.update({key: cell(point.values[key]) for key in keys})
    row.update(derived_columns(point.scenario, point.profile_path))
    metrics = result.get("metrics") or {}
    row.update({name: metrics.get(name, float("nan")) for name in METRIC_COLUMNS})
    row.update(cost_columns(row))
    row["error"] = result.get("error", "")
    return row


def _machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": default_workers(), "python": platform.python_version()}


def _write(result: PlanResult, base: BaseScenario, executor: str, workers: int | None,
           plots: bool, rundir) -> None:
    """The results directory's files, each atomically, then its manifest (`epsim.io.rundir`):
    a stale file of an earlier sweep (another sweep's skipped.csv, a figure not drawn now) is
    removed."""
    out = result.out
    rundir.begin()
    write_csv(result.rows, result.columns, out / "results.csv")
    parquet = write_parquet(result.rows, result.columns, out / "results.parquet")
    if result.skipped:
        rows = [{"point": s.index, **{k: cell(s.values[k]) for k in result.keys}, "reason": s.reason}
                for s in result.skipped]
        write_csv(rows, ["point", *result.keys, "reason"], out / "skipped.csv")
    figures = []
    if plots:
        figures = [p.name for p in write_plots(result, out)]
    best = result.best_row
    meta = {
        "scenario": base.where,
        "sweeps": {axis.key: list(axis.values) for axis in result.axes},
        "constraints": [c.text for c in result.constraints],
        "workload": result.workload,
        "keep_up": keep_up_statement(result.constraints) if result.keep_up else "not applied (--no-keep-up)",
        "rejected": [{"point": result.rows[i]["point"], "reason": why} for i, why in rejected(result)],
        "objectives": [o.text for o in result.objectives],
        "rule": rule_text(result.objectives, result.constraints, result.keep_up),
        "pareto": [o.text for o in result.pareto],
        "executor": executor, "workers": workers or default_workers(),
        "counts": result.counts(),
        "wall_s": result.wall_s,
        "machine": _machine(),
        "best": None if best is None else {"point": best["point"], "point_id": best["point_id"],
                                           "values": {k: best[k] for k in result.keys}},
        "answers": [{"workload": a.workload, "reason": a.reason,
                     "best": None if a.best is None else {
                         "point": result.rows[a.best]["point"],
                         "values": {k: result.rows[a.best][k] for k in result.keys}},
                     "line": answer_line(result, a)} for a in result.answers],
        "infeasible": result.infeasible,
        "frontier": [result.rows[i]["point_id"] for i in result.frontier],
        "warnings": result.warnings,
        "files": ["results.csv"] + (["results.parquet"] if parquet else [])
        + (["skipped.csv"] if result.skipped else []) + figures,
    }
    write_text(out / "plan.json", json.dumps(meta, indent=1, default=str) + "\n")
    rundir.finish([out / name for name in ["plan.json", *meta["files"]]])
