"""The server's tokenisation (`deployment.server_tokenize`, `epsim.cost.tokenize`) on the silicon
rows: epsim's TTFT and TPOT before (the whole-set record, `benchmarks/results/silicon_rows.json.gz`,
main's code) and after (this branch's `epsim validate --silicon`), at 1-8 clients and on a fixed
sample at 16-64 clients. Validation data: nothing here sets a constant; the term's price is an
op-level measurement (`benchmarks/server_tokenize.py`).

    python benchmarks/server_tokenize_rows.py --select DIR          # DIR/few.csv, DIR/mid.csv
    epsim validate --silicon DIR/few.csv --approximate --no-peer --workers 1 --json > DIR/few.json
    epsim validate --silicon DIR/mid.csv --approximate --no-peer --workers 1 --json > DIR/mid.json
    python benchmarks/server_tokenize_rows.py --after DIR [--before MAIN_DIR] [--write]

`--before MAIN_DIR`: main's code run on the same CSVs (its few.json and mid.json), for a
bit-identical before; without it, the whole-set record's entries of the same rows.

Rows, chosen by rule before any result: every InferenceX row (the harness that posts text, the
only rows that carry the term) the record prices (predicted or approximated) at 1-8 clients; at
16-64 clients every k-th of the predicted InferenceX rows in id order, 30 of them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

from recorded import write_recorded

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.mapping import INFERENCEX_SOURCE  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path  # noqa: E402

RECORD = ROOT / "benchmarks/results/silicon_rows.json.gz"
OUT = ROOT / "benchmarks/results/server_tokenize_rows.md"
MID_ROWS = 30


def _record() -> list[dict]:
    return json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]


def select(out: Path) -> None:
    """Write the two CSVs (module doc) under `out`."""
    import pandas as pd
    sample = pd.read_csv(default_csv_path())
    harness = {i for i, s in zip(sample["id"], sample["silicon_data_source"])
               if INFERENCEX_SOURCE.match(s)}
    rows = [r for r in _record() if r["id"] in harness]
    few = {r["id"] for r in rows if r["concurrency"] <= 8
           and r["epsim"]["status"] in ("predicted", "approximated")}
    mid = sorted({r["id"] for r in rows if 16 <= r["concurrency"] <= 64
                  and r["epsim"]["status"] == "predicted"})
    mid = set(mid[::max(1, len(mid) // MID_ROWS)][:MID_ROWS])
    out.mkdir(parents=True, exist_ok=True)
    sample[sample["id"].isin(few)].to_csv(out / "few.csv", index=False)
    sample[sample["id"].isin(mid)].to_csv(out / "mid.csv", index=False)
    print(f"{len(few)} rows at 1-8 clients, {len(mid)} at 16-64 -> {out}")


def _pairs(after_path: Path, before_path: Path | None = None) -> list[dict]:
    """(before, after) of every row both price, keyed by id."""
    rows = _record() if before_path is None else json.loads(before_path.read_text())["rows"]
    before = {r["id"]: r for r in rows}
    out = []
    for r in json.loads(after_path.read_text())["rows"]:
        b = before.get(r["id"])
        if b is None or b["epsim"]["status"] not in ("predicted", "approximated") \
                or r["epsim"]["status"] not in ("predicted", "approximated"):
            continue
        cold = any("without warm-up" in line for line in r["epsim"].get("assumptions", []))
        out.append({"id": r["id"], "mode": r["mode"], "cold": cold, "isl": r["isl"], "clients": r["concurrency"],
                    "status": b["epsim"]["status"], "measured": r["measured"]["ttft_ms"],
                    "tpot_measured": r["measured"]["tpot_ms"],
                    "before": b["epsim"]["ttft_ms"], "after": r["epsim"]["ttft_ms"],
                    "tpot_before": b["epsim"]["tpot_ms"], "tpot_after": r["epsim"]["tpot_ms"]})
    return out


def _mape(pred: list[float], meas: list[float]) -> float:
    return 100 * statistics.fmean(abs(p - m) / m for p, m in zip(pred, meas))


def _signed(pred: list[float], meas: list[float]) -> float:
    return 100 * statistics.fmean((p - m) / m for p, m in zip(pred, meas))


def _line(name: str, rows: list[dict]) -> str:
    meas = [r["measured"] for r in rows]
    before, after = [r["before"] for r in rows], [r["after"] for r in rows]
    gap_b = statistics.median(m - p for m, p in zip(meas, before))
    gap_a = statistics.median(m - p for m, p in zip(meas, after))
    moved = statistics.median(a - b for a, b in zip(after, before))
    tpm = [r["tpot_measured"] for r in rows]
    return (f"| {name} | {len(rows)} | {_mape(before, meas):.1f} -> {_mape(after, meas):.1f} | "
            f"{_signed(before, meas):+.1f} -> {_signed(after, meas):+.1f} | "
            f"{gap_b:.0f} -> {gap_a:.0f} | {moved:+.1f} | "
            f"{_mape([r['tpot_before'] for r in rows], tpm):.1f} -> "
            f"{_mape([r['tpot_after'] for r in rows], tpm):.1f} |")


def table(rows: list[dict], title: str) -> str:
    head = (f"**{title}**\n\n| rows | n | TTFT MAPE % | TTFT signed mean % | gap median ms "
            "(measured - predicted) | TTFT moved, median ms | TPOT MAPE % |\n"
            "|---|---|---|---|---|---|---|")
    lines = [head, _line("all", rows)]
    for mode in ("agg", "disagg"):
        for isl in sorted({r["isl"] for r in rows if r["mode"] == mode}):
            group = [r for r in rows if r["mode"] == mode and r["isl"] == isl]
            if group:
                lines.append(_line(f"{mode}, ISL {isl}", group))
    return "\n".join(lines)


def make(after: Path, before: Path | None = None) -> str:
    few = _pairs(after / "few.json", None if before is None else before / "few.json")
    mid = _pairs(after / "mid.json", None if before is None else before / "mid.json")
    said = ("the whole-set record's entries" if before is None else
            "main's code (`--before MAIN_DIR`) on the same CSVs")
    return "\n\n".join([
        f"Before: {said}. After: this branch's `epsim validate --silicon DIR/{{few,mid}}.csv "
        "--approximate --no-peer --workers 1 --json`.",
        table(few, "1-8 clients (InferenceX rows the record prices)"),
        table([r for r in few if not r["cold"]], "1-8 clients, warmed runs only (less the "
              "November 2025 runs with no warm-up, `agg_recipes.cold_start_note`)"),
        table(mid, f"16-64 clients (every k-th predicted InferenceX row, {MID_ROWS})")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--select", type=Path, help="write few.csv and mid.csv here")
    parser.add_argument("--after", type=Path, help="read few.json and mid.json from here")
    parser.add_argument("--before", type=Path, help="main's few.json and mid.json (else the record)")
    parser.add_argument("--write", action="store_true", help=f"record in {OUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.select is None and args.after is None:
        parser.error("--select DIR or --after DIR")
    if args.select is not None:
        select(args.select)
    if args.after is not None:
        for name in ("few.json", "mid.json"):
            if not (args.after / name).is_file():
                print(f"--after: no {name} in {args.after}", file=sys.stderr)
                return 2
        started = time.perf_counter()
        body = make(args.after, args.before)
        print(body)
        if args.write:
            write_recorded(OUT, "The server's tokenisation on the silicon rows",
                           "python benchmarks/server_tokenize_rows.py --after DIR "
                           + ("--before MAIN_DIR " if args.before else "") + "--write",
                           started, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
