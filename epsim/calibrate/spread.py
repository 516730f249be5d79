"""Spread of a fitted component: how far a measurement falls from its prediction, by cause.

Stored per component as `spread` (log standard deviations, `epsim.cost.timing.band_ratios`
turns them into a p10/p90 band around every prediction):
  pass_log_sd  pass to pass on one machine: `live.bench.sweep` sweeps its grid several times in
               shuffled orders; the log deviation of each pass's median from their mean
  run_log_sd   run to run: a configuration measured in two record files (two machines or VM
               instances); `rms(log(a/b)) / sqrt(2)`, the deviation of one run (None if no
               configuration repeats across files)
  fit_log_sd, log_bias   the fit's residuals, `log(measured / predicted)` on its records
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from epsim.calibrate.inputs import SourcedRecord, config_key


def pass_log_sd(records: list[SourcedRecord]) -> float | None:
    """Pooled log deviation of the passes' medians around their mean (merged records)."""
    devs, dof = [], 0
    for s in records:
        passes = s.record.extra.get("pass_medians_us")
        if not passes or len(passes) < 2:
            continue
        logs = np.log(np.asarray(passes, dtype=np.float64))
        devs.append(((logs - logs.mean()) ** 2).sum())
        dof += len(passes) - 1
    return float(np.sqrt(sum(devs) / dof)) if dof else None


def run_deviations(raw: list[SourcedRecord]) -> dict[str, float]:
    """config key -> log(first file's mean median / second file's), for configurations measured
    in two or more record files (unmerged records)."""
    by_config: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s in raw:
        by_config[config_key(s.record)][s.path].append(s.measured_us)
    out = {}
    for key, files in by_config.items():
        if len(files) >= 2:
            a, b = (float(np.mean(v)) for v in list(files.values())[:2])
            out[key] = float(np.log(a / b))
    return out


def component_spread(records: list[SourcedRecord], predicted: np.ndarray, measured: np.ndarray,
                     run_devs: dict[str, float]) -> dict[str, float]:
    """`spread` of a component fitted on `records` (merged) with these predictions."""
    logs = np.log(measured / predicted)
    out = {"fit_log_sd": round(float(logs.std()), 4), "log_bias": round(float(logs.mean()), 4)}
    passes = pass_log_sd(records)
    if passes is not None:
        out["pass_log_sd"] = round(passes, 4)
    devs = [run_devs[k] for k in {config_key(s.record) for s in records} if k in run_devs]
    if devs:
        out["run_log_sd"] = round(float(np.sqrt(np.mean(np.square(devs)) / 2.0)), 4)
    return out
