"""The GB200 FP8 wide-EP rows of the fork's 2025 script (Elnifio/dynamo `gb200-fp8.sh`,
`cutlass_mla`) and later-version controls, as a silicon CSV, and their errors from two
`epsim validate --silicon --json` runs side by side (docs/silicon.md, "What the fork's rows ran").

    python benchmarks/gb200_fork_rows.py --csv ROWS.csv               # write the rows
    python -m epsim.cli validate --silicon ROWS.csv --approximate --no-peer --workers 1 \\
        --json > AFTER.json                                            # (and BEFORE.json on main)
    python benchmarks/gb200_fork_rows.py --compare BEFORE.json AFTER.json

The rows are chosen from the whole-set record `benchmarks/results/silicon_rows.json.gz` by what
each row's recorded assumptions name (the fork's script; srt-slurm wide-EP recipes for the
controls, one row per ISL, clients and layout). Validation only: nothing here sets a constant.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.rows import default_csv_path  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
FORK = "Elnifio"               # the fork's script, as its assumption line names it


def group(row: dict) -> str:
    """The row's group: the fork's script by ISL, or a later-version control."""
    said = " ".join(row["epsim"].get("assumptions", []))
    if FORK in said:
        return "fork 8k/1k DEP24" if row["isl"] == 8192 else "fork 1k/1k DEP48"
    return "controls (srt-slurm, 0.5.8)"


def chosen(rows: list[dict]) -> list[str]:
    """Ids of the fork's rows and of the controls (GB200 FP8 P/D wide-EP srt-slurm rows)."""
    out, seen = [], set()
    for row in rows:
        said = " ".join(row["epsim"].get("assumptions", []))
        if FORK in said:
            out.append(row["id"])
        elif (row["system"], row["precision"], row["mode"]) == ("gb200", "fp8", "disagg") \
                and "srt-slurm" in said and "DEP" in said:
            key = (row["isl"], row["concurrency"], row["layout"])
            if key not in seen:
                seen.add(key)
                out.append(row["id"])
    return out


def write_csv(path: str, sample: str) -> int:
    rows = json.load(gzip.open(RECORD))["rows"]
    ids = set(chosen(rows))
    with open(sample) as f:
        reader = csv.DictReader(f)
        keep = [r for r in reader if r["id"] in ids]
        header = reader.fieldnames
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows(keep)
    return len(keep)


def _error(row: dict, kind: str) -> float | None:
    predicted = row["epsim"].get(kind)
    return None if predicted is None else 100.0 * (predicted / row["measured"][kind] - 1.0)


def compare(before: str, after: str) -> str:
    runs = [{r["id"]: r for r in json.load(open(p))["rows"]} for p in (before, after)]
    groups: dict[str, list[str]] = {}
    for rid, row in runs[0].items():
        groups.setdefault(group(row), []).append(rid)
    groups["all"] = list(runs[0])
    lines = ["| group | rows | TPOT MAPE before -> after | TTFT MAPE before -> after |",
             "|---|---|---|---|"]
    for name, ids in groups.items():
        cells = []
        for kind in ("tpot_ms", "ttft_ms"):
            mape = [statistics.mean(abs(e) for i in ids if i in run
                                    and (e := _error(run[i], kind)) is not None) for run in runs]
            cells.append(f"{mape[0]:.1f} -> {mape[1]:.1f} %")
        lines.append(f"| {name} | {len(ids)} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("--csv", help="write the rows' CSV here")
    parser.add_argument("--sample", help="the silicon sample CSV (default: aiconfigurator-core's)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.csv:
        print(write_csv(args.csv, args.sample or str(default_csv_path())), "rows")
    if args.compare:
        print(compare(*args.compare))


if __name__ == "__main__":
    main()
