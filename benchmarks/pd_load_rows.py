"""A fixed set of P/D rows under load (128+ clients), predicted by this tree's code beside the
whole-set record's prediction and the measured run: what a change to the P/D path does to their
TTFT and TPOT (issue 39).

    python benchmarks/pd_load_rows.py [--json OUT.json] [--write]

The rows (`pick_rows`), chosen by rule before any result was seen: the record's disaggregated
rows at 128 clients or more that epsim predicts, on GB200, GB300 and B200; grouped by (system,
precision, ISL), each group sorted by (clients, id) and 3 rows taken evenly spaced from it (4
in the GB200 / GB300 FP4 groups, the saturated-prefill series): 40 rows. This tree's code runs
them as the brief says (`epsim validate --silicon ROWS.csv --approximate --no-peer --workers 1
--json`; `--json` reads a run already made instead); "record" is
`benchmarks/results/silicon_rows.json.gz` (main's code, which gives the same bits on this CSV).
Error = predicted / measured - 1, %; the rows are validation data: nothing here sets a constant.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from recorded import write_recorded

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "pd_load_rows.md"
SYSTEMS = ("gb200", "gb300", "b200_sxm")
MIN_CLIENTS = 128
PER_GROUP = 3                  # rows a (system, precision, ISL) group gives; FP4 GB*: one more


def pick_rows(record_rows: list[dict]) -> list[str]:
    """The fixed set's ids (module doc), from the record's rows."""
    groups = defaultdict(list)
    for r in record_rows:
        if (r["mode"] == "disagg" and r["concurrency"] >= MIN_CLIENTS and r["system"] in SYSTEMS
                and r["epsim"]["status"] == "predicted"):
            groups[(r["system"], r["precision"], r["isl"])].append(r)
    ids = []
    for key in sorted(groups):
        rows = sorted(groups[key], key=lambda r: (r["concurrency"], r["id"]))
        n = PER_GROUP + (key[0] in ("gb200", "gb300") and key[1] == "fp4")
        ids += [rows[i]["id"] for i in sorted(set(np.linspace(0, len(rows) - 1, n).round().astype(int)))]
    return ids


def run_rows(ids: list[str]) -> dict:
    """This tree's `validate --json` of rows `ids` (the silicon sample's lines, one run)."""
    from epsim.validate.silicon.rows import default_csv_path
    lines = Path(default_csv_path()).read_text().splitlines()
    wanted = set(ids)
    keep = [lines[0]] + [ln for ln in lines[1:] if ln.split(",", 1)[0] in wanted]
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "rows.csv"
        csv.write_text("\n".join(keep) + "\n")
        out = subprocess.run([sys.executable, "-m", "epsim.cli", "validate", "--silicon", str(csv),
                              "--approximate", "--no-peer", "--workers", "1", "--json"],
                             cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _err(pred: float | None, meas: float) -> float | None:
    return None if pred is None else 100 * (pred / meas - 1)


def table(tree_rows: list[dict], record: dict[str, dict]) -> str:
    lines = ["| system | precision | ISL | prefill as run | clients | measured TTFT / TPOT ms | record "
             "TTFT / TPOT err % | this tree TTFT / TPOT err % |", "|---|---|---|---|---|---|---|---|"]
    errs = defaultdict(list)      # (bucket, which) -> [(ttft, tpot)]
    for r in sorted(tree_rows, key=lambda r: (r["system"], r["precision"], r["isl"], r["concurrency"])):
        m, old, new = r["measured"], record[r["id"]]["epsim"], r["epsim"]
        e_old = (_err(old.get("ttft_ms"), m["ttft_ms"]), _err(old.get("tpot_ms"), m["tpot_ms"]))
        e_new = (_err(new.get("ttft_ms"), m["ttft_ms"]), _err(new.get("tpot_ms"), m["tpot_ms"]))
        prefill = (r.get("layout_as_run") or r["layout"]).split(" / ")[0] + " "
        bucket = "attention-TP prefill" if " dp1 " in prefill else "DP-attention prefill"
        for which, e in (("record", e_old), ("tree", e_new)):
            errs[(bucket, which)].append(e)
            errs[("all", which)].append(e)
        lines.append(f"| {r['system']} | {r['precision']} | {r['isl']} | {prefill.strip()} | "
                     f"{r['concurrency']} | {m['ttft_ms']:,.0f} / {m['tpot_ms']:.1f} | "
                     f"{e_old[0]:+.0f} / {e_old[1]:+.1f} | {e_new[0]:+.0f} / {e_new[1]:+.1f} |")
    lines += ["", "| rows | n | TTFT MAPE %, record -> tree | TTFT ratio median | TPOT MAPE %, "
              "record -> tree |", "|---|---|---|---|---|"]
    for bucket in ("all", "DP-attention prefill", "attention-TP prefill"):
        old, new = errs[(bucket, "record")], errs[(bucket, "tree")]
        if not old:
            continue

        def mape(es, j):
            return statistics.fmean(abs(e[j]) for e in es)

        def ratio(es):
            return statistics.median(1 + e[0] / 100 for e in es)
        lines.append(f"| {bucket} | {len(old)} | {mape(old, 0):.1f} -> {mape(new, 0):.1f} | "
                     f"{ratio(old):.2f} -> {ratio(new):.2f} | {mape(old, 1):.1f} -> {mape(new, 1):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--json", type=Path, help="a validate --json run of the rows to read")
    parser.add_argument("--write", action="store_true", help=f"record {RESULTS.name}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    record_rows = json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]
    ids = pick_rows(record_rows)
    run = json.loads(args.json.read_text()) if args.json else run_rows(ids)
    tree = run["rows"]
    missing = set(ids) - {r["id"] for r in tree}
    if missing:
        print(f"--json ({args.json}) lacks {len(missing)} of the rows, e.g. {sorted(missing)[0]}",
              file=sys.stderr)
        return 2
    body = (f"This tree's validate run of the {len(ids)} rows: {run['wall_s']:.0f} s (its wall_s, "
            f"--workers 1).\n\n"
            + table([r for r in tree if r["id"] in set(ids)], {r["id"]: r for r in record_rows}))
    print(body)
    if args.write:
        write_recorded(RESULTS, "P/D rows under load: this tree against the record",
                       "python benchmarks/pd_load_rows.py --write", started, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
