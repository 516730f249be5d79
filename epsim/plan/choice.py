"""A finished sweep (`PlanResult`) and the choice among its rows: the feasible points (keep-up
and constraints), the Pareto frontier and the best point of each workload point, and why a
workload point has none. `run_plan` chooses this way after simulating; `epsim.plan.results`
chooses again over a results table read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from epsim.errors import SpecError
from epsim.plan.answers import Answer, group_by_workload
from epsim.plan.points import Skipped
from epsim.plan.select import (KEEP_UP_METRIC, MEASURED_METRIC, SLO_MARGIN, Constraint, Objective,
                               banded_met, infeasible_message, lexicographic_best, pareto_mask,
                               rejection, slo_margin)
from epsim.plan.sweep import SweepAxis


@dataclass(eq=False)
class PlanResult:
    """A finished sweep.

    Attributes:
        rows: one dict per valid point, in sweep order (`columns` keys).
        best: index into `rows` of the best feasible point when the sweep has one workload
            point (None: none feasible, or several workload points: see `answers`).
        answers: per workload point (swept `workload.*` values), its best point or why none.
        frontier: indices into `rows` of the Pareto frontier.
        skipped: points whose values fail validation, with the reason.
        warnings: distinct warnings the simulations raised -> number of points.
    """

    rows: list[dict]
    columns: list[str]
    axes: list[SweepAxis]
    constraints: list[Constraint]
    objectives: list[Objective]
    pareto: list[Objective]
    best: int | None
    frontier: list[int]
    skipped: list[Skipped]
    num_computed: int
    num_cached: int
    wall_s: float
    out: Path | None = None
    warnings: dict[str, int] = field(default_factory=dict)
    infeasible: str | None = None     # why no point meets the constraints, when none does
    keep_up: bool = True              # feasibility includes keep-up (`epsim.report.keep_up`)
    answers: list[Answer] = field(default_factory=list)   # one per workload point
    workload: str = "as in the results table"             # the base workload, in words

    @property
    def keys(self) -> list[str]:
        return [axis.key for axis in self.axes]

    @property
    def best_row(self) -> dict | None:
        return None if self.best is None else self.rows[self.best]

    def column(self, name: str) -> np.ndarray:
        """[rows] values of one column (float64 where numeric)."""
        values = [row.get(name) for row in self.rows]
        try:
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        except (TypeError, ValueError):
            return np.array(values, dtype=object)

    def describe(self, index: int) -> str:
        """`deployment.ep_size=32, ...` of a row (its swept values)."""
        row = self.rows[index]
        return ", ".join(f"{key}={row[key]}" for key in self.keys) or "the base scenario"

    def counts(self) -> dict[str, int]:
        """How many points the sweep had, were valid, skipped, computed, cached, failed."""
        return {"points": len(self.rows) + len(self.skipped), "valid": len(self.rows),
                "skipped": len(self.skipped), "computed": self.num_computed,
                "cached": self.num_cached, "errors": sum(1 for r in self.rows if r["error"])}

    def to_pandas(self):
        import pandas as pd
        return pd.DataFrame(self.rows, columns=self.columns)


def check_numeric_keys(axes: list[SweepAxis], uses: list[Constraint | Objective]) -> None:
    """A constraint or objective on a swept key needs numbers (bools count) as its values."""
    values = {axis.key: axis.values for axis in axes}
    for use in uses:
        bad = [v for v in values.get(use.metric, ()) if not isinstance(v, (int, float))]
        if bad:
            raise SpecError(f"{use.text} names a swept key whose values are not all numbers "
                            f"({use.metric} = {bad[0]!r}); constraints and objectives compare numbers")



def _costs(result: PlanResult, objectives: list[Objective]) -> np.ndarray:
    """[rows, objectives] lower-is-better costs."""
    return np.stack([o.cost(result.column(o.metric)) for o in objectives], axis=1)


def _why_none(result: PlanResult, idx: np.ndarray) -> str:
    """Why no row among `idx` is feasible: failed or unmeasured everywhere, keep-up, then the
    constraints, then the points that meet them only marginally (their band crosses a bound)."""
    describe = lambda i: result.describe(int(idx[i]))          # noqa: E731
    own = [rejection(result.rows[i], [], False) for i in idx]   # failed, or nothing measured
    if all(own):
        return own[0] if idx.size == 1 else \
            f"none of the {idx.size} points has an answer, e.g. {describe(0)}: {own[0]}"
    marginal = [int(i) for i in idx if result.rows[i].get("marginal")]
    if marginal:
        # the one with the most room under its latency bounds
        at = max(marginal, key=lambda i: np.nan_to_num(result.rows[i][SLO_MARGIN], nan=-np.inf))
        return (f"no configuration meets every constraint with its p10-p90 band ({idx.size} "
                f"points; {len(marginal)} marginal): closest is {result.describe(at)}, whose "
                f"{rejection(result.rows[at], result.constraints, result.keep_up)}")
    keeps = result.column(KEEP_UP_METRIC)[idx] == 1.0
    if result.keep_up and not keeps.any():
        served = result.column("keep_up.served_frac")[idx]
        at = int(np.nanargmax(served)) if np.isfinite(served).any() else 0
        return (f"no configuration keeps up with its offered load ({idx.size} points): closest is "
                f"{describe(at)}, which {rejection(result.rows[idx[at]], [], True)}")
    if not result.constraints:
        return "no point has finite objectives"
    cols = {c.metric: result.column(c.metric)[idx] for c in result.constraints}
    return infeasible_message(cols, result.constraints, describe, keeps if result.keep_up else None)


def _explain_infeasible(result: PlanResult) -> None:
    """Set `result.infeasible` when no workload point has an answer (without constraints or
    keep-up, only when every point failed or measured nothing)."""
    if any(a.best is not None for a in result.answers) or not result.rows:
        return
    if not (result.keep_up or result.constraints) and \
            not all(rejection(row, [], False) for row in result.rows):
        return
    if len(result.answers) == 1:
        result.infeasible = result.answers[0].reason
    else:
        result.infeasible = ("no workload point has an answer: "
                             + "; ".join(f"{a.describe()}: {a.reason}" for a in result.answers[:3]))


def row_status(row: dict) -> str:
    """`feasible`, `marginal` (meets the constraints, its p10-p90 band does not) or `rejected`."""
    return "feasible" if row["feasible"] else "marginal" if row.get("marginal") else "rejected"


def rejected(result: PlanResult) -> list[tuple[int, str]]:
    """(row index, reason) of every point that is not feasible, in sweep order."""
    return [(i, rejection(row, result.constraints, result.keep_up))
            for i, row in enumerate(result.rows) if not row["feasible"]]


def choose_rows(result: PlanResult) -> None:
    """Fill `feasible`, `pareto`, `best` (columns and attributes), the answers per workload
    point, and `infeasible` when no workload point has an answer."""
    num_rows = len(result.rows)
    for row, margin in zip(result.rows, slo_margin(result.rows, result.constraints)):
        row[SLO_MARGIN] = float(margin)
    for name in (SLO_MARGIN, "marginal"):
        if name not in result.columns:          # results tables written before the band
            result.columns.insert(result.columns.index("feasible") if "feasible" in result.columns
                                  else len(result.columns), name)
    met = np.array([not row.get("error") for row in result.rows], dtype=bool)
    if MEASURED_METRIC in result.columns:       # (a table written before the column had none)
        met &= result.column(MEASURED_METRIC) > 0
    if result.keep_up:
        met &= result.column(KEEP_UP_METRIC) == 1.0
    for c in result.constraints:
        met &= c.met(result.column(c.metric))
    # met at the prediction but not by its whole p10-p90 band: marginal, not feasible
    robust = banded_met(result.rows, result.constraints)
    feasible, marginal = met & robust, met & ~robust
    for i, row in enumerate(result.rows):
        row["marginal"] = bool(marginal[i])
    pareto_costs = _costs(result, result.pareto)
    frontier = np.zeros(num_rows, dtype=bool)
    costs = _costs(result, result.objectives)
    # the first objective decides and must have a value; a later one without (TPOT of a
    # prefill instance) only ranks that point last on it
    candidates = feasible & np.isfinite(costs[:, 0])
    result.answers = group_by_workload(result.rows, result.keys)
    for answer in result.answers:
        idx = np.array(answer.rows, dtype=np.int64)
        frontier[idx] = pareto_mask(pareto_costs[idx])          # within one workload point
        mask = np.zeros(num_rows, dtype=bool)
        mask[idx] = True
        answer.best = lexicographic_best(costs, candidates & mask)
        answer.reason = None if answer.best is not None else _why_none(result, idx)
    bests = {a.best for a in result.answers if a.best is not None}
    # one workload point: its best is the plan's; several: each has its own (never one across)
    result.best = result.answers[0].best if len(result.answers) == 1 else None
    result.frontier = [int(i) for i in np.flatnonzero(frontier)]
    for i, row in enumerate(result.rows):
        row["feasible"] = bool(feasible[i])
        row["pareto"] = bool(frontier[i])
        row["best"] = i in bests
    _explain_infeasible(result)
