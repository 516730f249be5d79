"""Run-to-run and pass-to-pass spread of measurement records, per component and timing.

    python scripts/record_spread.py RUN1.jsonl[.gz] RUN2.jsonl[.gz] [--by-backend]

Configurations are matched across the two files by everything that identifies them (kind,
timing, sizes, tokens, skew, counts: `epsim.calibrate.inputs.config_key`). Per configuration:

- run-to-run: |a - b| / mean(a, b) of the two runs' times, each run's time being the mean of its
  passes' medians (`merge_passes`, what the fit uses);
- pass-to-pass: |first pass - second pass| / mean within each run (both runs pooled);
- within-point: (p90 - p10) / median over one point's iterations.

Each line gives the median and the 90th percentile over configurations, in percent. `experts`
is also split by tokens per rank (<= 64, 128..1024, >= 2048): small batches sit on fixed costs
that move between machines, large ones on bandwidth and FLOP/s. `--by-backend` splits every
row by the record's backend too (`deepep/dispatch/-`), as docs/live.md quotes the two-H200
machines of issue 18.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from epsim.calibrate.inputs import config_key, load_records, merge_passes

TOKEN_BANDS = ((0, 64, "<=64"), (128, 1024, "128-1024"), (2048, 1 << 30, ">=2048"))


def _groups(record, by_backend: bool = False) -> list[str]:
    """The table rows a record counts in: its component (with its backend if `by_backend`),
    and for experts its token band."""
    base = f"{record.kind}/{record.timing or '-'}"
    if by_backend:
        base = f"{record.backend}/{base}"
    out = [base]
    if record.kind == "experts":
        out += [f"{base} tokens {name}" for low, high, name in TOKEN_BANDS
                if low <= record.num_tokens_per_rank <= high]
    return out


def _rel_pct(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2) * 100.0


def spread(paths: list[Path], by_backend: bool = False) -> dict[str, dict[str, list[float]]]:
    """{row: {"run": [...], "pass": [...], "point": [...]}} relative differences in percent."""
    if len(paths) != 2:
        raise SystemExit("record_spread: give exactly two record files (run 1, run 2)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [load_records([p])[0] for p in paths]
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    merged = []
    for items in runs:
        by_key = defaultdict(list)
        for item in items:
            by_key[config_key(item.record)].append(item.record)
            for row in _groups(item.record, by_backend):
                r = item.record
                out[row]["point"].append((r.p90_us - r.p10_us) / r.median_us * 100.0)
        for members in by_key.values():
            if len(members) >= 2:                # the first two passes (of two or three)
                for row in _groups(members[0], by_backend):
                    out[row]["pass"].append(_rel_pct(members[0].median_us, members[1].median_us))
        merged.append({config_key(s.record): s for s in merge_passes(items)})
    for key, first in merged[0].items():
        second = merged[1].get(key)
        if second is not None:                 # measured_us: the mean of the passes' medians
            for row in _groups(first.record, by_backend):
                out[row]["run"].append(_rel_pct(first.measured_us, second.measured_us))
    return out


def table(rows: dict[str, dict[str, list[float]]]) -> str:
    lines = ["| component / timing | configs | run-to-run median % | p90 % | pass-to-pass median % "
             "| p90 % | within-point p10-p90 median % |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for row in sorted(rows):
        r = rows[row]
        run, pas, point = (np.asarray(r[k]) for k in ("run", "pass", "point"))

        def q(values, pct):
            return f"{np.percentile(values, pct):.1f}" if values.size else "-"
        lines.append(f"| {row} | {run.size} | {q(run, 50)} | {q(run, 90)} | {q(pas, 50)} | "
                     f"{q(pas, 90)} | {q(point, 50)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    parser.add_argument("records", nargs=2, type=Path)
    parser.add_argument("--by-backend", action="store_true",
                        help="one row per backend and component (records of several backends)")
    args = parser.parse_args(argv)
    print(table(spread(args.records, args.by_backend)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
