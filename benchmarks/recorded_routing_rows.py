"""The silicon rows before and after epsim prices DeepSeek's routing with SGLang's recorded expert
loads (issue 39): a validation comparison, which fits and chooses nothing (the recording each
row replays is fixed by the nearest recorded lengths, `epsim.routing.recorded`).

    python benchmarks/recorded_routing_rows.py subset {h200_agg_tp8,gb200_wide_ep} OUT.csv
    python benchmarks/recorded_routing_rows.py compare --pair BEFORE AFTER LABEL [--pair ...] [--write]

`subset` writes the silicon sample's CSV (aiconfigurator-core's) cut to 24 rows of a family,
drawn with seed 7 from those the whole-set record (`benchmarks/results/silicon_rows.json.gz`)
predicts: `h200_agg_tp8` -- H200 aggregated DeepSeek rows run at TP 8 with MoE-TP 8 (EP 1);
`gb200_wide_ep` -- GB200 disaggregated DeepSeek rows whose decode runs DP attention with EP >= 16
(DeepEP). Run `epsim validate --silicon OUT.csv --workers 1 --out DIR --json > DIR/rows.json`.

The 48-row sample: `epsim validate --silicon --sample 48 --seed 7 --workers 1 --doc COPY.md
--out DIR --json > DIR/rows.json`, against the same on main; the 24-row families against the
whole-set record (main's predictions, `--approximate`; none of these rows is approximated).

`compare` reads each pair of `--json` outputs (or `silicon_rows.json.gz` records) and prints, per
bucket (system, mode, DeepSeek V3/R1 or Qwen3, EP; at EP > 8 also how a side's experts were placed:
from the recorded loads as a wide-EP script's static placement does, from the loads because
redundant experts need a placement the spec can express (their runs placed them trivially), or
trivially) on the rows
both predict, TPOT and TTFT MAPE and the mean signed
error (predicted / measured - 1) before -> after; `--write` records it in
benchmarks/results/recorded_routing_rows.md.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import random
import re
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recorded import write_recorded  # noqa: E402

from epsim.validate.silicon.rows import default_csv_path  # noqa: E402

WHOLE_SET = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULT = ROOT / "benchmarks" / "results" / "recorded_routing_rows.md"
NUM_ROWS, SEED = 24, 7
DECODE_EP = re.compile(r"D tp1 dp(\d+) moe_tp1 ep(\d+)")


def _rows(path: str | Path) -> list[dict]:
    path = Path(path)
    data = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())
    return data["rows"]


def _family(row: dict, family: str) -> bool:
    if not row["epsim"].get("tpot_ms") or not row["model"].startswith("DeepSeek"):
        return False
    if family == "h200_agg_tp8":
        return (row["system"], row["mode"], row["layout_as_run"]) == (
            "h200_sxm", "agg", "tp8 dp1 moe_tp8 ep1")
    wide = DECODE_EP.search(row["layout_as_run"])
    return row["system"] == "gb200" and row["mode"] == "disagg" and bool(wide) and \
        int(wide.group(2)) >= 16


def subset(family: str, out: Path) -> None:
    ids = sorted(r["id"] for r in _rows(WHOLE_SET) if _family(r, family))
    chosen = set(random.Random(SEED).sample(ids, min(NUM_ROWS, len(ids))))
    with open(default_csv_path(), newline="") as fh:
        reader = csv.DictReader(fh)
        kept = [line for line in reader if line["id"] in chosen]
        fields = reader.fieldnames
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(kept)
    print(f"{out}: {len(kept)} of {len(ids)} {family} rows")


def _errors(rows: list[dict]) -> dict[str, dict[str, float]]:
    """id -> {metric: predicted / measured - 1}."""
    out = {}
    for r in rows:
        e, m = r["epsim"], r["measured"]
        if e.get("tpot_ms") and e.get("ttft_ms"):
            out[r["id"]] = {k: e[k] / m[k] - 1.0 for k in ("tpot_ms", "ttft_ms")}
    return out


def compare(before: str, after: str, label: str) -> str:
    rows_after = _rows(after)
    old, new = _errors(_rows(before)), _errors(rows_after)
    buckets = defaultdict(list)
    for r in rows_after:
        if r["id"] in old and r["id"] in new:
            b = r["bucket"]
            family = "Qwen3" if b["model"].startswith("Qwen") else "DeepSeek"
            name = f"{r['system']} {r['mode']} {family} {b['ep']}"
            if b["ep"] == "EP >8":      # the wide-EP sides' placement (`mapping._plan` says it)
                said = " ".join(r["epsim"]["assumptions"])
                name += (", script's placement from the loads" if "script's static placement" in said
                         else ", redundant experts placed from the loads" if "its redundant experts"
                         in said else ", trivial placement")
            buckets[name].append(r["id"])
    buckets["all"] = [i for ids in list(buckets.values()) for i in ids]
    lines = [f"### {label}", "",
             "| bucket | rows | TPOT MAPE % | TPOT mean signed % | TTFT MAPE % | "
             "TTFT mean signed % |", "|---|---|---|---|---|---|"]

    def stat(ids, errs, metric, signed):
        vals = [errs[i][metric] for i in ids]
        return 100 * sum(vals if signed else map(abs, vals)) / len(vals)

    for name in sorted(buckets, key=lambda n: (n == "all", n)):
        ids = buckets[name]
        cells = [f"{stat(ids, old, m, s):+.1f} -> {stat(ids, new, m, s):+.1f}" if s else
                 f"{stat(ids, old, m, s):.1f} -> {stat(ids, new, m, s):.1f}"
                 for m in ("tpot_ms", "ttft_ms") for s in (False, True)]
        lines.append(f"| {name} | {len(ids)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("subset")
    s.add_argument("family", choices=("h200_agg_tp8", "gb200_wide_ep"))
    s.add_argument("out", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("--pair", nargs=3, action="append", required=True,
                   metavar=("BEFORE", "AFTER", "LABEL"))
    c.add_argument("--write", action="store_true", help=f"record {RESULT.name}")
    args = parser.parse_args(argv)
    if args.cmd == "subset":
        subset(args.family, args.out)
        return 0
    started = time.perf_counter()
    body = "\n\n".join(compare(*pair) for pair in args.pair)
    print(body)
    if args.write:
        command = "python benchmarks/recorded_routing_rows.py compare " + " ".join(
            f"--pair {b} {a} {shlex.quote(label)}" for b, a, label in args.pair) + " --write"
        write_recorded(RESULT, "Silicon rows before -> after recorded routing", command, started,
                       body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
