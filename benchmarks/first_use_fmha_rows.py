"""The B200 runs without warm-up: epsim's TTFT and TPOT before and after the FlashInfer FMHA build
(`deployment.first_use_compile.kernel: flashinfer_cutlass_fmha`) and the b200-nvd runner's
`--num-prompts` (`agg_recipes.cold_requests_per_client`).

    python benchmarks/first_use_fmha_rows.py --csv CSV
    python -m epsim.cli validate --silicon CSV --approximate --no-peer --workers 1 --json > AFTER
    python benchmarks/first_use_fmha_rows.py --after AFTER [--write]

CSV: the silicon sample's InferenceX B200 agg rows measured before the warm-up landed
(2026-01-21), every client count, each run once (`silicon_ttft_gap.entries`: 52 rows). Before:
the whole-set record's entries of the same rows (`benchmarks/results/silicon_rows.json.gz`, made
by the code before the change). Per row: the
measured figures, both predictions, whether the plan carries the FMHA build and the run's
requests per client (the assumptions the row states); then MAPE by group. The silicon sample is
validation data: nothing here sets a constant; the build time is our nvcc measurement
(`benchmarks/first_use_nvcc_aot.py`).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "first_use_fmha_rows.md"
_PROMPTS = re.compile(r"--num-prompts (\d+)N \(b200-nvd")


def _ape(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else abs(predicted / measured - 1) * 100


def _mape(values: list) -> str:
    kept = [v for v in values if v is not None]
    return f"{sum(kept) / len(kept):.1f}" if kept else "-"


def priced_rows(after: dict, record: dict, extra) -> list[dict]:
    """One dict per row of `after` priced before and after: ids, figures, and `extra(entry,
    assumptions)` (a dict: what the plan states), sorted by deployment."""
    before = {e["id"]: e for e in record["rows"]}
    out = []
    for e in after["rows"]:
        b = before.get(e["id"])
        if b is None or e["epsim"]["status"] not in ("predicted", "approximated"):
            continue
        out.append({"id": e["id"], "precision": e["precision"], "layout": e["layout_as_run"],
                    "isl": e["isl"], "osl": e["osl"], "clients": e["concurrency"],
                    "ttft": e["measured"]["ttft_ms"], "tpot": e["measured"]["tpot_ms"],
                    "ttft_before": b["epsim"]["ttft_ms"], "ttft_after": e["epsim"]["ttft_ms"],
                    "tpot_before": b["epsim"]["tpot_ms"], "tpot_after": e["epsim"]["tpot_ms"],
                    **extra(e, " ".join(e["epsim"]["assumptions"]))})
    return sorted(out, key=lambda r: (r["precision"], r["layout"], r["isl"], r["osl"], r["clients"]))


def gap_summary(groups: dict[str, list[dict]]) -> list[str]:
    """The summary lines of `priced_rows` groups by name ("all" first): MAPE of both figures and
    the mean TTFT gap (measured less predicted), before and after."""
    summary = ["| rows | n | TTFT MAPE before % | after % | mean gap before ms | after ms | "
               "TPOT MAPE before % | after % |", "|---|---|---|---|---|---|---|---|"]
    for name in sorted(groups, key=lambda n: (n != "all", n)):
        g = groups[name]
        gap = lambda key: sum(r["ttft"] - r[key] for r in g) / len(g)
        summary.append(f"| {name} | {len(g)} | {_mape([_ape(r['ttft_before'], r['ttft']) for r in g])} "
                       f"| {_mape([_ape(r['ttft_after'], r['ttft']) for r in g])} "
                       f"| {gap('ttft_before'):.0f} | {gap('ttft_after'):.0f} "
                       f"| {_mape([_ape(r['tpot_before'], r['tpot']) for r in g])} "
                       f"| {_mape([_ape(r['tpot_after'], r['tpot']) for r in g])} |")
    return summary


def _fmha_fields(entry: dict, said: str) -> dict:
    prompts = _PROMPTS.search(said)
    return {"build": "first-use build" in said,
            "per_client": int(prompts.group(1)) if prompts else 10}


def rows(after: dict, record: dict) -> list[dict]:
    """One dict per row of `after` priced before and after: ids, figures, the plan's terms."""
    return priced_rows(after, record, _fmha_fields)


def table(found: list[dict]) -> str:
    lines = ["| row | layout | ISL/OSL | clients | FMHA build | requests / client | TTFT measured "
             "ms | before | after | TPOT measured ms | before | after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in found:
        lines.append(f"| {r['id']} | {r['layout']} | {r['isl']}/{r['osl']} | {r['clients']} | "
                     f"{'yes' if r['build'] else 'no'} | {r['per_client']} | {r['ttft']:.0f} | "
                     f"{r['ttft_before']:.0f} | {r['ttft_after']:.0f} | {r['tpot']:.1f} | "
                     f"{r['tpot_before']:.1f} | {r['tpot_after']:.1f} |")
    groups: dict[str, list[dict]] = {}
    for r in found:
        few = "1-16 clients" if r["clients"] <= 16 else "32-128 clients"
        for name in ("all", f"{r['precision']} ISL {r['isl']}", f"{r['precision']} {few}"):
            groups.setdefault(name, []).append(r)
    summary = ["| rows | n | TTFT MAPE before % | after % | TPOT MAPE before % | after % |",
               "|---|---|---|---|---|---|"]
    for name in sorted(groups, key=lambda n: (n != "all", n)):
        g = groups[name]
        summary.append(f"| {name} | {len(g)} | {_mape([_ape(r['ttft_before'], r['ttft']) for r in g])} "
                       f"| {_mape([_ape(r['ttft_after'], r['ttft']) for r in g])} "
                       f"| {_mape([_ape(r['tpot_before'], r['tpot']) for r in g])} "
                       f"| {_mape([_ape(r['tpot_after'], r['tpot']) for r in g])} |")
    return "\n".join(summary) + "\n\n" + "\n".join(lines)


def write_csv(path: Path) -> int:
    """The cold B200 agg rows of the sample (module doc) as a silicon CSV; how many."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT))
    from silicon_ttft_gap import entries

    from epsim.validate.silicon.rows import default_csv_path
    ids = {e["id"] for e in entries() if e["system"] == "b200_sxm"
           and e["harness"].startswith("InferenceX one node, no warm-up")}
    return write_ids_csv(path, ids, default_csv_path())


def write_ids_csv(path: Path, ids: set, sample: Path) -> int:
    """The rows of the silicon sample `sample` whose id is in `ids`, as a CSV at `path`; how many."""
    with sample.open(newline="") as f, path.open("w", newline="") as out:
        reader = csv.DictReader(f)
        writer = csv.DictWriter(out, fieldnames=reader.fieldnames)
        writer.writeheader()
        kept = [row for row in reader if row["id"] in ids]
        writer.writerows(kept)
    return len(kept)


def compare_main(argv, doc: str, write_rows_csv, body, results: Path, heading: str) -> int:
    """A before/after script's command line (module doc): `--csv` writes the rows
    (`write_rows_csv(path)`: how many); `--after` reads the validate JSON and prints `heading` and
    `body(after, record)`, recorded in `results` with `--write`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--after", type=Path)
    parser.add_argument("--csv", type=Path, help="write the rows to compare here, and stop")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    if args.csv is not None:
        print(f"{write_rows_csv(args.csv)} rows -> {args.csv}")
        return 0
    if args.after is None:
        print("--after (none) must name the validate --json output; or give --csv", file=sys.stderr)
        return 2
    if not args.after.is_file():
        print(f"--after ({args.after}) must be a file", file=sys.stderr)
        return 2
    after = json.loads(args.after.read_text())
    text = heading + body(after, json.loads(gzip.decompress(RECORD.read_bytes()))) + "\n"
    if args.write:
        results.write_text(text)
    print(text)
    return 0


def main(argv=None) -> int:
    heading = ("# The B200 runs without warm-up: the FlashInfer FMHA build and the runner's prompts\n\n"
               "`python benchmarks/first_use_fmha_rows.py --after AFTER --write`, AFTER from `epsim "
               "validate --silicon CSV --approximate --no-peer --workers 1 --json` on the CSV of "
               "`--csv` (the InferenceX B200 agg rows measured before 2026-01-21; what is compared: "
               "the script's docstring).\n\n")
    return compare_main(argv, __doc__, write_csv, lambda after, record: table(rows(after, record)),
                        RESULTS, heading)


if __name__ == "__main__":
    raise SystemExit(main())
