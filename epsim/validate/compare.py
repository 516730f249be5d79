"""Predicted against measured for every record a cost model predicts.

A row per record: what was measured (kind, backend, shape, dtype, skew, tokens per rank, the
median), what the profile predicts for the record's own counts (`epsim.cost.predict_record`:
the simulator's formulas), the signed error, whether the record was in the fit set or held
out (the hold-out protocol), and whether it lies outside the fitted range of its component.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from epsim.calibrate.build import evaluation_profile
from epsim.calibrate.holdout import Holdout
from epsim.calibrate.inputs import RecordWarning, SourcedRecord
from epsim.cost.record import PREDICTABLE_KINDS, predict_record, record_kind
from epsim.errors import EpsimError
from epsim.profile import ExtrapolationWarning, Profile, component_keys, is_graph


@dataclass(frozen=True)
class Comparison:
    """One record, predicted and measured.

    Attributes:
        error_pct: (predicted - measured) / measured * 100, signed.
        split: "fit" or "holdout".
        outside: the record lies outside a fitted component's valid range (an extrapolation).
    """

    where: str
    kind: str
    backend: str
    model: str
    hidden_size: int
    dispatch_dtype: str
    skew: str
    tokens: int
    measured_us: float
    predicted_us: float
    split: str
    outside: bool
    p10_us: float
    p90_us: float

    @property
    def error_pct(self) -> float:
        return (self.predicted_us - self.measured_us) / self.measured_us * 100.0

    @property
    def ape(self) -> float:
        return abs(self.error_pct)


def skew_label(skew: dict) -> str:
    """`uniform`, `zipf:1`, `hotset:16:0.5` (the CLI's short form)."""
    kind = skew.get("kind", "uniform")
    if kind == "zipf":
        return f"zipf:{skew.get('alpha', 0):g}"
    if kind == "hotset":
        return f"hotset:{skew.get('num_hot')}:{skew.get('hot_frac', 0):g}"
    return kind


def _outside(record, profile: Profile) -> bool:
    """Whether any fitted component the prediction uses was fitted on another data range."""
    keys = component_keys(record) if record.kind != "moe_layer" else [
        k for kind in ("dispatch", "combine", "experts")
        for k in component_keys(record.model_copy(update={"kind": kind}))]
    for key in keys:
        comp = profile.components.get(key)
        if comp is None or comp.source != "fit":
            continue
        if comp.outside(**{name: getattr(record, name, None) for name in comp.valid_range}):
            return True
        break                # the most specific fitted component is the one used
    return False


def compare(records: list[SourcedRecord], profile: Profile, holdout: Holdout) -> list[Comparison]:
    """Comparisons of every record of a predictable kind (others are left out).

    A record the models cannot predict (missing counts) is skipped with a RecordWarning
    naming its file and line; records outside a fitted range raise one ExtrapolationWarning.
    """
    evaluable = evaluation_profile(profile)
    out, outside = [], []
    for s in records:
        r = s.record
        if (record_kind(r) not in PREDICTABLE_KINDS
                or getattr(r, "timing", "") in ("host", "eager")):
            continue              # a single-GPU kernel's host or eager timing: not a prediction
        try:
            predicted = predict_record(r, evaluable)
        except EpsimError as exc:
            warnings.warn(f"{s.where}: {exc} -- not judged", RecordWarning, stacklevel=2)
            continue
        is_outside = _outside(r, profile)
        if is_outside:
            outside.append(s.where)
        out.append(Comparison(
            where=s.where, kind=record_kind(r), model=r.model or f"H{r.hidden_size}",
            backend=r.backend + ("+graph" if is_graph(r) else ""),
            hidden_size=r.hidden_size, dispatch_dtype=r.dispatch_dtype or "native",
            skew=skew_label(r.skew), tokens=r.num_tokens_per_rank, measured_us=s.measured_us,
            predicted_us=float(predicted), split="holdout" if holdout.held_out(r) else "fit",
            outside=is_outside, p10_us=r.p10_us, p90_us=r.p90_us))
    if outside:
        warnings.warn(f"profile {profile.name or profile.path}: {len(outside)} records lie outside "
                      f"the fitted range of their component (first: {outside[0]}) -- "
                      f"extrapolating", ExtrapolationWarning, stacklevel=2)
    return out
