"""The tokens and EP hold-outs of the block-FP8 experts (`quant_experts`, weight_dtype
fp8_block: the fused kernel and DeepEP's MoE runner) on one system, per component, with each
judged row's error: `benchmarks/aic_holdout.py`'s splits and `judge` on the fp8_block records
alone (each component is fitted on its own records, so its rows are the full run's), in
minutes instead of a full run's quarter hour a system.

    python benchmarks/fp8_block_experts_holdout.py h200_sxm [tokens,ep] [-v] [--cache DIR]
"""

from __future__ import annotations

import argparse
import pickle
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import (quant_moe_pending, records_of, split_ep_tp,  # noqa: E402
                                    split_shape)
from epsim.validate.extrapolation import judge, split_tokens  # noqa: E402


def fp8_block_records(system: str, cache: Path | None):
    """(records, files, pending) of the system's fp8_block experts, read once into `cache`."""
    path = cache / f"{system}.pkl" if cache else None
    if path and path.is_file():
        return pickle.loads(path.read_bytes())
    raw, files = records_of(system)
    raw = [s for s in raw if s.record.kind == "quant_experts"
           and s.record.weight_dtype == "fp8_block"]
    pending = [s for s in quant_moe_pending(system) if s.record.weight_dtype == "fp8_block"]
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps((raw, files, pending)))
    return raw, files, pending


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("system")
    parser.add_argument("axes", nargs="?", default="tokens,ep")
    parser.add_argument("-v", action="store_true", help="every judged row")
    parser.add_argument("--cache", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    raw, files, pending = fp8_block_records(args.system, args.cache)
    splits = {"tokens": split_tokens(raw), "shape": split_shape(raw)}
    splits.update(split_ep_tp(raw, pending))
    for axis in args.axes.split(","):
        fit, judged = splits[axis]
        by = defaultdict(list)
        for row in judge(axis, fit, judged, files, pair=args.system):
            by[row.component].append(row)
        for component, rows in sorted(by.items()):
            err = np.array([(r.predicted_us - r.measured_us) / r.measured_us for r in rows])
            print(f"{axis} {component} n={len(rows)} MAPE {100 * np.abs(err).mean():.1f} % "
                  f"(bias {100 * err.mean():+.1f} %)")
            if args.v:
                for r, e in sorted(zip(rows, err), key=lambda x: x[0].where):
                    print(f"   {r.where[-48:]:48s} T={r.tokens:6d} measured {r.measured_us:9.1f} "
                          f"priced {r.predicted_us:9.1f} {100 * e:+6.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
