"""A plan's answer, one per workload point: the workload is given, the deployment is chosen.

Swept `workload.*` keys (request rate, input and output lengths, skew) describe what the
deployment must serve, not something to choose, so the best point is chosen separately for
every combination of their values. Each answer states its workload, the chosen deployment,
its keep-up margin and the share of its step time that is measured (in the profile's fitted
range; `epsim.cost.provenance`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from epsim.plan.columns import mean_length
from epsim.plan.uncertainty import band_text
from epsim.report.keep_up import unsettled_text

WORKLOAD_PREFIX = "workload."


def is_workload_key(key: str) -> bool:
    return key.startswith(WORKLOAD_PREFIX)


@dataclass(eq=False)
class Answer:
    """The choice for one workload point.

    Attributes:
        workload: `{swept workload key: value}` ({} when no workload key is swept).
        rows: indices into the plan's rows of this workload point.
        best: index of the best feasible row (None: none feasible).
        reason: why there is no best (None when there is one).
    """

    workload: dict
    rows: list[int] = field(default_factory=list)
    best: int | None = None
    reason: str | None = None

    def describe(self, base_workload: str = "the workload above") -> str:
        return ", ".join(f"{k}={v}" for k, v in self.workload.items()) or base_workload


def group_by_workload(rows: list[dict], keys: list[str]) -> list[Answer]:
    """Answers (not yet chosen) for each distinct combination of the swept workload values,
    in order of first appearance."""
    workload_keys = [k for k in keys if is_workload_key(k)]
    groups: dict[tuple, Answer] = {}
    for i, row in enumerate(rows):
        values = tuple(str(row[k]) for k in workload_keys)
        answer = groups.setdefault(values, Answer({k: row[k] for k in workload_keys}))
        answer.rows.append(i)
    return list(groups.values())


def workload_text(workload) -> str:
    """`poisson 60 req/s; input ~1024, output ~512 tokens (mean); skew zipf 0.4` of a
    `WorkloadSpec`: what every answer serves unless a swept value replaces it."""
    a, skew = workload.arrivals, workload.skew
    rate = (f"{a.kind} {a.rate_per_s:g} req/s" if hasattr(a, "rate_per_s")
            else f"closed loop of {a.clients} clients" if a.kind == "concurrency"
            else f"{a.kind} arrivals")
    detail = {"zipf": lambda: f" {skew.alpha:g}", "hotset": lambda: f" {skew.num_hot} take {skew.hot_frac:g}"}
    skew_text = skew.kind + detail.get(skew.kind, lambda: "")()
    if getattr(skew, "drift_rate_per_s", 0):
        skew_text += f", drift {skew.drift_rate_per_s:g}/s"
    return (f"{rate}; input ~{mean_length(workload.input_len):.0f}, output "
            f"~{mean_length(workload.output_len):.0f} tokens (mean); skew {skew_text}; measured over "
            f"{workload.duration_s - workload.warmup_s:g} s after {workload.warmup_s:g} s warm-up")


def _fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else format(value, spec)


def answer_line(result, answer: Answer) -> str:
    """One line: workload -> deployment, GPUs, the SLO metrics, keep-up margin, measured share."""
    workload = answer.describe()
    if answer.best is None:
        return f"{workload}: no answer: {answer.reason}"
    row = result.rows[answer.best]
    deployment = ", ".join(f"{k}={row[k]}" for k in result.keys if not is_workload_key(k)) \
        or "the scenario's deployment"
    metrics = []
    for metric in dict.fromkeys(c.metric for c in result.constraints):
        spread = band_text(row, metric)
        metrics.append(f"{metric} {_fmt(row.get(metric), '.4g')}" + (f", {spread}" if spread else ""))
    served, offered = row.get("keep_up.served_rps"), row.get("keep_up.offered_rps")
    keep = (f"serves {_fmt(served, '.3g')} of {_fmt(offered, '.3g')} req/s "
            f"({_fmt(100 * row.get('keep_up.served_frac', np.nan), '.1f')} %, backlog "
            f"{_fmt(row.get('keep_up.backlog_growth_rps'), '+.2g')}/s)")
    if row.get("keep_up.settled") == 0.0:
        keep += "; " + unsettled_text(row["keep_up.running_growth_rps"], row["keep_up.offered_rps"])
    measured = row.get("provenance.measured_share")
    share = ("" if measured is None or np.isnan(measured) else
             f"; {100 * measured:.0f} % of step time measured, "
             f"{100 * row.get('provenance.extrapolated_share', np.nan):.0f} % extrapolated, "
             f"{100 * row.get('provenance.datasheet_share', np.nan):.0f} % datasheet")
    return (f"{workload}: {deployment} on {row['num_gpus']:g} GPUs"
            + (f" ({'; '.join(metrics)})" if metrics else "") + f"; {keep}{share}")
