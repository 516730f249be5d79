"""SGLang's overlap loop on the InferenceX aggregated rows: epsim's TTFT and TPOT with the batch
formed a step ahead (`epsim.sim.recv.forms_ahead`, as `epsim validate --silicon` predicts now)
and without it (each batch formed as its step starts, epsim before the change).

    python benchmarks/agg_overlap_rows.py [--write]

The rows, fixed before either prediction was compared: the one-node InferenceX DeepSeek-R1
agg runs of SGLang 0.5.9-0.5.10 on H200, B200 and B300 at 4, 16 and 64 clients that the
whole-set record `benchmarks/results/silicon_rows.json.gz` predicts as stated without an MTP
draft, one per system, precision, ISL/OSL, layout and client count (54). Each is predicted by
`epsim.validate.silicon.run.predict` with the approximate mapping, once as is and once with
`forms_ahead` off for the run (the only difference). The silicon sample is validation data:
nothing here sets a constant; the loop's order is read from SGLang's source
(`Scheduler.event_loop_overlap`). Ratio = predicted / measured; MAPE = mean |ratio - 1|, %.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import epsim.sim.engine as engine  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import predict  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "agg_overlap_rows.md"
SYSTEMS = ("h200_sxm", "b200_sxm", "b300_sxm")
VERSIONS = ("0.5.9", "0.5.10.post1")
CLIENTS = (4, 16, 64)


def row_ids() -> list[str]:
    """The fixed row set (module doc), in the record's order."""
    ids, seen = [], set()
    for r in json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]:
        e = r["epsim"]
        if (r["mode"] != "agg" or e.get("status") != "predicted" or r["system"] not in SYSTEMS
                or r["version"] not in VERSIONS or r["concurrency"] not in CLIENTS
                or "draft" in json.dumps(e["assumptions"]).lower() or "mtp" in r["id"].lower()):
            continue
        key = (r["system"], r["precision"], r["isl"], r["osl"], r["layout"], r["concurrency"])
        if key not in seen and r["id"] not in ids:
            seen.add(key)
            ids.append(r["id"])
    return ids


def _predict(row, ahead: bool) -> dict:
    real = engine.forms_ahead
    engine.forms_ahead = real if ahead else (lambda deployment: False)
    try:
        return predict(plan_row(row, approximate=True))
    finally:
        engine.forms_ahead = real


def _summary(pairs: list[tuple[float, float]]) -> str:
    ratios = [p / m for p, m in pairs]
    return (f"{statistics.median(ratios):.2f} | {100 * statistics.mean(abs(x - 1) for x in ratios):.1f}"
            if ratios else "- | -")


def table() -> str:
    wanted = set(row_ids())
    by_id = {r.id: r for r in read_rows(default_csv_path()) if r.id in wanted}
    rows = sorted(by_id.values(), key=lambda r: (r.system, r.precision, r.isl, r.osl, r.id))
    lines = ["| row | clients | measured TTFT / TPOT ms | before | after |", "|---|---|---|---|---|"]
    got = []
    for row in rows:
        before, after = _predict(row, False), _predict(row, True)
        if before["status"] != "predicted" or after["status"] != "predicted":
            lines.append(f"| {row.id} | {row.concurrency} | {row.ttft_ms:.0f} / {row.tpot_ms:.1f} | "
                         f"{before['status']} | {after['status']} |")
            continue
        got.append((row, before, after))
        lines.append(f"| {row.id} | {row.concurrency} | {row.ttft_ms:.0f} / {row.tpot_ms:.1f} | "
                     f"{before['ttft_ms']:.0f} / {before['tpot_ms']:.1f} | "
                     f"{after['ttft_ms']:.0f} / {after['tpot_ms']:.1f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    out = [f"{len(got)} of {len(wanted)} rows predicted both ways.", "",
           "| system | clients | rows | TTFT before: ratio median | MAPE % | TTFT after: ratio "
           "median | MAPE % | TPOT before: ratio median | MAPE % | TPOT after: ratio median | "
           "MAPE % |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = [("all", None, None)] + [(s, s, None) for s in SYSTEMS] + [("all", None, c) for c in CLIENTS]
    for label, system, clients in groups:
        sel = [g for g in got if (system is None or g[0].system == system)
               and (clients is None or g[0].concurrency == clients)]
        cells = []
        for k in ("ttft_ms", "tpot_ms"):
            for which in (1, 2):
                cells.append(_summary([(g[which][k], getattr(g[0], k)) for g in sel]))
        out.append(f"| {label} | {clients or 'all'} | {len(sel)} | " + " | ".join(cells) + " |")
    return "\n".join(out + ["", *lines])


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "The overlap loop on the InferenceX agg rows",
                         "python benchmarks/agg_overlap_rows.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
