"""Where epsim's TTFT misses at few clients: measured minus predicted TTFT of the silicon rows at
1-8 clients, broken down by everything that could carry it, and the shape of that gap on one
deployment (prompt length, clients, repeat runs, the benchmark client on other servers).

    python benchmarks/silicon_ttft_gap.py [--write]

(`benchmarks/agg_first_wave.py` splits epsim's own runs of two of these deployments request by
request.)

Reads the whole-set record `benchmarks/results/silicon_rows.json.gz` (epsim's predictions at the
commit that recorded it, `epsim validate --silicon --approximate`) and, for what the record does
not carry (when a row was measured, by which harness), the silicon sample itself
(`aiconfigurator-core`'s `silicon_sample.csv`). The sample is validation data: this is a
diagnosis of errors, and nothing here sets or chooses a constant of the simulator. The last
table reads measured rows only (every model and backend the sample holds, one benchmark client).
Gap = measured - predicted TTFT, ms; MAPE = mean |predicted / measured - 1|, percent.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.agg_recipes import HARNESS_RANGE_RATIO, HARNESS_WARMUP_FROM  # noqa: E402
from epsim.validate.silicon.inferencex import moment  # noqa: E402
from epsim.validate.silicon.mapping import INFERENCEX_SOURCE  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import RUN_REQUESTS_PER_CLIENT  # noqa: E402

ROWS = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "silicon_ttft_gap.md"
FEW_CLIENTS = 8
MOST_CLIENTS = 128        # the clients table stops here: the B200 FP8 rows above it ran flags that
#                           no InferenceX script states (docs/silicon.md, "Why the aggregated rows miss")
_MEASURED = re.compile(r"measured=(\d{4}-\d{2}-\d{2}(?:T[0-9:.]+Z?)?)")
_CLIENTS = re.compile(r"silicon_concurrency=(\d+)")
_SERVER_ISL = re.compile(r"prompts as the server tokenized them: ISL \d+ x [\d.]+ = (\d+)")
_WIDTH = re.compile(r"(?<![a-z_])(tp|dp)(\d+)")
TPOT_SAME = 0.02          # repeat runs: two rows of one deployment whose mean TPOT agrees this well


def harness(entry: dict, source: str) -> str:
    """The benchmark that measured a row, as far as its source says (docs/silicon.md)."""
    if not INFERENCEX_SOURCE.search(source):
        return "not known (AIConfigurator's own runs)"
    if entry["mode"] != "agg":
        return f"Dynamo P/D, {RUN_REQUESTS_PER_CLIENT['prefill']}N after a warm-up run"
    match = _MEASURED.search(source)
    if match and moment(match.group(1)) < moment(HARNESS_WARMUP_FROM):
        return "InferenceX one node, no warm-up (before 2026-01-21)"
    return f"InferenceX one node, {RUN_REQUESTS_PER_CLIENT['agg']}N after 2N warm-ups of one prompt"


def server_prompt(entry: dict) -> str:
    """The SGLang version and the stated ISL as the server prefilled it: x 5.03 where the row
    ran InferenceX's unfixed client under transformers 5 (`client_tokenizer`, its assumption)."""
    found = [m for t in entry["epsim"]["assumptions"] if (m := _SERVER_ISL.match(t))]
    tokens = int(found[0].group(1)) if found else entry["isl"]
    return f"{entry['version'] or 'not stated'}, ISL {entry['isl']} -> {tokens} tokens"


def mtp(entry: dict) -> str:
    """MTP on, off, or either (an approximated row whose candidates differ in it)."""
    texts = entry["epsim"]["assumptions"] + entry["epsim"]["approximations"]
    if any("MTP as speculative_algorithm" in t or t.endswith(", MTP") for t in texts):
        return "on"
    return "either" if any("MTP" in t for t in texts) else "off"


def entries() -> list[dict]:
    """Every run epsim priced (predicted or approximated), with its measured date and harness;
    a run the sample holds twice (InferenceX's database dump and a dated export of it: same
    deployment, lengths, clients and measured figures) counts once."""
    record = json.loads(gzip.decompress(ROWS.read_bytes()))
    sources = {row.id: row.source for row in read_rows(default_csv_path())}
    out, seen = [], set()
    for e in record["rows"]:
        run = (e["system"], e["precision"], e["layout_as_run"], e["isl"], e["osl"],
               e["concurrency"], round(e["measured"]["ttft_ms"], 3), round(e["measured"]["tpot_ms"], 4))
        if e["epsim"]["status"] not in ("predicted", "approximated") or run in seen:
            continue
        seen.add(run)
        source = sources[e["id"]]
        match = _MEASURED.search(source)
        # GPUs of one instance, of the prefill side of a P/D row ("P tp4 dp1 moe_tp4 ep1 x2 / D ...")
        side = dict(_WIDTH.findall(e["layout_as_run"].split(" / ")[0]))
        out.append({**e, "status": e["epsim"]["status"], "measured_ttft_ms": e["measured"]["ttft_ms"],
                    "predicted_ttft_ms": e["epsim"]["ttft_ms"],
                    "gap_ms": e["measured"]["ttft_ms"] - e["epsim"]["ttft_ms"],
                    "month": match.group(1)[:7] if match else "not stated",
                    "day": match.group(1)[:10] if match else "",
                    "harness": harness(e, source), "mtp": mtp(e),
                    "run_k": (RUN_REQUESTS_PER_CLIENT["agg" if e["mode"] == "agg" else "prefill"]
                              if INFERENCEX_SOURCE.search(source) else None),
                    "gpus": int(side["tp"]) * int(side["dp"])})
    return out


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def group_table(rows: list[dict], by: str, title: str) -> str:
    """Rows grouped by `by`: count, the gap's median and quartiles, medians of measured and
    predicted TTFT, MAPE, and gap x K (K requests per client in the run, InferenceX's harnesses):
    the one stall that would make the gap if it held the run's first wave, 1/K of its requests."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[str(r[by])].append(r)
    lines = [f"**{title}**", "",
             "| " + by + " | rows | gap median (p25, p75) ms | measured median ms | predicted "
             "median ms | MAPE % | gap x K median s |", "|---|---|---|---|---|---|---|"]
    for key in sorted(groups, key=lambda k: (len(k), k) if k.isdigit() else (99, k)):
        g = groups[key]
        gaps = [r["gap_ms"] for r in g]
        mape = statistics.fmean(abs(r["predicted_ttft_ms"] / r["measured_ttft_ms"] - 1) for r in g)
        stall = [r["gap_ms"] * r["run_k"] / 1e3 for r in g if r["run_k"]]
        lines.append(f"| {key} | {len(g)} | {statistics.median(gaps):.0f} ({_q(gaps, .25):.0f}, "
                     f"{_q(gaps, .75):.0f}) | "
                     f"{statistics.median(r['measured_ttft_ms'] for r in g):.0f} | "
                     f"{statistics.median(r['predicted_ttft_ms'] for r in g):.0f} | "
                     f"{100 * mape:.0f} | "
                     f"{f'{statistics.median(stall):.2f}' if stall else '-'} |")
    return "\n".join(lines)


def _deployment(r: dict, *drop: str) -> tuple:
    keys = ("system", "precision", "mode", "layout_as_run", "isl", "osl", "concurrency", "day",
            "version", "mtp")
    return tuple(r[k] for k in keys if k not in drop)


def isl_pairs(rows: list[dict]) -> str:
    """One deployment, one day, at 1k and 8k prompts: how much of the TTFT grows with the prompt."""
    by = defaultdict(dict)
    for r in rows:
        if r["isl"] in (1024, 8192) and r["osl"] == 1024:
            by[_deployment(r, "isl")][r["isl"]] = r
    lines = ["**The prompt's share: one deployment on one day at 1k and at 8k prompts (OSL 1k)**",
             "", "| system | mode | layout | clients | measured on | measured 1k / 8k ms | predicted "
             "1k / 8k ms | measured 8k - 1k ms | predicted 8k - 1k ms | gap 1k / 8k ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key, pair in sorted(by.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if len(pair) < 2:
            continue
        a, b = pair[1024], pair[8192]
        lines.append(f"| {a['system']} | {a['mode']} | {a['layout_as_run']} | {a['concurrency']} |"
                     f" {a['day']} | {a['measured_ttft_ms']:.0f} / {b['measured_ttft_ms']:.0f} |"
                     f" {a['predicted_ttft_ms']:.0f} / {b['predicted_ttft_ms']:.0f} |"
                     f" {b['measured_ttft_ms'] - a['measured_ttft_ms']:.0f} |"
                     f" {b['predicted_ttft_ms'] - a['predicted_ttft_ms']:.0f} |"
                     f" {a['gap_ms']:.0f} / {b['gap_ms']:.0f} |")
    return "\n".join(lines)


def by_clients(rows: list[dict]) -> str:
    """InferenceX one-node rows after the warm-up landed, at every client count: the gap, the
    TPOT error, and the share of the GPU's time a stall of the gap in every request's prefill
    would take (arrivals per second x gap, arrivals = clients / (TTFT + (mean OSL - 1) TPOT),
    both measured, the mean OSL the harness's (uniform in [0.8 OSL, OSL]); each prefill alone,
    so an upper bound where prefills batch)."""
    mean_osl = (1 + HARNESS_RANGE_RATIO) / 2
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        if (r["mode"] == "agg" and r["harness"].endswith("one prompt")
                and r["status"] == "predicted" and r["concurrency"] <= MOST_CLIENTS):
            groups[r["concurrency"]].append(r)
    lines = ["**The gap against the clients, and what a per-request stall would cost the decode** "
             "(InferenceX one-node rows measured after 2026-01-21, predicted)", "",
             "| clients | rows | gap median (p25, p75) ms | TPOT predicted / measured - 1, median %"
             " | GPU time a per-request stall of the gap would take, median % |",
             "|---|---|---|---|---|"]
    for n in sorted(groups):
        g = groups[n]
        gaps = [r["gap_ms"] for r in g]
        tpot = [100 * (r["epsim"]["tpot_ms"] / r["measured"]["tpot_ms"] - 1) for r in g]
        share = [100 * r["gap_ms"] * n / (r["measured_ttft_ms"] + (mean_osl * r["osl"] - 1)
                                          * r["measured"]["tpot_ms"]) for r in g]
        lines.append(f"| {n} | {len(g)} | {statistics.median(gaps):.0f} ({_q(gaps, .25):.0f}, "
                     f"{_q(gaps, .75):.0f}) | {statistics.median(tpot):+.1f} | "
                     f"{statistics.median(share):.0f} |")
    return "\n".join(lines)


def repeats(rows: list[dict]) -> str:
    """Two runs of one deployment (same system, precision, layout, lengths, clients, version)
    whose mean TPOT agrees within TPOT_SAME: how far their mean TTFTs differ."""
    by = defaultdict(dict)
    for r in rows:
        key = _deployment(r, "day", "mtp")
        by[key][(round(r["measured_ttft_ms"], 3), round(r["measured"]["tpot_ms"], 4))] = r
    pairs = []
    for runs in by.values():
        runs = sorted(runs.values(), key=lambda r: r["measured_ttft_ms"])
        for i, a in enumerate(runs):
            for b in runs[i + 1:]:
                if abs(a["measured"]["tpot_ms"] / b["measured"]["tpot_ms"] - 1) <= TPOT_SAME:
                    pairs.append((a, b))
    lines = [f"**Repeat runs: one deployment measured twice, mean TPOT within {TPOT_SAME:.0%}** "
             f"({len(pairs)} pairs, every client count)", "",
             "| system | mode | ISL/OSL | clients | TTFT ms (run a, run b) | TTFT b / a - 1 | "
             "TPOT ms (a, b) |", "|---|---|---|---|---|---|---|"]
    spread = []
    for a, b in sorted(pairs, key=lambda p: (p[0]["system"], p[0]["mode"], p[0]["isl"],
                                             p[0]["concurrency"])):
        spread.append(b["measured_ttft_ms"] / a["measured_ttft_ms"] - 1)
        lines.append(f"| {a['system']} | {a['mode']} | {a['isl']}/{a['osl']} | {a['concurrency']}"
                     f" | {a['measured_ttft_ms']:.0f}, {b['measured_ttft_ms']:.0f} |"
                     f" {100 * spread[-1]:+.0f} % | {a['measured']['tpot_ms']:.2f}, "
                     f"{b['measured']['tpot_ms']:.2f} |")
    if spread:
        lines += ["", f"Median TTFT spread between repeat runs: {100 * statistics.median(spread):.0f} %."]
    return "\n".join(lines)


def pd_terms(rows: list[dict]) -> str:
    """The P/D runs at 1-FEW_CLIENTS clients epsim predicts: the parts of its TTFT
    (`epsim.validate.silicon.handoff`; the prefill's own is its queue and forwards) beside the
    measured, by system and prompt length (medians)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["mode"] == "disagg" and r.get("epsim", {}).get("ttft_terms"):
            groups[(r["system"], r["isl"])].append(r)
    lines = ["**The P/D runs: the parts of epsim's TTFT** (medians, ms)", "",
             "| system | ISL | runs | measured | predicted | prefill | bootstrap | transfer | "
             "decode's first token | gap |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (system, isl), g in sorted(groups.items()):
        terms = [r["epsim"]["ttft_terms"] for r in g]
        lines.append(f"| {system} | {isl} | {len(g)} | "
                     f"{statistics.median(r['measured_ttft_ms'] for r in g):.0f} | "
                     f"{statistics.median(r['predicted_ttft_ms'] for r in g):.0f} | " + " | ".join(
                         f"{statistics.median(t[k] for t in terms):.0f}" for k in
                         ("prefill_ms", "bootstrap_ms", "transfer_ms", "first_token_ms"))
                     + f" | {statistics.median(r['gap_ms'] for r in g):.0f} |")
    return "\n".join(lines)


def _ranks(values: list[float]) -> np.ndarray:
    """Ranks 0..n-1 of `values` (ties broken by position: the runs' figures are continuous)."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks


def rank_correlation(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation of two equal-length lists (Pearson's on their ranks)."""
    return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])


def pd_steps(rows: list[dict]) -> str:
    """The P/D runs at 1-FEW_CLIENTS clients against their decode's step: every hop of the
    handoff that waits on the decode server's loop (its receive under `--scheduler-recv-interval`,
    its transfer poll, its prebuilt batch) is a number of decode steps, so a gap made of such a
    hop would be a steady number of steps and grow with the measured TPOT."""
    pd = [r for r in rows if r["mode"] == "disagg"]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in pd:
        groups[r["system"]].append(r)
    lines = ["**The P/D gap against the decode's step** (medians; a step = the measured TPOT)", "",
             "| system | runs | measured TPOT ms | gap ms | gap in decode steps |",
             "|---|---|---|---|---|"]
    for system, g in sorted(groups.items()):
        lines.append(f"| {system} | {len(g)} | "
                     f"{statistics.median(r['measured']['tpot_ms'] for r in g):.1f} | "
                     f"{statistics.median(r['gap_ms'] for r in g):.0f} | "
                     f"{statistics.median(r['gap_ms'] / r['measured']['tpot_ms'] for r in g):.1f} |")
    if len(pd) > 2:
        rho = rank_correlation([r["gap_ms"] for r in pd], [r["measured"]["tpot_ms"] for r in pd])
        lines += ["", f"Rank correlation of the gap with the measured TPOT over the {len(pd)} "
                      f"runs: {rho:+.2f}."]
    return "\n".join(lines)


def lone_clients(rows: list[dict]) -> str:
    """Every row of 1-2 clients: a run of K x N requests, so one request's stall of S seconds
    moves the run's mean TTFT by S / (K N) (K = 5 in the Dynamo P/D harness)."""
    lines = ["**Runs of 1-2 clients** (every row epsim prices; K N requests a run)", "",
             "| system | mode | ISL/OSL | clients | status | measured ms | predicted ms | gap ms |"
             " measured TPOT ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r["concurrency"] <= 2),
                    key=lambda r: (r["system"], r["isl"], r["osl"], r["concurrency"],
                                   r["measured_ttft_ms"])):
        lines.append(f"| {r['system']} | {r['mode']} | {r['isl']}/{r['osl']} | {r['concurrency']}"
                     f" | {r['status']} | {r['measured_ttft_ms']:.0f} | "
                     f"{r['predicted_ttft_ms']:.0f} | {r['gap_ms']:.0f} | "
                     f"{r['measured']['tpot_ms']:.1f} |")
    return "\n".join(lines)


def same_client() -> str:
    """Measured only: InferenceX agg rows at 4-8 clients, 1k/1k, of every model and backend the
    sample holds (one benchmark client, `utils/bench_serving`), TTFT and TPOT medians."""
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    with default_csv_path().open(newline="", encoding="utf-8") as f:
        for rec in csv.DictReader(f):
            clients = _CLIENTS.search(rec["silicon_data_source"] or "")
            if (not clients or not 4 <= int(clients.group(1)) <= FEW_CLIENTS
                    or rec["mode"] != "agg" or "measured=" not in rec["silicon_data_source"]
                    or float(rec["isl"]) != 1024 or float(rec["osl"]) != 1024):
                continue
            month = _MEASURED.search(rec["silicon_data_source"])
            groups[(rec["model_path"].rsplit("/", 1)[-1], rec["backend"], rec["system"],
                    month.group(1)[:7] if month else "")].append(
                (float(rec["silicon_ttft_ms"]), float(rec["silicon_tpot_ms"])))
    lines = ["**The same benchmark client on other servers** (measured only: InferenceX agg rows, "
             f"1k/1k, 4-{FEW_CLIENTS} clients, every model and backend in the sample)", "",
             "| model | backend | system | month measured | rows | TTFT median (min) ms |"
             " TPOT median ms |", "|---|---|---|---|---|---|---|"]
    for (model, backend, system, month), g in sorted(groups.items()):
        ttft = [t for t, _ in g]
        lines.append(f"| {model} | {backend} | {system} | {month} | {len(g)} | "
                     f"{statistics.median(ttft):.0f} ({min(ttft):.0f}) | "
                     f"{statistics.median(p for _, p in g):.1f} |")
    return "\n".join(lines)


def table() -> str:
    rows = entries()
    few = [r for r in rows if r["concurrency"] <= FEW_CLIENTS]
    predicted = [r for r in few if r["epsim"]["status"] == "predicted"]
    for r in few:
        r["mode, ISL"] = f"{r['mode']}, {r['isl']}"
    parts = [f"Runs at 1-{FEW_CLIENTS} clients that epsim prices: {len(predicted)} predicted as "
             f"stated, {len(few) - len(predicted)} approximated (`--approximate`); the breakdowns "
             f"are over the predicted ones, the first table over both. Predictions: "
             f"`{json.loads(gzip.decompress(ROWS.read_bytes()))['command']}` "
             f"({ROWS.relative_to(ROOT)}).",
             group_table(few, "status", "Predicted and approximated rows"),
             group_table(predicted, "mode, ISL", "By mode and prompt length"),
             group_table(predicted, "osl", "By output length"),
             group_table(predicted, "system", "By system"),
             group_table(predicted, "gpus", "By GPUs of the (prefill) instance"),
             group_table(predicted, "concurrency", "By clients"),
             group_table(predicted, "version", "By SGLang version"),
             group_table(predicted, "month", "By month measured"),
             group_table(predicted, "harness", "By benchmark harness"),
             group_table(predicted, "mtp", "By MTP"),
             group_table([{**r, "SGLang, prompt the server prefilled": server_prompt(r)}
                          for r in predicted if r["mode"] == "agg" and r["day"] >= "2026-03"],
                         "SGLang, prompt the server prefilled", "InferenceX one-node runs of "
                         "2026-03 on, by the prompt the server prefilled (docs/silicon.md, "
                         "'The B300 runs')"),
             isl_pairs(predicted), by_clients(rows), pd_terms(predicted), pd_steps(predicted),
             repeats(rows), lone_clients(rows),
             same_client()]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return recorded_main(argv, __doc__, RESULTS, "Where the TTFT misses at few clients",
                         "python benchmarks/silicon_ttft_gap.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
