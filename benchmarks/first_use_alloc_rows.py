"""The warmed B200 runs: epsim's TTFT and TPOT before and after the paged KV allocator's first-use
compiles (`deployment.first_use_compile.kernel: sglang_paged_alloc`, `epsim.sim.first_use_alloc`).

    python benchmarks/first_use_alloc_rows.py --csv CSV
    python -m epsim.cli validate --silicon CSV --approximate --no-peer --workers 1 --json > AFTER
    python benchmarks/first_use_alloc_rows.py --after AFTER [--write]

CSV: the silicon sample's InferenceX B200 DeepSeek-R1 SGLang 0.5.9 agg rows measured in March 2026
(after the harness's warm-up landed) at up to 128 clients, less the FP8 rows at OSL 8192 (the
slowest to simulate: this project's 2-core VM), 39 rows. Before: the whole-set record's entries of
the same rows (`benchmarks/results/silicon_rows.json.gz`, made by the code before the change).
Per row: the measured figures, both predictions, whether the plan carries the term (not the rows
only the MTP twin's sweep ran: their EAGLE path was not scanned); then MAPE by group. The silicon
sample is validation data: nothing here sets a constant; the compile times are our Triton 3.5.1
sm100 measurement (`benchmarks/first_use_alloc_aot.py`).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from first_use_fmha_rows import compare_main, gap_summary, priced_rows, write_ids_csv

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "first_use_alloc_rows.md"
MAX_CLIENTS = 128


def selected(entry: dict) -> bool:
    """A whole-set record entry of the compared rows (module doc)."""
    return (entry["system"] == "b200_sxm" and entry["mode"] == "agg"
            and entry["id"].startswith("2026_03") and entry["version"] == "0.5.9"
            and entry["concurrency"] <= MAX_CLIENTS
            and not (entry["gemm_quant_mode"] == "fp8" and entry["osl"] == 8192))


def _term(entry: dict, said: str) -> dict:
    # an MTP-ambiguous row: both candidates carry it (its assumptions are theirs)
    return {"term": "paged KV allocator" in said or any(
        a.startswith("deployment ambiguous") for a in entry["epsim"]["approximations"])}


def rows(after: dict, record: dict) -> list[dict]:
    """One dict per row of `after` priced before and after: ids, figures, the plan's term."""
    return priced_rows(after, record, _term)


def table(found: list[dict]) -> str:
    lines = ["| row | layout | ISL/OSL | clients | term | TTFT measured ms | before | after | "
             "TPOT measured ms | before | after |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in found:
        lines.append(f"| {r['id']} | {r['layout']} | {r['isl']}/{r['osl']} | {r['clients']} | "
                     f"{'yes' if r['term'] else 'no'} | {r['ttft']:.0f} | {r['ttft_before']:.0f} | "
                     f"{r['ttft_after']:.0f} | {r['tpot']:.1f} | {r['tpot_before']:.1f} | "
                     f"{r['tpot_after']:.1f} |")
    groups: dict[str, list[dict]] = {}
    for r in found:
        few = "4-8 clients" if r["clients"] <= 8 else "16-128 clients"
        for name in ("all", f"{r['precision']} {few}", f"carries the term, {few}"
                     if r["term"] else f"no term, {few}"):
            groups.setdefault(name, []).append(r)
    return "\n".join(gap_summary(groups)) + "\n\n" + "\n".join(lines)


def write_csv(path: Path) -> int:
    """The compared rows (module doc) as a silicon CSV; how many."""
    sys.path.insert(0, str(ROOT))
    from epsim.validate.silicon.rows import default_csv_path
    ids = {e["id"] for e in json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]
           if selected(e)}
    return write_ids_csv(path, ids, default_csv_path())


def main(argv=None) -> int:
    heading = ("# The warmed B200 runs: the paged KV allocator's first-use compiles\n\n"
               "`python benchmarks/first_use_alloc_rows.py --after AFTER --write`, AFTER from `epsim "
               "validate --silicon CSV --approximate --no-peer --workers 1 --json` on the CSV of "
               "`--csv` (what is compared: the script's docstring).\n\n")
    return compare_main(argv, __doc__, write_csv, lambda after, record: table(rows(after, record)),
                        RESULTS, heading)


if __name__ == "__main__":
    raise SystemExit(main())
