"""Choosing among a sweep's points: constraints, objectives, the Pareto frontier, the best point.

A constraint is `METRIC OP VALUE` (`tpot_ms.p99<=50`); a point with a NaN metric does not
meet it. Objectives are `min:METRIC` / `max:METRIC`; the best point is the feasible one that
wins the first objective, ties going to the next. The frontier holds the points no other
point beats on every Pareto objective (NaN rows excluded).
"""

from __future__ import annotations

import difflib
import operator
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from epsim.errors import SpecError
from epsim.report.keep_up import MAX_GROWTH_FRAC, RULE
from epsim.text import brief

_OPS: dict[str, Callable] = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
                             "==": operator.eq}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|<|>)\s*(\S+)\s*$")

DEFAULT_OBJECTIVES = ("min:num_gpus", "max:throughput_tokens_per_s_per_gpu")
# keep-up is part of feasibility (`epsim.report.keep_up`): a point that does not serve its
# offered load meets no SLO, whatever its latencies over a short window say
KEEP_UP_METRIC = "keep_up.ok"
# a point where no step started in the measurement window measured nothing: its zero
# throughput and empty latencies are no answer, so it is never feasible
MEASURED_METRIC = "num_measured_steps"
NOTHING_MEASURED = "nothing measured: no step started in its measurement window"
# a point whose weights and KV cache exceed a GPU's memory cannot run, however fast it would be
# (`epsim.plan.columns.derived_columns`; activations are not counted: not modelled)
MEMORY_METRIC = "hbm_headroom_gib"
DEFAULT_PARETO = ("min:num_gpus", "min:tpot_ms.p99", "max:throughput_tokens_per_s_per_gpu")


class InfeasibleError(SpecError):
    """No point meets every constraint (the message says which came closest)."""


def _known(metric: str, known: list[str], flag: str, text: str) -> None:
    if metric not in known:
        close = difflib.get_close_matches(metric, known, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise SpecError(f"{flag} ({text!r}) names an unknown metric ({metric}); {hint}must be one "
                        f"of {', '.join(known)}")


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    bound: float

    @property
    def text(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def met(self, values: np.ndarray) -> np.ndarray:
        """[points] bool; NaN never meets a constraint."""
        with np.errstate(invalid="ignore"):
            return _OPS[self.op](values, self.bound) & np.isfinite(values)

    def miss(self, values: np.ndarray) -> np.ndarray:
        """[points] relative violation, 0 where met, inf where NaN: `|value - bound| / |bound|`."""
        scale = abs(self.bound) or 1.0
        gap = np.abs(values - self.bound) / scale
        return np.where(self.met(values), 0.0, np.where(np.isfinite(values), gap, np.inf))

    def best(self, values: np.ndarray) -> float:
        """The value closest to meeting it (smallest for <, <=; largest for >, >=)."""
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            return float("nan")
        if self.op in ("<", "<="):
            return float(finite.min())
        if self.op in (">", ">="):
            return float(finite.max())
        return float(finite[np.argmin(np.abs(finite - self.bound))])


@dataclass(frozen=True)
class Objective:
    metric: str
    sense: str     # "min" | "max"

    @property
    def text(self) -> str:
        return f"{self.sense}:{self.metric}"

    def cost(self, values: np.ndarray) -> np.ndarray:
        """Lower is better; NaN becomes +inf."""
        cost = values if self.sense == "min" else -values
        return np.where(np.isfinite(cost), cost, np.inf)


def parse_constraint(text: str, known: list[str]) -> Constraint:
    """`tpot_ms.p99<=50` -> Constraint. Raises SpecError for bad syntax or an unknown metric."""
    match = _CONSTRAINT.match(text)
    if match is None:
        raise SpecError(f"--constraint ({text!r}) must look like METRIC<=VALUE "
                        f"(operators <=, >=, <, >, ==), e.g. tpot_ms.p99<=50")
    metric, op, raw = match.groups()
    _known(metric, known, "--constraint", text)
    try:
        bound = float(raw)
    except ValueError:
        raise SpecError(f"--constraint ({text!r}) value ({raw}) must be a number") from None
    return Constraint(metric, op, bound)


def parse_objective(text: str, known: list[str], flag: str = "--objective") -> Objective:
    """`min:num_gpus` -> Objective. Raises SpecError for bad syntax or an unknown metric."""
    sense, sep, metric = text.strip().partition(":")
    if not sep or sense not in ("min", "max") or not metric:
        raise SpecError(f"{flag} ({text!r}) must look like min:METRIC or max:METRIC, "
                        f"e.g. min:num_gpus")
    _known(metric, known, flag, text)
    return Objective(metric, sense)


def keep_up_statement(constraints: list[Constraint]) -> str:
    """What keep-up means in a plan's answer (TTFT from the constraints, when there is one)."""
    ttft = [c.text for c in constraints if c.metric.startswith("ttft_ms.")]
    target = " and ".join(ttft) if ttft else "has no target (add --constraint ttft_ms.p99<=...)"
    return f"keep-up: {RULE}; TTFT {target}"


def memory_problem(row: dict) -> str | None:
    """Why a point's weights and KV cache do not fit in its GPUs' memory, or None (they fit, or
    the row has no memory columns). `row`: a plan row, or `epsim.plan.columns.derived_columns`."""
    headroom = row.get(MEMORY_METRIC)
    if headroom is None or not headroom < 0:            # NaN or missing: no verdict
        return None
    parts = [("expert weights", "expert_weights_gib_per_gpu"), ("other weights", "other_weights_gib_per_gpu"),
             ("KV cache", "kv_cache_gib_per_gpu")]
    shown = ", ".join(f"{name} {row[key]:.3g}" for name, key in parts if row.get(key) is not None)
    return (f"does not fit in GPU memory: {-headroom:.3g} GiB per GPU over its HBM ({shown} GiB; "
            f"activations not counted)")


def rejection(row: dict, constraints: list[Constraint], keep_up: bool = True) -> str:
    """Why a row is not feasible, in a few words ('' when it is)."""
    if row.get("error"):
        return f"failed: {row['error']}"
    if row.get("tier") == "screened":          # `--screen`: never simulated, so no verdict
        return "not simulated: the screen ranks it out"
    steps = row.get(MEASURED_METRIC)
    if steps is not None and not steps > 0:
        return NOTHING_MEASURED
    memory = memory_problem(row)
    if memory:
        return memory
    reasons = []
    if keep_up and not row.get(KEEP_UP_METRIC) == 1.0:
        offered, served = row.get("keep_up.offered_rps"), row.get("keep_up.served_rps")
        growth = row.get("keep_up.backlog_growth_rps")
        known = offered is not None and offered == offered and offered > 0
        text = f"serves {brief(served, 3)} of {brief(offered, 3)} req/s" if known else "no keep-up verdict"
        if known and growth is not None and growth > MAX_GROWTH_FRAC * offered:
            text += f", backlog grows {brief(growth, 3)}/s"
        reasons.append(text + ": overloaded")
    for c in constraints:
        value = row.get(c.metric, float("nan"))
        if not bool(c.met(np.array([value], dtype=np.float64))[0]):
            shown = "-" if value != value else format(value, ".4g")
            reasons.append(f"{c.metric} {shown} misses {c.op}{c.bound:g}")
    return "; ".join(reasons)


def pareto_mask(costs: np.ndarray) -> np.ndarray:
    """Points no other point dominates (<= on every cost, < on one). Rows with inf are out.

    Args:
        costs: [points, objectives] float64, lower is better.
    Returns:
        [points] bool.
    """
    finite = np.isfinite(costs).all(axis=1)
    keep = finite.copy()
    idx = np.flatnonzero(finite)
    sub = costs[idx]
    for i, row in zip(idx, sub):
        dominated = (sub <= row).all(axis=1) & (sub < row).any(axis=1)
        keep[i] = not dominated.any()
    return keep


def lexicographic_best(costs: np.ndarray, candidates: np.ndarray) -> int | None:
    """Index of the candidate with the smallest costs, first column first (None if none)."""
    idx = np.flatnonzero(candidates)
    if idx.size == 0:
        return None
    order = np.lexsort(costs[idx].T[::-1])     # lexsort's last key is the primary one
    return int(idx[order[0]])


def infeasible_message(columns: dict[str, np.ndarray], constraints: list[Constraint],
                       describe: Callable[[int], str], among: np.ndarray | None = None) -> str:
    """Why no point meets all constraints, in one line: a constraint no point meets (the one
    closest, with its best value and where), else the point that comes closest overall.

    Args:
        among: [points] bool, judge only these (the points that keep up); None: all.
    """
    if among is not None and not among.all():
        idx = np.flatnonzero(among)
        if idx.size == 0:
            return "no configuration keeps up with its offered load"
        text = infeasible_message({k: v[idx] for k, v in columns.items()}, constraints,
                                  lambda i: describe(int(idx[i])))
        return text.replace("no configuration meets", "no configuration that keeps up meets", 1)
    misses = np.stack([c.miss(columns[c.metric]) for c in constraints], axis=1)   # [points, constraints]
    num_points = misses.shape[0]
    never = [j for j, c in enumerate(constraints) if not c.met(columns[c.metric]).any()]
    if never:
        j = min(never, key=lambda k: misses[:, k].min())
        c = constraints[j]
        best = c.best(columns[c.metric])
        if not np.isfinite(best):
            return (f"no configuration meets all constraints ({num_points} points): {c.text} has no "
                    f"value at any point ({c.metric} is NaN everywhere; lengthen workload.duration_s?)")
        at = int(np.argmin(misses[:, j]))
        others = f"; {len(never) - 1} other constraint(s) also met nowhere" if len(never) > 1 else ""
        return (f"no configuration meets all constraints ({num_points} points): closest is {c.text}, "
                f"best value {brief(best, 4)} at {describe(at)}{others}")
    worst = misses.max(axis=1)
    at = int(np.argmin(worst))
    j = int(np.argmax(misses[at]))
    c = constraints[j]
    return (f"no configuration meets all constraints together ({num_points} points; each alone is "
            f"met somewhere): closest is {describe(at)}, which misses {c.text} with "
            f"{brief(columns[c.metric][at], 4)}")
