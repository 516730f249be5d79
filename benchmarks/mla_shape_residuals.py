"""Per-point residuals of the shape hold-out of MLA's decode kernel or its BMMs
(`local+graph/mla_decode`, `local+graph/mla_bmm`) on one system: benchmarks/aic_holdout.py's
shape split (fit every head count but the largest, judge 128 heads a GPU; the MLA prefill fitted
beside the decode, whose tensor rate it holds), each judged record with its sequences and context
(decode) or tokens and op (BMM), measured and predicted µs and error, then the mean absolute and
signed error of the cells under and over `SMALL_US` (Blackwell's tables time in ~2 µs steps):

    python benchmarks/mla_shape_residuals.py --system b200_sxm --kind mla_decode

Records: runs/aic/<system>_sglang_<version>.jsonl.gz (as benchmarks/aic_holdout.py reads them).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import records_of, split_shape  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
from epsim.validate.extrapolation import judge  # noqa: E402

SMALL_US = 30.0          # cells measured under this: a few of the tables' ~2 µs timing steps


def size_groups(cells: list[tuple[str, float, float]]) -> dict[tuple[str, str], tuple[int, float, float]]:
    """{(format, "small" | "large"): (cells, mean |error| %, mean error %)} of `cells`
    (format, measured µs, predicted µs), split at `SMALL_US` measured."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fmt, measured, predicted in cells:
        groups[fmt, "small" if measured < SMALL_US else "large"].append(100.0 * (predicted / measured - 1.0))
    return {k: (len(v), sum(map(abs, v)) / len(v), sum(v) / len(v)) for k, v in sorted(groups.items())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--system", default="b200_sxm", choices=[s for s, g in AIC_TO_ZOO.items() if g])
    parser.add_argument("--kind", default="mla_decode", choices=("mla_decode", "mla_bmm"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    raw, files = records_of(args.system)
    held = ("mla_prefill",) if args.kind == "mla_decode" else ()
    fit, judged = split_shape([s for s in raw if s.record.kind in (args.kind, *held)])
    judged = [s for s in judged if s.record.kind == args.kind]
    where = {s.where: s.record for s in judged}
    cells = []
    print("component, heads, sequences x context (decode) or tokens and op (BMM), measured and predicted µs, error")
    for g in judge("shape", fit, judged, files, pair=AIC_TO_ZOO[args.system]):
        r = where[g.where]
        what = (f"{r.num_seqs:5d} x {r.context_len:6d}" if args.kind == "mla_decode"
                else f"{r.num_tokens_per_rank:6d} {r.extra.get('op', '')}")
        fmt = g.component.split(" ", 1)[1] if " " in g.component else g.component
        cells.append((fmt, g.measured_us, g.predicted_us))
        print(f"{g.component:34s} h{r.num_attention_heads:<4d} {what:18s} {g.measured_us:9.1f} "
              f"{g.predicted_us:9.1f} {100 * (g.predicted_us / g.measured_us - 1):+7.1f} %")
    for (fmt, size), (n, mape, bias) in size_groups(cells).items():
        bound = f"< {SMALL_US:.0f}" if size == "small" else f">= {SMALL_US:.0f}"
        print(f"{fmt:10s} {size} ({bound} µs measured): {n} cells, MAPE {mape:.1f} %, mean {bias:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
