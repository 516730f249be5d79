"""Capacity planning: sweep a scenario over deployment choices, keep what meets the
constraints, and pick the best configuration and the Pareto frontier.

    from epsim.plan import run_plan
    result = run_plan("scenarios/qwen235b_h200_decode.yaml",
                      ["deployment.ep_size=8:128:x2"], constraints=["tpot_ms.p99<=50"],
                      objectives=["min:num_gpus"], out="plans/qwen235b")
    print(result.describe(result.best), result.best_row["tpot_ms.p99"])

The names below are re-exported lazily (`epsim.exports`): `epsim --help` defines `--executor`
from `epsim.plan.executors` and must not load the simulator to do it.
"""

from __future__ import annotations

from epsim.exports import lazy_getattr

_EXPORTS = {
    "DERIVED_COLUMNS": "epsim.plan.columns", "METRIC_COLUMNS": "epsim.plan.columns",
    "derived_columns": "epsim.plan.columns", "summary_metrics": "epsim.plan.columns",
    "EXECUTORS": "epsim.plan.executors",
    "PointTask": "epsim.plan.points", "run_point": "epsim.plan.points",
    "PlanResult": "epsim.plan.choice",
    "run_plan": "epsim.plan.runner",
    "DEFAULT_OBJECTIVES": "epsim.plan.select", "DEFAULT_PARETO": "epsim.plan.select",
    "Constraint": "epsim.plan.select", "InfeasibleError": "epsim.plan.select",
    "Objective": "epsim.plan.select", "pareto_mask": "epsim.plan.select",
    "parse_constraint": "epsim.plan.select", "parse_objective": "epsim.plan.select",
    "SweepAxis": "epsim.plan.sweep", "expand_range": "epsim.plan.sweep",
    "parse_sweep": "epsim.plan.sweep",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
