"""The Blackwell NVFP4 silicon rows whose fused experts ran at EP > 1, before and after a change
to their pricing: the whole-set record's predictions (main's code when it was recorded) against
this checkout's, on TPOT and TTFT (validation only: nothing here feeds a fit).

    python benchmarks/nvfp4_ep_rows.py [--out benchmarks/results/nvfp4_ep_rows.csv]

Rows: those the record priced with a note that `any/experts_nvfp4` ran outside its fitted EP
range, spread over each (system, layout) by client count, at most `PER_LAYOUT` of each of
`LAYOUTS` (GB200 / GB300 FP4 P/D with DEP4 prefills, B200 FP4 agg TP4/EP4 and TP8/EP8, B200
P/D), 23 rows. Runs `epsim validate --silicon ... --approximate --no-peer --workers 1 --json`
on them (a few minutes) and writes one CSV row each plus a summary by (system, mode).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
NOTE = "any/experts_nvfp4: ep_size"
# (system, layout) -> rows taken, spread over the client counts
LAYOUTS = {("gb200", "P tp1 dp4 moe_tp1 ep4 x4 / D tp1 dp32 moe_tp1 ep32"): 4,
           ("gb200", "P tp4 dp1 moe_tp1 ep4 / D tp32 dp1 moe_tp8 ep4"): 2,
           ("gb300", "P tp1 dp4 moe_tp1 ep4 x4 / D tp1 dp32 moe_tp1 ep32"): 2,
           ("gb300", "P tp4 dp1 moe_tp1 ep4 / D tp48 dp1 moe_tp12 ep4"): 1,
           ("b200_sxm", "tp4 dp1 moe_tp1 ep4"): 5, ("b200_sxm", "tp8 dp1 moe_tp1 ep8"): 5,
           ("b200_sxm", "P tp1 dp4 moe_tp1 ep4 / D tp8 dp1 moe_tp1 ep8"): 2,
           ("b200_sxm", "P tp4 dp1 moe_tp1 ep4 / D tp8 dp1 moe_tp2 ep4"): 2}
METRICS = ("tpot_ms", "ttft_ms")


def chosen(rows: list[dict]) -> list[dict]:
    """The record's rows of `LAYOUTS` with the NVFP4 EP note, evenly over client counts."""
    groups = defaultdict(list)
    for r in rows:
        key = (r["bucket"]["system"], r["layout"])
        if key in LAYOUTS and any(NOTE in n for n in (r.get("epsim") or {}).get("notes", [])):
            groups[key].append(r)
    out = []
    for key, group in groups.items():
        group.sort(key=lambda r: r["concurrency"])
        n = LAYOUTS[key]
        picks = sorted({round(j * (len(group) - 1) / max(n - 1, 1)) for j in range(n)}) \
            if len(group) > n else range(len(group))
        out += [group[j] for j in picks]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/nvfp4_ep_rows.csv"))
    args = parser.parse_args(argv)
    import aiconfigurator_core    # the silicon sample ships with it
    import pandas as pd
    record = json.load(gzip.open(RECORD, "rt"))
    rows = chosen(record["rows"])
    sample = pd.read_csv(Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv")
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "rows.csv"
        sample[sample["id"].isin({r["id"] for r in rows})].to_csv(csv_path, index=False)
        run = subprocess.run([sys.executable, "-m", "epsim.cli", "validate", "--silicon",
                              str(csv_path), "--approximate", "--no-peer", "--workers", "1",
                              "--json"], capture_output=True, text=True, cwd=ROOT, check=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = {r["id"]: r["epsim"] for r in json.loads(run.stdout)["rows"]}
    errors = defaultdict(list)
    with open(args.out, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "system", "mode", "layout", "concurrency",
                      *[f"{w}_{m}" for m in METRICS for w in ("measured", "before", "after")]])
        for r in rows:
            e = after[r["id"]]
            values = []
            for m in METRICS:
                measured, before, now = r["measured"][m], r["epsim"].get(m), e.get(m)
                values += [round(measured, 4), before, now]
                if measured and before and now:
                    errors[(r["bucket"]["system"], r["mode"], m)].append(
                        (before / measured - 1, now / measured - 1))
            out.writerow([r["id"], r["bucket"]["system"], r["mode"], r["layout"],
                          r["concurrency"], *values])
    print(f"{len(rows)} rows -> {args.out}")
    print("| system | mode | metric | rows | MAPE % before | after | median bias % before | after |")
    print("|---|---|---|---|---|---|---|---|")
    for (system, mode, m), v in sorted(errors.items()):
        v = np.array(v) * 100
        print(f"| {system} | {mode} | {m} | {len(v)} | {np.abs(v[:, 0]).mean():.1f} | "
              f"{np.abs(v[:, 1]).mean():.1f} | {np.median(v[:, 0]):+.1f} | {np.median(v[:, 1]):+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
