"""Residuals of the dense GEMMs' shape hold-out (`local+graph/gemm <format>`): each format's
records fitted but the largest shape's (16384 x 16384; benchmarks/aic_holdout.py's shape split),
the judged records' model and log-log errors by rows (M), and every record's in-sample error
(the judged shape's left out) binned by the call's measured length, where the collector's burst
(`epsim.cost.collector_burst`) shows as a drift with length:

    python benchmarks/gemm_shape_residuals.py --systems h100_sxm b200_sxm --formats bf16 fp8

Records: runs/aic/<system>_sglang_<version>.jsonl.gz (as benchmarks/aic_holdout.py reads them).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import records_of, split_shape  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402

LENGTH_EDGES_MS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, np.inf)


def by_length(cells: list[tuple[float, float]], edges_ms=LENGTH_EDGES_MS) -> list[tuple[float, int, float]]:
    """[(bin's upper edge ms, cells, median signed error %)] of `cells` (measured ms,
    predicted / measured - 1), empty bins left out."""
    out = []
    for lo, hi in zip(edges_ms[:-1], edges_ms[1:]):
        errors = [e for ms, e in cells if lo <= ms < hi]
        if errors:
            out.append((hi, len(errors), 100.0 * float(np.median(errors))))
    return out


def main(argv=None) -> int:
    systems = [s for s, g in AIC_TO_ZOO.items() if g]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--systems", nargs="+", default=["h100_sxm"], choices=systems)
    parser.add_argument("--formats", nargs="+", default=["bf16", "fp8", "fp8_block", "nvfp4"])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from epsim.calibrate.build import evaluation_profile, fit_records
    from epsim.calibrate.holdout import Holdout
    from epsim.calibrate.inputs import merge_passes
    from epsim.cost.record import predict_record
    from epsim.validate.extrapolation import _key, _x, loglog

    for system in args.systems:
        raw, files = records_of(system)
        for fmt in args.formats:
            gemms = [s for s in raw if s.record.kind == "gemm" and s.record.weight_dtype == fmt]
            if not gemms:
                continue
            fit, judged = split_shape(gemms)
            profile = evaluation_profile(fit_records(fit, files, Holdout(), name="residuals").profile)
            pools: dict[str, list[tuple[float, float]]] = {}
            for s in merge_passes(fit):
                pools.setdefault(_key(s.record, "shape"), []).append((_x(s.record, "shape"), s.measured_us))
            print(f"## {system} gemm {fmt}\n\n| rows (M) | measured µs | model µs | model % | log-log % |")
            print("|---:|---:|---:|---:|---:|")
            model, base = [], []
            for s in sorted(merge_passes(judged), key=lambda s: s.record.num_tokens_per_rank):
                r = s.record
                predicted = float(predict_record(r, profile))
                ll = loglog(pools[_key(r, "shape")], _x(r, "shape"))
                model.append(abs(predicted / s.measured_us - 1))
                base.append(abs(ll / s.measured_us - 1))
                print(f"| {r.num_tokens_per_rank} | {s.measured_us:.1f} | {predicted:.1f} | "
                      f"{100 * (predicted / s.measured_us - 1):+.1f} | {100 * (ll / s.measured_us - 1):+.1f} |")
            print(f"\nMAPE: model {100 * np.mean(model):.1f} %, log-log {100 * np.mean(base):.1f} %")
            cells = [(s.measured_us * 1e-3, float(predict_record(s.record, profile)) / s.measured_us - 1)
                     for s in merge_passes(fit)]
            print("in-sample by call length (ms, cells, median %): "
                  + ", ".join(f"<{hi:g}: {n}, {e:+.1f}" for hi, n, e in by_length(cells)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
