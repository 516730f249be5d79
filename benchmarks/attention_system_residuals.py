"""Residuals of the GQA attention kernels' system hold-out (`local+graph/attention_decode` or
`attention_prefill`): one system's records fitted (benchmarks/aic_holdout.py's system axis; the
same system twice: the in-sample fit), another's judged, the model's and the source system's own
measurement (the log-log baseline's value) against the judged one. Prints the mean absolute error
of both, the model's mean signed error (%) by context x sequences, by (query heads, KV heads), and
by where the judged call's KV bytes sit against the GPU's L2 (AIC replays one call in a CUDA
graph, so a KV cache that fits L2 stays there; `l2_band`):

    python benchmarks/attention_system_residuals.py --fit h200_sxm --judge h100_sxm
    python benchmarks/attention_system_residuals.py --fit b200_sxm --judge b200_sxm

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

from benchmarks.aic_holdout import records_of  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
from epsim.calibrate.inputs import merge_passes  # noqa: E402
from epsim.cost.flash import BYTES  # noqa: E402
from epsim.zoo import get_hardware  # noqa: E402

BANDS = ("< L2/2", "L2/2-L2", "L2-2 L2", ">= 2 L2")


def kv_bytes(record) -> float:
    """KV-cache bytes one call reads: sequences x context x KV heads x head_dim x (K, V) x BF16
    (decode: every cached key; prefill: its chunks' own keys)."""
    return (record.num_seqs * record.context_len * record.num_kv_heads * record.head_dim
            * 2.0 * BYTES)


def l2_band(num_bytes: float, l2_bytes: float) -> str:
    """Where `num_bytes` sit against an L2 of `l2_bytes`: one of `BANDS`."""
    if num_bytes < l2_bytes / 2:
        return BANDS[0]
    if num_bytes < l2_bytes:
        return BANDS[1]
    return BANDS[2] if num_bytes < 2 * l2_bytes else BANDS[3]


def mean_errors(cells: list[tuple[object, float, float]]) -> dict[object, tuple[int, float]]:
    """{key: (cells, mean signed error %)} of `cells` (key, measured µs, predicted µs)."""
    groups: dict[object, list[float]] = defaultdict(list)
    for key, measured, predicted in cells:
        groups[key].append(100.0 * (predicted / measured - 1.0))
    return {k: (len(v), sum(v) / len(v)) for k, v in sorted(groups.items())}


def main(argv=None) -> int:
    systems = [s for s, g in AIC_TO_ZOO.items() if g]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--fit", default="h200_sxm", choices=systems)
    parser.add_argument("--judge", default="h100_sxm", choices=systems)
    parser.add_argument("--kind", default="attention_decode",
                        choices=("attention_decode", "attention_prefill"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from epsim.cost.record import predict_record
    from epsim.calibrate.build import evaluation_profile, fit_records
    from epsim.calibrate.holdout import Holdout

    raw, files = records_of(args.fit)
    fit = [s for s in raw if s.record.kind == args.kind]
    profile = evaluation_profile(fit_records(fit, files, Holdout(), name="residuals").profile)
    key = lambda r: (r.num_attention_heads, r.num_kv_heads, r.num_seqs, r.context_len)  # noqa: E731
    source = {key(s.record): s.measured_us for s in merge_passes(fit)}
    judged = [s for s in merge_passes(records_of(args.judge)[0]) if s.record.kind == args.kind]
    l2 = get_hardware(AIC_TO_ZOO[args.judge]).l2_bytes
    cells = [(s.record, s.measured_us, float(predict_record(s.record, profile))) for s in judged]
    model = sum(abs(p / m - 1) for _, m, p in cells) / len(cells)
    same = [abs(source[key(r)] / m - 1) for r, m, _ in cells if key(r) in source]
    print(f"{args.kind}, fit {args.fit} -> judge {args.judge}: {len(cells)} records, model "
          f"{100 * model:.1f} %, {args.fit}'s own measurement {100 * sum(same) / len(same):.1f} %")
    grid = mean_errors([((r.context_len, r.num_seqs), m, p) for r, m, p in cells])
    seqs = sorted({n for _, n in grid})
    print("\nmean signed error %, context (rows) x sequences (columns)")
    print(f"{'':>8}" + "".join(f"{n:>7d}" for n in seqs))
    for ctx in sorted({c for c, _ in grid}):
        print(f"{ctx:>8d}" + "".join(f"{grid[ctx, n][1]:+7.0f}" if (ctx, n) in grid else f"{'.':>7}"
                                     for n in seqs))
    print("\nby (query heads, KV heads): cells, mean signed error %")
    for (h, kv), (n, e) in mean_errors([((r.num_attention_heads, r.num_kv_heads), m, p)
                                        for r, m, p in cells]).items():
        print(f"  ({h:3d}, {kv}) {n:4d} {e:+6.1f}")
    print(f"\nby KV bytes against the L2 ({l2 / 1e6:.0f} MB): cells, mean signed error %")
    for band, (n, e) in mean_errors([(BANDS.index(l2_band(kv_bytes(r), l2)), m, p)
                                     for r, m, p in cells]).items():
        print(f"  {BANDS[band]:>8s} {n:4d} {e:+6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
