"""Choosing among a sweep's points: constraints, objectives, the Pareto frontier, the best point.

A constraint is `METRIC OP VALUE` (`tpot_ms.p99<=50`); a point with a NaN metric does not
meet it, and a point whose p10-p90 band (`epsim.plan.uncertainty`) crosses the bound meets it
only *marginally*: it is not feasible. Objectives are `min:METRIC` / `max:METRIC`; the best
point is the feasible one that wins the first objective, ties going to the next. The frontier
holds the points no other point beats on every Pareto objective (NaN rows excluded), feasible
or not.

The default rule (`DEFAULT_OBJECTIVES`): fewest GPUs, then the largest margin to the latency
SLO (`slo_margin`: the smallest `(bound - value) / bound` over the latency constraints, so with
one TPOT bound the lowest TPOT at that percentile), then the lowest TPOT p99 and TTFT p99. Not
throughput per GPU: every feasible point serves the same offered load, so its tokens per GPU
differ only by the GPUs (already the first criterion) and by the window's noise.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from epsim.errors import SpecError, did_you_mean
from epsim.plan.uncertainty import band, band_columns, has_band
from epsim.report.keep_up import MAX_GROWTH_FRAC, RULE
from epsim.text import brief

_OPS: dict[str, Callable] = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt,
                             "==": operator.eq}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|<|>)\s*(\S+)\s*$")

SLO_MARGIN = "slo_margin"          # computed when choosing: it depends on the constraints
DEFAULT_OBJECTIVES = ("min:num_gpus", f"max:{SLO_MARGIN}", "min:tpot_ms.p99", "min:ttft_ms.p99")
# keep-up is part of feasibility (`epsim.report.keep_up`): a point that does not serve its
# offered load meets no SLO, whatever its latencies over a short window say
KEEP_UP_METRIC = "keep_up.ok"
# a point where no step started in the measurement window measured nothing: its zero
# throughput and empty latencies are no answer, so it is never feasible
MEASURED_METRIC = "num_measured_steps"
NOTHING_MEASURED = "nothing measured: no step started in its measurement window"
DEFAULT_PARETO = ("min:num_gpus", "min:tpot_ms.p99", "max:throughput_tokens_per_s_per_gpu")


class InfeasibleError(SpecError):
    """No point meets every constraint (the message says which came closest)."""


def _known(metric: str, known: list[str], flag: str, text: str) -> None:
    if metric not in known:
        guess = did_you_mean(metric, known)
        hint = f"{guess} " if guess else ""
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

    @property
    def is_latency_slo(self) -> bool:
        """An upper bound on a latency (`tpot_ms.p99<=50`): what `slo_margin` measures."""
        return self.op in ("<", "<=") and self.metric.split(".")[0].endswith("_ms") and self.bound > 0

    def met_by_band(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """[points] bool: the whole p10-p90 band meets it (the end nearer the bound does)."""
        if self.op in ("<", "<="):
            return self.met(hi)
        if self.op in (">", ">="):
            return self.met(lo)
        return self.met(lo) & self.met(hi)

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


def slo_margin(rows: list[dict], constraints: list[Constraint]) -> np.ndarray:
    """[rows] the smallest relative margin `(bound - value) / bound` over the latency SLOs
    (`Constraint.is_latency_slo`); NaN with none, or where a value is NaN."""
    slos = [c for c in constraints if c.is_latency_slo]
    if not slos:
        return np.full(len(rows), np.nan)
    margins = [np.array([(c.bound - _float(row.get(c.metric))) / c.bound for row in rows])
               for c in slos]
    return np.min(np.stack(margins), axis=0)


def _float(value) -> float:
    return float("nan") if value is None else float(value)


def banded_met(rows: list[dict], constraints: list[Constraint]) -> np.ndarray:
    """[rows] bool: every constraint on a metric with a band is met by the whole band."""
    ok = np.ones(len(rows), dtype=bool)
    for c in constraints:
        if has_band(c.metric):
            ok &= c.met_by_band(*band_columns(rows, c.metric))
    return ok


def rule_text(objectives: list[Objective], constraints: list[Constraint], keep_up: bool) -> str:
    """How the answer was chosen, in one line (printed with every answer)."""
    names = {"min:num_gpus": "fewest GPUs", "min:cost_per_hour": "lowest cost per hour",
             "min:cost_per_million_output_tokens": "lowest cost per million output tokens"}
    slos = [c.text for c in constraints if c.is_latency_slo]
    steps = []
    for o in objectives:
        if o.metric == SLO_MARGIN:
            if slos:
                steps.append(f"the largest margin to {' and '.join(slos)} (lowest latency at the "
                             f"SLO's percentile)")
        else:
            steps.append(names.get(o.text, f"{'lowest' if o.sense == 'min' else 'highest'} {o.metric}"))
    among = ("among the points that keep up and meet every constraint with their p10-p90 band"
             if keep_up else "among the points that meet every constraint with their p10-p90 band")
    text = f"{among}: {', then '.join(steps)}"
    if not any(o.metric.startswith(("throughput", "output_tokens", "input_tokens")) for o in objectives):
        text += ("; not by throughput per GPU: every such point serves the same offered load, so "
                 "tokens/s per GPU differ only by GPU count and the window's noise")
    return text


def keep_up_statement(constraints: list[Constraint]) -> str:
    """What keep-up means in a plan's answer (TTFT from the constraints, when there is one)."""
    ttft = [c.text for c in constraints if c.metric.startswith("ttft_ms.")]
    target = " and ".join(ttft) if ttft else "has no target (add --constraint ttft_ms.p99<=...)"
    return f"keep-up: {RULE}; TTFT {target}"


def rejection(row: dict, constraints: list[Constraint], keep_up: bool = True) -> str:
    """Why a row is not feasible, in a few words ('' when it is)."""
    if row.get("error"):
        return f"failed: {row['error']}"
    if row.get("tier") == "screened":          # `--screen`: never simulated, so no verdict
        return "not simulated: the screen ranks it out"
    steps = row.get(MEASURED_METRIC)
    if steps is not None and not steps > 0:
        return NOTHING_MEASURED
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
        value = float("nan") if value is None else value
        if not bool(c.met(np.array([value], dtype=np.float64))[0]):
            shown = "-" if value != value else format(value, ".4g")
            reasons.append(f"{c.metric} {shown} misses {c.op}{c.bound:g}")
            continue
        b = band(row, c.metric)
        if b is not None and not bool(c.met_by_band(np.array([b[0]]), np.array([b[1]]))[0]):
            reasons.append(f"{c.metric} {value:.4g} meets {c.op}{c.bound:g} but its p10-p90 band "
                           f"{b[0]:.4g}-{b[1]:.4g} crosses it: marginal")
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
    """Index of the candidate with the smallest costs, first column first (None if none); a
    cost of +inf (a NaN metric) in a later column ranks last on that column."""
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
