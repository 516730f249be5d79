"""Residuals of the shipped AIC profile by call length, per single-GPU compute kind: does a
kernel's rate fall with how long one call runs (a power-limited clock in the collector's burst
of ~12 back-to-back calls), or only the BF16 fused MoE's?

    python benchmarks/long_call_residuals.py --system b200_sxm

Each row: kind and weight format, call-length bin (measured µs), records, median of
predicted / measured - 1. The shipped profile is fitted on every size, the long calls included,
so a slowdown with call length shows muted, as a drift from short to long bins.
Records: runs/aic/<system>_sglang_<version>.jsonl.gz (as benchmarks/aic_holdout.py reads them).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import records_of  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
from epsim.cost.record import predict_record  # noqa: E402
from epsim.profile import Profile  # noqa: E402

KINDS = ("attention_prefill", "mla_prefill", "gemm", "dense_mlp", "experts", "quant_experts")
BIN_EDGES_US = (0.0, 1000.0, 3000.0, 8000.0, 20000.0, float("inf"))
PROFILES = {"h100_sxm": "aic_h100", "h200_sxm": "aic_h200", "b200_sxm": "aic_b200",
            "b300_sxm": "aic_b300", "gb200": "aic_gb200", "gb300": "aic_gb300"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--system", default="b200_sxm",
                        choices=[s for s, g in AIC_TO_ZOO.items() if g and s in PROFILES])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    raw, _ = records_of(args.system)
    profile = Profile.load(ROOT / "epsim" / "data" / "profiles" / f"{PROFILES[args.system]}.json")
    errors = defaultdict(list)
    for s in raw:
        r = s.record
        if r.kind not in KINDS or r.backend != "local":
            continue
        try:
            predicted_us = predict_record(r, profile)
        except Exception:           # a record the shipped profile does not price: not binned
            continue
        b = int(np.searchsorted(BIN_EDGES_US, r.median_us, side="right")) - 1
        errors[(r.kind, r.weight_dtype or "-", b)].append(predicted_us / r.median_us - 1.0)
    print(f"{args.system}: kind, format, call length (µs), records, median predicted/measured - 1")
    for (kind, fmt, b), v in sorted(errors.items()):
        lo, hi = BIN_EDGES_US[b], BIN_EDGES_US[b + 1]
        span = f"{lo:.0f}+" if hi == float("inf") else f"{lo:.0f}-{hi:.0f}"
        print(f"  {kind:18s} {fmt:10s} {span:>11s} {len(v):5d} {100 * np.median(v):+7.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
