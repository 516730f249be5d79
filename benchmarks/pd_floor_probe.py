"""The P/D few-client TTFT floor (issue 39): two checks that the handoff's host work and the
rows' own shape make.

    python benchmarks/pd_floor_probe.py [--write]
    python benchmarks/pd_floor_probe.py --select DIR   # DIR/pd.csv (65 rows), DIR/pd_ll.csv (45)
    epsim validate --silicon DIR/pd.csv --approximate --no-peer --workers 1 --json > before.json
    python benchmarks/pd_floor_probe.py --rows BEFORE.json AFTER.json   # by system x ISL

`--select`: the Dynamo P/D rows of GB200, GB300 and B200 at ISL 1k and 8k, OSL 1k, 4-64 clients,
that the whole-set record predicts, one a deployment (system, precision, ISL, layout, clients,
image; the lowest id), less the runs the record misses by more than 2 s (cold or stalled runs,
not the floor); `pd_ll.csv` keeps the GB200 and GB300 ones whose prefill runs no DP attention
(the low-latency recipes and the December TP scripts).

1. *The prompt's share, across the recipes.* The Dynamo P/D rows were measured at 1k and at 8k
   prompts on different days with each length's low-latency recipe, so
   `benchmarks/silicon_ttft_gap.py` (one deployment, one day) pairs none of them. Here a pair is
   one system, precision, P/D layout, SGLang image and client count at ISL 1024 and 8192 (OSL
   1024), the prefill without DP attention (the low-latency TP recipes, and B200 FP8's TEP8), at
   most 64 clients: the measured TTFT increment 8k - 1k beside epsim's. Were the floor a cost every
   request adds whatever its prompt (a handoff hop, a poll, the client), the two increments would
   agree and the gap would stay put; where epsim's increment is the larger by about the 1k gap,
   the floor is hidden behind a long prompt's forward (or epsim's 8k prefill is dear by as much).
   Reads the whole-set record `benchmarks/results/silicon_rows.json.gz`: a diagnosis of errors on
   validation data, which sets no constant.
2. *The KV send's host work, timed on this CPU.* SGLang 0.5.8's NIXL sender builds its transfer
   on the prefill scheduler's thread after the batch's result is processed
   (`disaggregation/nixl/conn.py` `send_kvcache`): it splits the request's page indices into runs
   contiguous on both sides (`common/utils.py` `group_concurrent_contiguous`, NumPy), then one
   (address, length, GPU) tuple a layer a run for each side, in Python, before NIXL's
   `get_xfer_descs` / `initialize_xfer` / `transfer` (C++, not timed here). This script builds the
   same lists (its own code, the same work) for DeepSeek-V3's 61 MLA layers at page 64
   (`trtllm_mla`), a prompt of 0.9 x ISL tokens (the harness's mean), with the pages in one run
   (a fresh pool) and each page its own run (the worst split). On a shared 2-CPU VM the median
   carries other processes' preemptions; the least is the work's own time.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.rows import default_csv_path  # noqa: E402

ROWS = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "pd_floor_probe.md"
LAYERS = 61               # DeepSeek-V3/R1: one MLA KV buffer a layer
PAGE_TOKENS = 64          # trtllm_mla's page (sglang 0.5.8 server_args: page_size 64)
MEAN_PROMPT = 0.9         # the harness's --random-range-ratio 0.8: prompts uniform in [0.8 L, L]
REPEATS = 200
MOST_CLIENTS = 64         # the few-to-mid-client runs; above, the prefill's queue is the TTFT


def pd_pairs() -> str:
    """Measured and predicted TTFT of the P/D rows paired at 1k and 8k prompts (module doc, 1)."""
    record = json.loads(gzip.open(ROWS).read())
    by = defaultdict(lambda: defaultdict(list))
    for r in record["rows"]:
        e = r["epsim"]
        if (r["mode"] != "disagg" or r["osl"] != 1024 or r["isl"] not in (1024, 8192)
                or e.get("status") != "predicted" or r["concurrency"] > MOST_CLIENTS
                or " dp1 " not in r["layout_as_run"].split(" /")[0]):
            continue
        key = (r["system"], r["precision"], r["layout_as_run"].split(" x")[0].split(" /")[0],
               r["version"] or "?", r["concurrency"])
        by[key][r["isl"]].append((r["measured"]["ttft_ms"], e["ttft_ms"]))
    lines = ["| system | precision | prefill | SGLang | clients | measured 1k / 8k ms | "
             "epsim 1k / 8k ms | measured 8k - 1k | epsim 8k - 1k | gap 1k / 8k ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    excess = []
    for key, sides in sorted(by.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if len(sides) < 2:
            continue
        (m1, p1), (m8, p8) = (tuple(statistics.median(v) for v in zip(*sides[isl]))
                              for isl in (1024, 8192))
        excess.append((p8 - p1) - (m8 - m1))
        lines.append(f"| {' | '.join(map(str, key))} | {m1:.0f} / {m8:.0f} | {p1:.0f} / {p8:.0f} |"
                     f" {m8 - m1:.0f} | {p8 - p1:.0f} | {m1 - p1:.0f} / {m8 - p8:.0f} |")
    lines += ["", f"epsim's increment less the measured one over the {len(excess)} pairs: median "
              f"{statistics.median(excess):.0f} ms (range {min(excess):.0f} to {max(excess):.0f})."]
    return "\n".join(lines)


def _runs(pages: int, scattered: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source and destination page indices of one request: one contiguous run, or every page
    apart from its neighbours on both sides."""
    step = 2 if scattered else 1
    src = np.arange(0, pages * step, step, dtype=np.int32)
    return src, src + 1000


def build_descriptors(src: np.ndarray, dst: np.ndarray, item_bytes: int) -> int:
    """The send's Python part: the runs contiguous on both sides, then one (address, bytes, GPU)
    tuple a layer a run on each side; returns the descriptor count."""
    cut = np.flatnonzero((np.diff(src) != 1) | (np.diff(dst) != 1)) + 1
    src_runs = [run.tolist() for run in np.split(src, cut)]
    dst_runs = [run.tolist() for run in np.split(dst, cut)]
    src_addrs, dst_addrs = [], []
    for layer in range(LAYERS):
        src_base, dst_base = (layer + 1) << 32, (layer + 1) << 40
        for s, d in zip(src_runs, dst_runs):
            length = item_bytes * len(s)
            src_addrs.append((src_base + int(s[0]) * item_bytes, length, 0))
            dst_addrs.append((dst_base + int(d[0]) * item_bytes, length, 1))
    return len(src_addrs)


def descriptor_host() -> str:
    """The send's Python work timed on this CPU (module doc, 2)."""
    item_bytes = PAGE_TOKENS * 576          # a page of the 576-wide latent in the FP8 KV cache
    lines = [f"| ISL | pages | runs | descriptors a side | host ms, least / median of {REPEATS} |",
             "|---|---|---|---|---|"]
    for isl in (1024, 8192):
        pages = -(-int(MEAN_PROMPT * isl) // PAGE_TOKENS)
        for scattered in (False, True):
            src, dst = _runs(pages, scattered)
            times = []
            for _ in range(REPEATS):
                start = time.perf_counter()
                count = build_descriptors(src, dst, item_bytes)
                times.append(time.perf_counter() - start)
            lines.append(f"| {isl} | {pages} | {pages if scattered else 1} | {count} | "
                         f"{1e3 * min(times):.2f} / {1e3 * statistics.median(times):.2f} |")
    return "\n".join(lines)


def make() -> str:
    return "\n\n".join(["## 1. The P/D rows at 1k and 8k prompts", pd_pairs(),
                        "## 2. The NIXL send's descriptor lists, built in Python",
                        descriptor_host()])


def select(out: Path) -> None:
    """Write the P/D row subsets (module doc) as silicon-sample CSVs under `out`."""
    record = json.loads(gzip.open(ROWS).read())["rows"]
    chosen, layout = {}, {}
    for r in sorted(record, key=lambda r: r["id"]):
        e = r["epsim"]
        if (r["mode"] != "disagg" or r["system"] not in ("gb200", "gb300", "b200_sxm")
                or r["osl"] != 1024 or r["isl"] not in (1024, 8192)
                or r["concurrency"] > MOST_CLIENTS or e.get("status") != "predicted"
                or abs(r["measured"]["ttft_ms"] - e["ttft_ms"]) > 2000):
            continue
        key = (r["system"], r["precision"], r["isl"], r["layout_as_run"], r["concurrency"],
               r["version"])
        chosen.setdefault(key, r["id"])
        layout[r["id"]] = (r["system"], r["layout_as_run"].split(" /")[0])
    sample = pd.read_csv(default_csv_path())
    rows = sample[sample["id"].isin(set(chosen.values()))]
    out.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out / "pd.csv", index=False)
    low = rows["id"].map(lambda i: layout[i][0] != "b200_sxm" and " dp1 " in layout[i][1] + " ")
    rows[low].to_csv(out / "pd_ll.csv", index=False)
    print(f"{len(rows)} rows in {out / 'pd.csv'}, {int(low.sum())} in {out / 'pd_ll.csv'}")


def _errors(path: str) -> dict[str, tuple]:
    """id -> (system, precision, ISL, TTFT error, TPOT error) of a `--json` run's predicted rows
    (errors as fractions: predicted / measured - 1)."""
    out = {}
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = json.load(f)["rows"]
    for r in rows:
        e, m = r["epsim"], r["measured"]
        if e.get("status") == "predicted":
            out[r["id"]] = (r["system"], r["precision"], r["isl"], e["ttft_ms"] / m["ttft_ms"] - 1,
                            e["tpot_ms"] / m["tpot_ms"] - 1)
    return out


def compare(before: str, after: str) -> str:
    """TTFT and TPOT MAPE (and TTFT's signed mean error) before -> after over the rows both runs
    predict, by system x precision x ISL and in all."""
    old, new = _errors(before), _errors(after)
    groups = defaultdict(list)
    for rid in sorted(old.keys() & new.keys()):
        groups[old[rid][:3]].append((old[rid][3:], new[rid][3:]))
        groups[("all", "", "")].append((old[rid][3:], new[rid][3:]))
    lines = ["| group | rows | TTFT MAPE % | TTFT signed % | TPOT MAPE % |", "|---|---|---|---|---|"]
    for key, pairs in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        def pct(i: int, side: int, signed: bool = False) -> float:
            vals = [p[side][i] for p in pairs]
            return 100 * statistics.fmean(vals if signed else map(abs, vals))
        lines.append(f"| {' '.join(map(str, key)).strip()} | {len(pairs)} | {pct(0, 0):.1f} -> "
                     f"{pct(0, 1):.1f} | {pct(0, 0, True):+.1f} -> {pct(0, 1, True):+.1f} | "
                     f"{pct(1, 0):.1f} -> {pct(1, 1):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--select"]:
        select(Path(sys.argv[2]))
        sys.exit(0)
    if sys.argv[1:2] == ["--rows"]:
        print(compare(*sys.argv[2:4]))
        sys.exit(0)
    sys.exit(recorded_main(None, __doc__, RESULTS, "The P/D few-client floor: two probes",
                           "python benchmarks/pd_floor_probe.py --write", make))
