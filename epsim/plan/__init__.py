"""Capacity planning: sweep a scenario over deployment choices, keep what meets the
constraints, and pick the best configuration and the Pareto frontier.

    from epsim.plan import run_plan
    result = run_plan("scenarios/qwen235b_h200_decode.yaml",
                      ["deployment.ep_size=8:128:x2"], constraints=["tpot_ms.p99<=50"],
                      objectives=["min:num_gpus"], out="plans/qwen235b")
    print(result.describe(result.best), result.best_row["tpot_ms.p99"])
"""

from epsim.plan.columns import DERIVED_COLUMNS, METRIC_COLUMNS, derived_columns, summary_metrics
from epsim.plan.executors import EXECUTORS, PointTask, run_point
from epsim.plan.choice import PlanResult
from epsim.plan.runner import run_plan
from epsim.plan.select import (DEFAULT_OBJECTIVES, DEFAULT_PARETO, Constraint, InfeasibleError,
                               Objective, pareto_mask, parse_constraint, parse_objective)
from epsim.plan.sweep import SweepAxis, expand_range, parse_sweep

__all__ = [
    "Constraint", "DEFAULT_OBJECTIVES", "DEFAULT_PARETO", "DERIVED_COLUMNS", "EXECUTORS",
    "InfeasibleError", "METRIC_COLUMNS", "Objective", "PlanResult", "PointTask", "SweepAxis",
    "derived_columns", "expand_range", "pareto_mask", "parse_constraint", "parse_objective",
    "parse_sweep", "run_plan", "run_point", "summary_metrics",
]
