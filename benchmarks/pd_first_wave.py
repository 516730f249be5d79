"""How much of a P/D row's predicted TTFT under load is the benchmark's first wave (issue 39).

    python benchmarks/pd_first_wave.py [--write]

The Dynamo P/D harness sends every client's first request at t = 0 into the idle pair and takes
the mean TTFT over 5 requests a client (docs/model.md, "What a benchmark run measures"); epsim's
prefill instance runs that run (`epsim.validate.silicon.run.closed_round`). This script predicts
a fixed set of P/D rows with this tree's code (`couple` on `plan_row(row, approximate=True)`'s
instances, as `epsim validate --silicon --approximate` does), keeps the prefill instance's last
round, and splits its requests' TTFT into the first wave (each simulated client's first request:
the earliest `clients` arrivals) and the rest. The rows, chosen by rule before any result was
seen: the record's P/D rows epsim predicts as stated at 128-512 clients on GB200, GB300 and B200,
one per (system, precision, ISL): the middle one by (clients, id).

Columns: epsim's TTFT and its prefill term; the prefill's mean TTFT over the first wave and over
the rest; the first wave's share of the prefill's mean; the rate at which epsim drains the first
wave (its prompt tokens over the time its last first token leaves, per prefill instance); and,
as a diagnosis only, the drain rate that would carry the measured TTFT if the whole gap were the
first wave's (the wave's mean wait grows by 5 x the gap, its drain by twice that). The measured
column is validation data: nothing here sets a constant.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "pd_first_wave.md"
SYSTEMS = ("gb200", "gb300", "b200_sxm")
CLIENTS = (128, 512)


def pick_rows(record_rows: list[dict]) -> list[str]:
    """The fixed set's ids (module doc)."""
    groups = defaultdict(list)
    for r in record_rows:
        if (r["mode"] == "disagg" and CLIENTS[0] <= r["concurrency"] <= CLIENTS[1]
                and r["system"] in SYSTEMS and r["epsim"]["status"] == "predicted"):
            groups[(r["system"], r["precision"], r["isl"])].append(r)
    return [sorted(rows, key=lambda r: (r["concurrency"], r["id"]))[len(rows) // 2]["id"]
            for _, rows in sorted(groups.items())]


def first_wave(row) -> dict:
    """The row's prediction with its prefill instance's last round split by wave (module doc)."""
    from epsim.sim import Simulation
    from epsim.validate.silicon import run
    from epsim.validate.silicon.mapping import plan_row

    captured = []
    plain_run, plain_extend = Simulation.run, Simulation.extend

    def keep(method):
        def wrapped(self, *args):
            result = method(self, *args)
            captured.append((self.scenario.deployment.disaggregation_mode, result))
            return result
        return wrapped

    Simulation.run, Simulation.extend = keep(plain_run), keep(plain_extend)
    try:
        plan = plan_row(row, approximate=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = run.couple(plan.instances, row.osl)
    finally:
        Simulation.run, Simulation.extend = plain_run, plain_extend
    prefill = plan.instances[0]
    result = [res for mode, res in captured if mode == "prefill"][-1]
    arrival, first = np.asarray(result.arrival_s), np.asarray(result.first_token_s)
    done = np.isfinite(first)
    order = np.argsort(arrival[done], kind="stable")
    ttft_ms = ((first - arrival)[done] * 1e3)[order]
    # the simulated instance's clients: the router's share of all of them (`closed_round`)
    instances = prefill.data["deployment"].get("num_instances", 1)
    clients = -(-(prefill.routed_clients or prefill.clients) // instances)
    wave, rest = ttft_ms[:clients], ttft_ms[clients:]
    wave_tokens = float(np.asarray(result.input_len)[done][order][:clients].sum())
    drain_s = float(first[done][order][:clients].max())
    return {"ttft_ms": out["ttft_ms"], "prefill_ms": out["ttft_terms"]["prefill_ms"],
            "wave_ms": float(wave.mean()), "rest_ms": float(rest.mean()) if len(rest) else None,
            "share": float(wave.sum() / ttft_ms.sum()), "clients": clients,
            "requests": len(ttft_ms), "wave_tokens": wave_tokens, "drain_s": drain_s}


def table(ids: list[str], record: dict[str, dict]) -> str:
    from epsim.validate.silicon.rows import default_csv_path, read_rows
    rows = {r.id: r for r in read_rows(default_csv_path()) if r.id in set(ids)}
    lines = ["| system | precision | ISL | prefill as run | clients | TTFT measured / epsim ms | "
             "epsim prefill term ms | prefill TTFT, first wave / rest ms | first wave's share | "
             "epsim drain k tok/s | drain that carries the measured k tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    shares = []
    for rid in ids:
        rec, row = record[rid], rows[rid]
        w = first_wave(row)
        per_client = w["requests"] / w["clients"]
        gap_ms = row.ttft_ms - w["ttft_ms"]
        wave_needed_ms = w["wave_ms"] + per_client * gap_ms     # the wave's mean wait
        drain_needed_s = w["drain_s"] * wave_needed_ms / w["wave_ms"]
        shares.append(w["share"])
        prefill = (rec.get("layout_as_run") or rec["layout"]).split(" / ")[0]
        lines.append(
            f"| {rec['system']} | {rec['precision']} | {rec['isl']} | {prefill} | "
            f"{rec['concurrency']} | {row.ttft_ms:,.0f} / {w['ttft_ms']:,.0f} | "
            f"{w['prefill_ms']:,.0f} | {w['wave_ms']:,.0f} / {w['rest_ms'] or 0:,.0f} | "
            f"{w['share']:.2f} | {w['wave_tokens'] / w['drain_s'] / 1e3:.1f} | "
            f"{w['wave_tokens'] / drain_needed_s / 1e3:.1f} |")
    lines.append(f"\nThe first wave's share of the prefill instance's mean TTFT: median "
                 f"{statistics.median(shares):.2f} over {len(shares)} rows.")
    return "\n".join(lines)


def report() -> str:
    """The table of the fixed set (module doc)."""
    record_rows = json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]
    return table(pick_rows(record_rows), {r["id"]: r for r in record_rows})


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "P/D rows under load: the first wave's part of "
                         "the TTFT", "python benchmarks/pd_first_wave.py --write", report)


if __name__ == "__main__":
    sys.exit(main())
