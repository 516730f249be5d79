"""A row several deployments fit, predicted as all of them: their geometric mean and spread.

Some InferenceX rows do not say which of several recipe groups ran them (the same stated layout
run with and without MTP in one sweep, or by groups with other worker counts at the same client
count; `epsim.validate.silicon.resolve`), and nothing in the configuration tells them apart.
Under `--approximate` only, `mapping.plan_row` plans such a row as each candidate deployment;
this module predicts every candidate and reports the geometric mean of their TTFT and TPOT (a
ratio spread: MTP can halve TPOT, so the middle is taken on a log scale) as the row's
prediction, status "approximated", with `spread`: each candidate's figures and the min and max.
Such rows are never in the headline; the tables count them apart (`ambiguous`).
"""

from __future__ import annotations

import math

from epsim.validate.silicon.mapping import RowPlan
from epsim.validate.silicon.memo import Memo
from epsim.validate.silicon.run import predict

PREDICTED = ("predicted", "approximated")


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _label(plan: RowPlan) -> str:
    """A candidate as its plan's resolve line says it (`workers and layout from ...`, or
    with / without MTP)."""
    said = [a for a in plan.assumptions if a.startswith(("workers and layout", "with MTP",
                                                         "without MTP"))]
    return "; ".join(said) or plan.row.id


def predict_plan(plan: RowPlan, memo: Memo | None = None) -> dict:
    """`run.predict`, or `predict_candidates` for a plan of several candidates (`memo`: as
    `run.predict`'s)."""
    return predict_candidates(plan, memo) if plan.candidates else predict(plan, memo)


def predict_candidates(plan: RowPlan, memo: Memo | None = None) -> dict:
    """The entry of a row planned as several candidates (`plan.candidates`): each predicted
    (`run.predict`; a candidate that repeats another's instances takes its answer from `memo`),
    then `combine`d."""
    return combine(plan, [predict(candidate, memo) for candidate in plan.candidates])


def combine(plan: RowPlan, ran: list[dict]) -> dict:
    """The entry of a row from its candidates' entries (`ran`, in `plan.candidates`' order),
    in `run.predict`'s shape plus `spread` {"candidates": [{deployment, status, ttft_ms,
    tpot_ms}], "ttft_ms": [min, max], "tpot_ms": [min, max]}: status "approximated" with the
    geometric mean of the predicted candidates' TTFT and TPOT; "failed" when none predicts."""
    done = [entry for entry in ran if entry["status"] in PREDICTED]
    approximations = list(plan.approximations)
    for entry in ran:
        approximations += [a for a in entry["approximations"] if a not in approximations]
    entry = {"status": "approximated" if done else "failed", "ttft_ms": None, "tpot_ms": None,
             "shares": _mean_shares([e["shares"] for e in done]),
             "wall_s": round(sum(e["wall_s"] for e in ran), 3),
             "reasons": [] if done else sorted({r for e in ran for r in e["reasons"]}),
             "approximations": approximations, "assumptions": list(plan.assumptions),
             "reason_class": None, "missing": [],
             "notes": sorted({n for e in ran for n in e.get("notes", [])}),
             "spread": {"candidates": [
                 {"deployment": _label(candidate), "status": e["status"], "ttft_ms": e["ttft_ms"],
                  "tpot_ms": e["tpot_ms"]} for candidate, e in zip(plan.candidates, ran)]}}
    if done:
        for metric in ("ttft_ms", "tpot_ms"):
            values = [e[metric] for e in done]
            entry[metric] = geometric_mean(values)
            entry["spread"][metric] = [min(values), max(values)]
    return entry


def _mean_shares(shares: list[dict]) -> dict:
    """Per role, each provenance share averaged over the candidates that have it."""
    out: dict[str, dict[str, float]] = {}
    for role in sorted({role for one in shares for role in one}):
        kinds = [one[role] for one in shares if role in one]
        out[role] = {k: round(sum(kind[k] for kind in kinds if k in kind)
                              / sum(k in kind for kind in kinds), 4)
                     for k in sorted({k for kind in kinds for k in kind})}
    return out
