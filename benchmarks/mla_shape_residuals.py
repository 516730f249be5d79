"""Per-point residuals of a hold-out of MLA's kernels, their BMMs or the GQA decode kernel
(`local+graph/mla_decode`, `mla_prefill`, `mla_bmm`, `attention_decode`) on one system:
benchmarks/aic_holdout.py's shape split (fit every head count but the largest, judge 128 heads a
GPU), its tokens split (`--axis tokens`: fit <= 1024 tokens a rank, judge 2048-16384) or its
system pair (`--fit SYSTEM`: fit that system's records, judge `--system`'s), the MLA prefill
fitted beside the decode (whose tensor rate it holds); each judged record with its heads (KV
heads), sequences and context, or tokens and op (BMM), measured and predicted µs and error,
then the mean absolute and signed error of the cells under and over `SMALL_US`, and how many of
the cells under it sit on the replay grid (`on_grid`):

    python benchmarks/mla_shape_residuals.py --system b200_sxm --kind mla_decode
    python benchmarks/mla_shape_residuals.py --system h200_sxm --kind mla_prefill --axis tokens
    python benchmarks/mla_shape_residuals.py --system gb200 --fit b200_sxm --kind mla_bmm

Records: runs/aic/<system>_sglang_<version>.jsonl.gz (as benchmarks/aic_holdout.py reads them).
"""

from __future__ import annotations

import argparse
import cmath
import sys
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.aic_holdout import records_of, split_shape, split_tokens_but_allreduce  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
from epsim.validate.extrapolation import judge  # noqa: E402

SMALL_US = 30.0          # cells measured under this: a few of the tables' ~2 µs timing steps
# Blackwell's tables of one-call replays (`helper.benchmark_with_power` with `repeat_n` 1: the
# MLA, BMM and attention collectors) time a call as k x 2.048 µs plus a few tenths: every such
# table of B200, B300, GB200 and GB300 (cells under 40 µs) is phase-coherent at 2.045-2.057 µs
# (0.7-0.9 of a unit circle's length), whether it averages 10 replays (`collect_mla_bmm.py`) or
# 20 (`collect_mla.py`), so it is each replay's duration, not the timer's resolution over the
# window; Hopper's tables and the GEMMs' (6 copies a replay) show none (0.1-0.4)
TIMING_STEP_US = 2.048
ON_GRID_FRAC = 0.1       # a cell within this share of a step of the grid sits on it


def size_groups(cells: list[tuple[str, float, float]]) -> dict[tuple[str, str], tuple[int, float, float]]:
    """{(format, "small" | "large"): (cells, mean |error| %, mean error %)} of `cells`
    (format, measured µs, predicted µs), split at `SMALL_US` measured."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fmt, measured, predicted in cells:
        groups[fmt, "small" if measured < SMALL_US else "large"].append(100.0 * (predicted / measured - 1.0))
    return {k: (len(v), sum(map(abs, v)) / len(v), sum(v) / len(v)) for k, v in sorted(groups.items())}


def on_grid(measured_us: list[float], offset_us: float) -> int:
    """How many of `measured_us` lie within `ON_GRID_FRAC` of a step of the grid
    `offset_us + k TIMING_STEP_US`."""
    phase = [((m - offset_us) / TIMING_STEP_US) % 1.0 for m in measured_us]
    return sum(min(p, 1.0 - p) <= ON_GRID_FRAC for p in phase)


def grid_offset(measured_us: list[float]) -> float:
    """The grid's offset, µs in [0, `TIMING_STEP_US`): the circular mean of `measured_us`'s
    phases at the step."""
    z = sum(cmath.exp(2j * cmath.pi * m / TIMING_STEP_US) for m in measured_us)
    return (cmath.phase(z) / (2 * cmath.pi) * TIMING_STEP_US) % TIMING_STEP_US


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--system", default="b200_sxm", choices=[s for s, g in AIC_TO_ZOO.items() if g])
    parser.add_argument("--kind", default="mla_decode",
                        choices=("mla_decode", "mla_bmm", "mla_prefill", "attention_decode"))
    parser.add_argument("--axis", default="shape", choices=("shape", "tokens"))
    parser.add_argument("--fit", choices=[s for s, g in AIC_TO_ZOO.items() if g],
                        help="the system axis: fit this system's records, judge --system's")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    kinds = (args.kind, "mla_prefill") if args.kind == "mla_decode" else (args.kind,)
    raw, files = records_of(args.system)
    raw = [s for s in raw if s.record.kind in kinds]
    if args.fit:
        axis, pair = "system", f"{AIC_TO_ZOO[args.fit]} -> {AIC_TO_ZOO[args.system]}"
        fit_raw, files = records_of(args.fit)
        fit, judged = [s for s in fit_raw if s.record.kind in kinds], raw
    else:
        axis, pair = args.axis, AIC_TO_ZOO[args.system]
        fit, judged = (split_shape if axis == "shape" else split_tokens_but_allreduce)(raw)
    judged = [s for s in judged if s.record.kind == args.kind]
    where = {s.where: s.record for s in judged}
    cells = []
    print("component, heads (KV heads), sequences x context or tokens and op (BMM), measured and "
          "predicted µs, error")
    for g in judge(axis, fit, judged, files, pair=pair):
        r = where[g.where]
        what = (f"{r.num_tokens_per_rank:6d} {r.extra.get('op', '')}" if args.kind == "mla_bmm"
                else f"{r.num_seqs:5d} x {r.context_len:6d}")
        kv = f"kv{r.num_kv_heads}" if args.kind == "attention_decode" else ""
        fmt = g.component.split(" ", 1)[1] if " " in g.component else g.component
        cells.append((fmt, g.measured_us, g.predicted_us))
        print(f"{g.component:34s} h{r.num_attention_heads:<4d}{kv:5s} {what:18s} "
              f"{g.measured_us:9.1f} {g.predicted_us:9.1f} "
              f"{100 * (g.predicted_us / g.measured_us - 1):+7.1f} %")
    for (fmt, size), (n, mape, bias) in size_groups(cells).items():
        bound = f"< {SMALL_US:.0f}" if size == "small" else f">= {SMALL_US:.0f}"
        print(f"{fmt:10s} {size} ({bound} µs measured): {n} cells, MAPE {mape:.1f} %, mean {bias:+.1f} %")
    small = [m for _, m, _ in cells if m < SMALL_US]
    if small:
        offset = grid_offset(small)
        print(f"cells under {SMALL_US:.0f} µs within {ON_GRID_FRAC} of a {TIMING_STEP_US} µs step "
              f"of the grid (offset {offset:.2f} µs): {on_grid(small, offset)} of {len(small)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
