"""Fit of `any/rebalance_host`: the host work of a rebalance, one line per timed implementation.

Each `rebalance_term` record (`live.bench.eplb_host`) times one implementation on one shape
(CPU time of one thread) and counts its work in the loops it runs (`extra.work`, `extra.work2`:
`epsim.eplb.host_terms.WORK_UNIT`, e.g. layers x slots and layers x slots x packs for a greedy
placement). Per implementation:

    t_us = <key>_base_us + <key>_us_per_unit x work + <key>_us_per_unit2 x work2

by non-negative least squares on the relative error (each point weighted by 1 / t). The line
is judged on held-out sizes: each distinct size predicted from the others, against a constant
(their mean) and log-log interpolation between the nearest two (`residuals.heldout_*_mape`).

    python -m epsim.calibrate.rebalance_host RECORDS.jsonl --profile PROFILE.json

refits that component of a profile in place (written atomically), leaving the others, and
updates the profile's provenance for the records file (its sha256 and count, the combined
`records_sha256` over every listed file, the device).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from epsim.calibrate.inputs import SourcedRecord, load_records
from epsim.calibrate.in_place import missing_file, put_component
from epsim.profile import Component


def impl_key(record) -> str:
    """Parameter stem of a record's implementation (`extra.key`, as the bench names it)."""
    return str(record.extra["key"])


def _time_us(s: SourcedRecord) -> float:
    return float(s.record.extra.get("uncontended_us", s.measured_us))


def fit_line(work: np.ndarray, time_us: np.ndarray) -> np.ndarray:
    """[base_us, us_per_unit, us_per_unit2] >= 0 minimising the relative error.

    Args:
        work: [points, 2] the two work counts; time_us: [points].
    """
    from scipy.optimize import nnls
    design = np.column_stack([np.ones(len(time_us)), work])
    # the intercept with three sizes or more; the second count where it varies
    used = np.array([len(set(map(tuple, work.tolist()))) >= 3, True, np.ptp(work[:, 1]) > 0])
    coef = np.zeros(3)
    weighted = design[:, used] / time_us[:, None]
    coef[used], _ = nnls(weighted, np.ones(len(time_us)))
    return coef


def _loglog(work: np.ndarray, time_us: np.ndarray, at: float) -> float:
    """Log-log interpolation (or extrapolation) in the first work count through the two sizes
    nearest `at`."""
    order = np.argsort(np.abs(np.log(work) - np.log(at)))[:2]
    (w0, w1), (t0, t1) = work[order], time_us[order]
    if w0 == w1:
        return float(t0)
    slope = np.log(t1 / t0) / np.log(w1 / w0)
    return float(t0 * (at / w0) ** slope)


def heldout(work: np.ndarray, time_us: np.ndarray) -> dict[str, list[float]] | None:
    """Absolute percentage errors of each distinct shape predicted from the others: the fitted
    line, a constant (their mean) and log-log interpolation; None with fewer than four shapes.

    Args:
        work: [points, 2]; time_us: [points].
    """
    shapes = sorted(set(map(tuple, work.tolist())))
    if len(shapes) < 4:
        return None
    errors: dict[str, list[float]] = {"line": [], "constant": [], "loglog": []}
    for shape in shapes:
        out = np.all(work == shape, axis=1)
        keep = ~out
        coef = fit_line(work[keep], time_us[keep])
        target = float(np.mean(time_us[out]))
        line = coef[0] + coef[1] * shape[0] + coef[2] * shape[1]
        for name, value in (("line", line), ("constant", float(np.mean(time_us[keep]))),
                            ("loglog", _loglog(work[keep, 0], time_us[keep], shape[0]))):
            errors[name].append(abs(value - target) / target * 100.0)
    return errors


def fit_rebalance_host(records: list[SourcedRecord]) -> Component | None:
    """`any/rebalance_host` from `rebalance_term` host records; None without any."""
    groups: dict[str, list[SourcedRecord]] = {}
    for s in records:
        r = s.record
        if r.kind != "rebalance_term" or r.timing == "device" or "key" not in r.extra:
            continue
        groups.setdefault(impl_key(r), []).append(s)
    if not groups:
        return None
    params, apes, ranges = {}, [], {}
    held: dict[str, list[float]] = {"line": [], "constant": [], "loglog": []}
    for key, members in sorted(groups.items()):
        work = np.array([[float(s.record.extra["work"]), float(s.record.extra.get("work2", 0.0))]
                         for s in members])
        time_us = np.array([_time_us(s) for s in members])
        coef = fit_line(work, time_us)
        params[f"{key}_base_us"], params[f"{key}_us_per_unit"] = float(coef[0]), float(coef[1])
        if coef[2] > 0:
            params[f"{key}_us_per_unit2"] = float(coef[2])
        fitted = coef[0] + work @ coef[1:]
        apes += (np.abs(fitted - time_us) / time_us * 100.0).tolist()
        ranges[f"{key}_work"] = [float(work[:, 0].min()), float(work[:, 0].max())]
        for name, errs in (heldout(work, time_us) or {}).items():
            held[name] += errs
    machines = sorted({s.record.provenance.device for m in groups.values() for s in m})
    residuals = {"mape": round(float(np.mean(apes)), 3), "max_ape": round(float(np.max(apes)), 3),
                 "num_records": float(sum(len(m) for m in groups.values()))}
    for name, errs in held.items():
        if errs:
            residuals[f"heldout_{name}_mape"] = round(float(np.mean(errs)), 3)
    return Component(params=params, source="fit", residuals=residuals, valid_range=ranges,
                     note="host CPU time of a rebalance's terms, one thread, measured on "
                          + "; ".join(machines) + " (live.bench.eplb_host)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m epsim.calibrate.rebalance_host",
                                     description="refit any/rebalance_host of a profile in place")
    parser.add_argument("records", type=Path)
    parser.add_argument("--profile", type=Path, required=True)
    args = parser.parse_args(argv)
    if missing_file(args.records, args.profile):
        return 2
    raw, _ = load_records([args.records])
    component = fit_rebalance_host(raw)
    if component is None:
        print(f"records ({args.records}) hold no rebalance_term host records", file=sys.stderr)
        return 2
    put_component(args.profile, "any/rebalance_host", component, {args.records: len(raw)},
                  sorted({s.record.provenance.device for s in raw}))
    print(json.dumps(component.residuals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
