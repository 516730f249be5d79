"""Where epsim's TTFT misses under load: the silicon rows' TTFT error by clients, split into what
a deployment already misses at few clients and what grows with the load, and where the load
part sits in the closed loop (the request rate it sustains, the prefill side's throughput).

    python benchmarks/silicon_ttft_load.py [--write]

Reads the whole-set record `benchmarks/results/silicon_rows.json.gz` (as
`benchmarks/silicon_ttft_gap.py`, whose `entries` it shares: each priced run once, with its
harness) and, for the last table, plans those P/D rows again (`plan_row`) to price their
prefill instance's full step (`SteadyStateModel.prefill_s` at its chunk: epsim's saturated
prefill throughput). The rows are validation data: this is a diagnosis of errors, and nothing
here sets or chooses a constant of the simulator. The rows before InferenceX's warm-up
(#480, 2026-01-21) are left out: their cold first wave is listed apart (docs/silicon.md).

- A closed loop of N clients, each sending its next request when the last one ends, runs at
  X = N / (TTFT + (mean OSL - 1) x TPOT) requests per second (Little's law; the mean OSL the
  harness's, uniform in [0.8 OSL, OSL]); measured X from the measured TTFT and TPOT, predicted
  from epsim's. Where the prefill side is the bottleneck, TTFT = N / X - decode time: a small
  error in X is a large one in TTFT.
- A *series* is one deployment on one day (system, precision, mode, layout as run, ISL/OSL,
  MTP) at several client counts. "The few-client gap carried up" adds a series' gap at its
  lowest client count (1-8) to each of its predictions at more clients: what is left is what
  grows with the load. A diagnostic, not a model.
- "Saturated prefill": a P/D series whose measured X grows less than PLATEAU_GROWTH while its
  clients grow at least PLATEAU_CLIENTS-fold (the loop is bound by a capacity); the measured
  prefill throughput is X x mean ISL over the prefill GPUs, epsim's is its prefill instance's
  full chunked step (per rank: chunk tokens in one step's time).
MAPE = mean |predicted / measured - 1|, percent; ratio = predicted / measured.
"""

from __future__ import annotations

import copy
import statistics
import sys
import warnings
from collections import defaultdict
from pathlib import Path

from recorded import recorded_main
from silicon_ttft_gap import ROWS, _deployment, _q, entries

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from epsim.validate.silicon.agg_recipes import HARNESS_RANGE_RATIO  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "silicon_ttft_load.md"
BUCKETS = ((8, "1-8"), (64, "16-64"), (512, "128-512"), (10 ** 9, "> 512"))
FEW_CLIENTS = 8
PLATEAU_GROWTH = 1.15     # measured X grows less than this ...
PLATEAU_CLIENTS = 1.5     # ... while the clients grow at least this much: a bound loop
DECODE_BINDS = 0.75       # a plateau whose decoding requests reach this share of the decode
#                           side's cap is the decode side's, not the prefill's
MEAN_LEN = (1 + HARNESS_RANGE_RATIO) / 2      # mean of uniform [r L, L], over L
HOST_PAGE_TOKENS = 64     # trtllm_mla's page size (every GB200/GB300 recipe's prefill)
HOST_KV_BUFFERS = 61      # DeepSeek-R1's MLA KV buffers, one a layer


def bucket(clients: int) -> str:
    return next(name for top, name in BUCKETS if clients <= top)


def rate_per_s(ttft_ms: float, tpot_ms: float, clients: int, osl: int) -> float:
    """Little's law: a closed loop's requests per second from its mean TTFT and TPOT (ms)."""
    return clients / ((ttft_ms + (MEAN_LEN * osl - 1) * tpot_ms) * 1e-3)


def warm_runs() -> list[dict]:
    """The runs epsim predicts as stated, less those measured before the harness warmed up."""
    out = []
    for r in entries():
        if r["status"] != "predicted" or "no warm-up" in r["harness"]:
            continue
        m, p = r["measured"], r["epsim"]
        r["bucket"] = bucket(r["concurrency"])
        r["ratio"] = r["predicted_ttft_ms"] / r["measured_ttft_ms"]
        r["rate_ratio"] = (rate_per_s(p["ttft_ms"], p["tpot_ms"], r["concurrency"], r["osl"])
                           / rate_per_s(m["ttft_ms"], m["tpot_ms"], r["concurrency"], r["osl"]))
        r["series"] = _deployment(r, "concurrency")
        out.append(r)
    return out


def _mape(ratios: list[float]) -> float:
    return 100 * statistics.fmean(abs(x - 1) for x in ratios)


def by_load(rows: list[dict]) -> str:
    """Rows by mode, harness and clients: TTFT ratio (median, quartiles), MAPE, median gap."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["mode"], r["harness"], r["bucket"])].append(r)
    order = [name for _, name in BUCKETS]
    lines = ["**TTFT by clients** (predicted as stated, warmed harnesses)", "",
             "| mode | harness | clients | rows | ratio median (p25, p75) | MAPE % | gap median ms |",
             "|---|---|---|---|---|---|---|"]
    for key in sorted(groups, key=lambda k: (k[0], k[1], order.index(k[2]))):
        g = groups[key]
        ratios = [r["ratio"] for r in g]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {len(g)} | "
                     f"{statistics.median(ratios):.2f} ({_q(ratios, .25):.2f}, {_q(ratios, .75):.2f})"
                     f" | {_mape(ratios):.0f} | "
                     f"{statistics.median(r['gap_ms'] for r in g):.0f} |")
    return "\n".join(lines)


def carried(rows: list[dict]) -> str:
    """Each series' gap at its fewest clients (1-FEW_CLIENTS) added to its other predictions:
    MAPE by mode and clients before and after, and the TTFT ratio left."""
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        series[r["series"]].append(r)
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for runs in series.values():
        runs.sort(key=lambda r: r["concurrency"])
        if runs[0]["concurrency"] > FEW_CLIENTS:
            continue
        offset_ms = runs[0]["gap_ms"]
        for r in runs[1:]:
            groups[(r["mode"], r["bucket"])].append(
                (r["ratio"], (r["predicted_ttft_ms"] + offset_ms) / r["measured_ttft_ms"]))
    order = [name for _, name in BUCKETS]
    lines = ["**The few-client gap carried up** (series with a run at 1-8 clients: that run's "
             "gap added to the series' runs at more clients)", "",
             "| mode | clients | runs | ratio median, as predicted | MAPE %, as predicted | "
             "ratio median, gap carried | MAPE %, gap carried |", "|---|---|---|---|---|---|---|"]
    for key in sorted(groups, key=lambda k: (k[0], order.index(k[1]))):
        raw, moved = zip(*groups[key])
        lines.append(f"| {key[0]} | {key[1]} | {len(raw)} | {statistics.median(raw):.2f} | "
                     f"{_mape(raw):.0f} | {statistics.median(moved):.2f} | {_mape(moved):.0f} |")
    return "\n".join(lines)


def loop_rate(rows: list[dict]) -> str:
    """By mode and clients: the closed loop's request rate, predicted over measured (Little's
    law), beside the TTFT ratio and the measured TTFT's share of a client's cycle."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["mode"], r["bucket"])].append(r)
    order = [name for _, name in BUCKETS]
    lines = ["**The loop's request rate** (Little's law, predicted / measured)", "",
             "| mode | clients | rows | rate ratio median (p25, p75) | TTFT ratio median | measured "
             "TTFT share of the cycle, median % |", "|---|---|---|---|---|---|"]
    for key in sorted(groups, key=lambda k: (k[0], order.index(k[1]))):
        g = groups[key]
        rates = [r["rate_ratio"] for r in g]
        share = [100 * r["measured_ttft_ms"] * rate_per_s(
            r["measured_ttft_ms"], r["measured"]["tpot_ms"], r["concurrency"], r["osl"])
                 / r["concurrency"] / 1e3 for r in g]
        lines.append(f"| {key[0]} | {key[1]} | {len(g)} | {statistics.median(rates):.2f} "
                     f"({_q(rates, .25):.2f}, {_q(rates, .75):.2f}) | "
                     f"{statistics.median(r['ratio'] for r in g):.2f} | "
                     f"{statistics.median(share):.0f} |")
    return "\n".join(lines)


def _sides(row) -> tuple[float, float, int, int, int, float, bool]:
    """epsim's P/D pair of a row: its prefill instance at its full chunked step (tokens / s /
    GPU), the mean ISL of the drawn lengths, the chunk (tokens a rank), the GPUs of one prefill
    instance, and the requests its decode side may run (`SteadyStateModel.max_running`: a rank's
    `max_running_requests` or what its KV pool holds at the decode context, x DP ranks x decode
    instances), the step's seconds, and whether its forward waits on the host (DeepEP normal)."""
    from epsim.sim.steady import SteadyStateModel
    from epsim.spec.scenario import scenario_from_dict
    from epsim.validate.silicon.mapping import plan_row
    prefill, decode = plan_row(row).instances
    scenario = scenario_from_dict(copy.deepcopy(prefill.data), where="silicon row")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the profile's extrapolation notes
        model = SteadyStateModel(scenario)
        chunk = scenario.deployment.chunked_prefill_size
        step_s = model.prefill_s(chunk)
        decode_side = SteadyStateModel(scenario_from_dict(copy.deepcopy(decode.data),
                                                          where="silicon row"))
    gpus = scenario.deployment.num_gpus
    decode_cap = decode_side.max_running * decode_side.dp * decode.num_workers
    d = scenario.deployment
    waits = d.moe_a2a_backend == "deepep" and d.deepep_mode_for("prefill") == "normal"
    return (chunk * model.dp / step_s / gpus, model.input_len, chunk, gpus, decode_cap, step_s,
            waits)


def _host_share(isl: float, chunk: int, step_s: float, waits: bool) -> str:
    """The prefill server's per-request host work over a step (`epsim.cost.prefill_host`): the
    step's requests (chunk / mean ISL) at one run of pages and NIXL's measured descriptor cost,
    to every page its own run at the high public one; and the share the overlap loop leaves
    exposed (all where the forward waits on the host)."""
    from epsim.cost.prefill_host import DESCRIPTOR_US_HIGH, exposed_s, request_host
    from epsim.cost.scheduler_host import DEFAULT_LAUNCH_US
    shares, exposed = [], []
    for fragmented, unit_us in ((False, None), (True, DESCRIPTOR_US_HIGH)):
        kw = {} if unit_us is None else {"descriptor_us": unit_us}
        one = request_host(round(isl), chunk, HOST_PAGE_TOKENS, HOST_KV_BUFFERS,
                           DEFAULT_LAUNCH_US, fragmented=fragmented, **kw)
        host_s = chunk / isl * one.host_us * 1e-6
        shares.append(host_s / step_s)
        exposed.append(exposed_s(host_s, step_s, overlap=True, forward_waits_host=waits) / step_s)
    return f"{shares[0]:.3f}-{shares[1]:.2f} ({exposed[0]:.3f}-{exposed[1]:.2f})"


def saturated(rows: list[dict]) -> str:
    """P/D series whose measured rate plateaus at their top client counts: measured prefill
    throughput against epsim's full-step throughput, and the TTFT ratio of that run."""
    from epsim.validate.silicon.rows import default_csv_path, read_rows
    series: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["mode"] == "disagg":
            series[r["series"]].append(r)
    picked = []
    for runs in series.values():
        runs.sort(key=lambda r: r["concurrency"])
        for low, high in zip(runs, runs[1:]):
            x = [rate_per_s(r["measured_ttft_ms"], r["measured"]["tpot_ms"], r["concurrency"],
                            r["osl"]) for r in (low, high)]
            if (high["concurrency"] >= PLATEAU_CLIENTS * low["concurrency"]
                    and x[1] < PLATEAU_GROWTH * x[0]):
                picked.append((high, x[1]))
    if not picked:
        return "**Saturated prefill**: no P/D series plateaus."
    sample = {row.id: row for row in read_rows(default_csv_path())}
    lines = ["**Saturated prefill** (P/D series whose measured rate plateaus: the top run)", "",
             "| system | precision | prefill side | ISL/OSL | clients | measured on | chunk a rank "
             "| measured / epsim prefill tok/s/GPU | epsim / measured | decoding, measured / "
             "epsim's cap | TTFT ratio | host work / step (exposed) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for r, x in sorted(picked, key=lambda p: (p[0]["system"], p[0]["precision"],
                                             p[0]["layout_as_run"], p[0]["isl"], p[0]["day"])):
        per_gpu, isl, chunk, gpus, decode_cap, step_s, waits = _sides(sample[r["id"]])
        side = r["layout_as_run"].split(" / ")[0]
        workers = int(side.rsplit(" x", 1)[1]) if " x" in side else 1
        measured = x * isl / (gpus * workers)
        decoding = x * (MEAN_LEN * r["osl"] - 1) * r["measured"]["tpot_ms"] * 1e-3   # Little
        if decoding < DECODE_BINDS * decode_cap:
            ratios.append(per_gpu / measured)
        lines.append(f"| {r['system']} | {r['precision']} | {side} | {r['isl']}/{r['osl']} | "
                     f"{r['concurrency']} | {r['day']} | {chunk} | {measured:,.0f} / "
                     f"{per_gpu:,.0f} | {per_gpu / measured:.2f} | {decoding:,.0f} / "
                     f"{decode_cap:,} | {r['ratio']:.2f} | {_host_share(isl, chunk, step_s, waits)} |")
    lines += ["", f"epsim's full prefill step over the measured plateau, where the decoding "
                  f"requests stay below {DECODE_BINDS:.0%} of epsim's decode cap (else the decode "
                  f"side binds): median {statistics.median(ratios):.2f} "
                  f"({min(ratios):.2f}-{max(ratios):.2f}) over {len(ratios)} series.",
              "", "Host work / step: the prefill server's per-request host work over epsim's "
                  "step (`epsim.cost.prefill_host`, SGLang 0.5.8 with NIXL), from one run of "
                  "pages at NIXL's measured descriptor cost to a run a page at the highest public "
                  "one; `event_loop_overlap_disagg_prefill` runs it under the next forward, so "
                  "only what outlasts that forward is exposed, or all of it where the forward "
                  "waits on the host (DeepEP normal mode, as epsim's prefill deployment states)."]
    return "\n".join(lines)


def table() -> str:
    rows = warm_runs()
    return "\n\n".join([
        f"Runs epsim predicts as stated, from warmed harnesses: {len(rows)} "
        f"(`{ROWS.relative_to(ROOT)}`).", by_load(rows), carried(rows), loop_rate(rows),
        saturated(rows)])


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "Where the TTFT misses under load",
                         "python benchmarks/silicon_ttft_load.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
