"""`epsim plan`: sweep a scenario, print the best configuration and the Pareto frontier, write
the results directory (see `epsim.plan`)."""

from __future__ import annotations

import math

MAX_FRONTIER_ROWS = 15


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def format_rows(result, indices: list[int]) -> list[str]:
    """A fixed-width table of rows: swept values, then Pareto, constraint and objective metrics."""
    names = list(result.keys)
    for metric in ([o.metric for o in result.pareto] + [c.metric for c in result.constraints]
                   + [o.metric for o in result.objectives]):
        if metric not in names:
            names.append(metric)
    cells = [[_fmt(result.rows[i][n]) for n in names] for i in indices]
    widths = [max([len(n)] + [len(row[j]) for row in cells]) for j, n in enumerate(names)]
    lines = ["  " + "  ".join(n.rjust(w) for n, w in zip(names, widths))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return lines


def summary_lines(result, scenario: str, executor: str) -> list[str]:
    from epsim.plan.runner import skip_reasons
    num_valid = len(result.rows)
    lines = [f"plan       {scenario}: {num_valid + len(result.skipped)} point(s), {num_valid} valid; "
             f"{result.num_computed} computed, {result.num_cached} from the results directory "
             f"({executor}, {result.wall_s:.1f} s)"]
    if result.skipped:
        lines.append(f"skipped    {len(result.skipped)}: {skip_reasons(result.skipped)}")
    errors = [r for r in result.rows if r["error"]]
    if errors:
        lines.append(f"errors     {len(errors)} point(s) failed to simulate, e.g. {errors[0]['error']}")
    from epsim.plan.runner import rejected
    from epsim.plan.select import keep_up_statement
    if result.constraints or result.keep_up:
        num_feasible = sum(1 for r in result.rows if r["feasible"])
        rules = [c.text for c in result.constraints] + (["keep-up"] if result.keep_up else [])
        lines.append(f"feasible   {num_feasible} of {num_valid} meet " + " and ".join(rules))
    if result.keep_up:
        lines.append(f"           {keep_up_statement(result.constraints)}")
    for i, why in rejected(result)[:MAX_FRONTIER_ROWS]:
        lines.append(f"rejected   {result.describe(i)}: {why}")
    if result.best is not None:
        lines.append(f"best       {result.describe(result.best)}  "
                     f"(by {', '.join(o.text for o in result.objectives)})")
        lines += format_rows(result, [result.best])
    order = sorted(result.frontier, key=lambda i: [result.rows[i][o.metric] for o in result.pareto])
    lines.append(f"frontier   {len(result.frontier)} point(s) on the Pareto frontier of "
                 f"{', '.join(o.text for o in result.pareto)}"
                 + (f" (first {MAX_FRONTIER_ROWS})" if len(order) > MAX_FRONTIER_ROWS else ""))
    if order:
        lines += format_rows(result, order[:MAX_FRONTIER_ROWS])
    for message, count in sorted(result.warnings.items()):
        lines.append(f"warning    ({count} point(s)) {message}")
    return lines


def run(args) -> int:
    from epsim.plan.runner import run_plan
    from epsim.plan.select import InfeasibleError
    result = run_plan(args.scenario, args.sweep, constraints=args.constraint,
                      objectives=args.objective, pareto=args.pareto, executor=args.executor,
                      workers=args.workers, ray_address=args.ray_address, out=args.out,
                      overrides=args.overrides, seed=args.seed, profile=args.profile,
                      progress=not args.no_progress, plots=not args.no_plots, require_feasible=False,
                      keep_up=not args.no_keep_up)
    print("\n".join(summary_lines(result, args.scenario, args.executor)))
    if result.out is not None:
        print(f"\nwrote results.csv, plan.json and figures to {result.out}")
    if result.infeasible:
        raise InfeasibleError(result.infeasible)
    return 0
