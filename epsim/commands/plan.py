"""`epsim plan`: sweep a scenario, print the best configuration and the Pareto frontier, write
the results directory (see `epsim.plan`)."""

from __future__ import annotations

import json
from pathlib import Path

from epsim.commands.emit import plan_emit, precheck
from epsim.commands.fleet import run as run_fleet
from epsim.commands.output import Report, json_safe, wants_progress, without_category
from epsim.errors import SpecError
from epsim.io.write import write_text
from epsim.plan.answers import answer_line
from epsim.plan.choice import rejected, row_status
from epsim.plan.max_rate import find_max_rates, max_rate_lines
from epsim.plan.runner import run_plan, skip_reasons
from epsim.plan.select import keep_up_statement, rule_text
from epsim.plan.store import plan_dir, prepare_dir
from epsim.text import table

MAX_FRONTIER_ROWS = 15


def table_columns(result) -> list[str]:
    """Swept keys, then the Pareto, constraint and objective metrics (each once)."""
    names = list(result.keys)
    for metric in ([o.metric for o in result.pareto] + [c.metric for c in result.constraints]
                   + [o.metric for o in result.objectives]):
        if metric == "slo_margin" and not any(c.is_latency_slo for c in result.constraints):
            continue                               # NaN everywhere without a latency SLO
        if metric not in names:
            names.append(metric)
    return names


def format_rows(result, indices: list[int]) -> list[str]:
    """An aligned table of rows: swept values, then Pareto, constraint and objective metrics,
    then whether each is feasible (a frontier holds rejected points too)."""
    names = table_columns(result)
    return table(names + ["status"], [[result.rows[i][n] for n in names] + [row_status(result.rows[i])]
                                      for i in indices])


def summary_lines(result, scenario: str, executor: str) -> list[str]:
    num_valid = len(result.rows)
    lines = [f"plan       {scenario}: {num_valid + len(result.skipped)} point(s), {num_valid} valid; "
             f"{result.num_computed} computed, {result.num_cached} from the results directory "
             f"({executor}, {result.wall_s:.1f} s)"]
    if result.skipped:
        lines.append(f"skipped    {len(result.skipped)}: {skip_reasons(result.skipped)}")
    errors = [r for r in result.rows if r["error"]]
    if errors:
        lines.append(f"errors     {len(errors)} point(s) failed to simulate, e.g. {errors[0]['error']}")
    if result.constraints or result.keep_up:
        num_feasible = sum(1 for r in result.rows if r["feasible"])
        rules = [c.text for c in result.constraints] + (["keep-up"] if result.keep_up else [])
        lines.append(f"feasible   {num_feasible} of {num_valid} meet " + " and ".join(rules))
    if result.keep_up:
        lines.append(f"           {keep_up_statement(result.constraints)}")
    for i, why in rejected(result)[:MAX_FRONTIER_ROWS]:
        lines.append(f"{'marginal' if result.rows[i].get('marginal') else 'rejected':10s} "
                     f"{result.describe(i)}: {why}")
    lines.append(f"rule       {rule_text(result.objectives, result.constraints, result.keep_up)}")
    lines.append(f"workload   {result.workload}" + (" (swept values replace these)"
                                                    if len(result.answers) > 1 else ""))
    if len(result.answers) > 1:
        lines.append("answers    one per workload point (the workload is given, not chosen; by the "
                     "rule above):")
        lines += [f"  {answer_line(result, a)}" for a in result.answers]
    elif result.best is not None:
        lines.append(f"best       {result.describe(result.best)}  (by the rule above)")
        lines += format_rows(result, [result.best])
        lines.append(f"answer     {answer_line(result, result.answers[0])}")
    order = sorted(result.frontier, key=lambda i: [result.rows[i][o.metric] for o in result.pareto])
    lines.append(f"frontier   {len(result.frontier)} point(s) on the Pareto frontier"
                 + (" of each workload point" if len(result.answers) > 1 else "") + " of "
                 f"{', '.join(o.text for o in result.pareto)}"
                 + (f" (first {MAX_FRONTIER_ROWS})" if len(order) > MAX_FRONTIER_ROWS else ""))
    if order:
        lines += format_rows(result, order[:MAX_FRONTIER_ROWS])
    return lines


def run_max_rate(args):
    """`--max-rate`: per deployment, the highest rate meeting the SLO (`epsim.plan.max_rate`)."""
    with plan_dir(prepare_dir(args.out), "plan --max-rate") as rundir:
        answers = find_max_rates(args.scenario, args.sweep, constraints=args.constraint,
                                 overrides=args.overrides, seed=args.seed, profile=args.profile,
                                 executor=args.executor, workers=args.workers,
                                 ray_address=args.ray_address, out=args.out,
                                 progress=wants_progress(args), keep_up=not args.no_keep_up)
        return _max_rate_report(args, answers, rundir)


def _max_rate_report(args, answers, rundir):
    """`--max-rate`'s summary, and max_rate.json (then the manifest) in `--out`."""
    # a closed loop searches its clients: the same fields, named for what they hold
    found, fails = ("max_clients", "fails_at_clients") if any(a.whole for a in answers) else (
        "max_rate_per_s", "fails_at_per_s")
    rows = [{"deployment": a.deployment, found: a.rate_per_s,
             fails: a.fails_at_per_s, "fails_because": a.fails_because,
             "invalid": a.invalid, "tried": a.tried, "row": a.row} for a in answers]
    data = json_safe({"scenario": args.scenario, "constraints": list(args.constraint),
                      "max_rate": rows})
    lines = max_rate_lines(answers, args.constraint)
    files = []
    if rundir is not None:
        rundir.begin()
        files.append(write_text(Path(args.out) / "max_rate.json",
                                json.dumps(data["max_rate"], indent=1, default=str) + "\n"))
        rundir.finish(files)
    return Report(data, lines, files=files)


def run(args):
    if args.emit and args.max_rate:
        raise SpecError("--emit (sglang) must go with a plan or --fleet answer, not --max-rate")
    precheck(args)                          # a deployment SGLang cannot be told: before the work
    if args.max_rate:
        return run_max_rate(args)
    if args.fleet:
        return run_fleet(args)
    result = run_plan(args.scenario, args.sweep, constraints=args.constraint,
                      objectives=args.objective, pareto=args.pareto, executor=args.executor,
                      workers=args.workers, ray_address=args.ray_address, out=args.out,
                      overrides=args.overrides, seed=args.seed, profile=args.profile,
                      progress=wants_progress(args), plots=not args.no_plots, require_feasible=False,
                      keep_up=not args.no_keep_up, screen=args.screen,
                      screen_margin=args.screen_margin, screen_top=args.screen_top,
                      warm_start=args.warm_start, check_budget=not args.no_budget_check)
    names = table_columns(result)
    data = json_safe({
        "scenario": args.scenario, "sweeps": {a.key: list(a.values) for a in result.axes},
        "constraints": [c.text for c in result.constraints],
        "objectives": [o.text for o in result.objectives],
        "rule": rule_text(result.objectives, result.constraints, result.keep_up),
        "pareto": [o.text for o in result.pareto],
        "counts": result.counts(),
        "columns": names,
        "best": None if result.best is None else {n: result.rows[result.best][n] for n in names},
        "frontier": [{**{n: result.rows[i][n] for n in names}, "status": row_status(result.rows[i])}
                     for i in result.frontier],
        "workload": result.workload,
        "keep_up": result.keep_up,
        "answers": [{"workload": a.workload, "best": None if a.best is None else
                     {n: result.rows[a.best][n] for n in names}, "reason": a.reason}
                    for a in result.answers],
        "rejected": [{"point": result.rows[i]["point"], "reason": why,
                      "marginal": bool(result.rows[i].get("marginal"))} for i, why in rejected(result)],
        "infeasible": result.infeasible, "wall_s": result.wall_s,
        "out": None if result.out is None else str(result.out)})
    lines = summary_lines(result, args.scenario, args.executor)
    error = result.infeasible
    if args.emit:
        emitted, data["sglang"], emit_error = plan_emit(args, result)
        lines += emitted
        error = error or emit_error
    if result.out is not None:
        lines.append(f"\nwrote results.csv, plan.json and figures to {result.out}")
    return Report(data, lines, notes=[without_category(m) for m in result.warnings], error=error)
