"""How much of epsim's too-fast MTP TPOT is MTP's own (issues 38, 39): each MTP row of the
whole-set record against its no-MTP twin, and what SGLang 0.5.8-0.5.9 runs at large batch.

    python benchmarks/mtp_twins.py            # print
    python benchmarks/mtp_twins.py --write    # also record benchmarks/results/mtp_twins.md

The record (benchmarks/results/silicon_rows.json.gz; validation data: read, never fitted) holds
InferenceX rows run with MTP (EAGLE over DeepSeek's MTP module: the row's assumptions name the
`speculative_*` flags) and, for some, a twin: the same system, precision, ISL/OSL, layout and
clients run by the recipe without MTP (Dynamo P/D: `dsr1-*-dynamo-sglang` and its `-mtp` key,
the same workers). epsim predicts both from one model, so the ratio of their errors,

    F = (epsim / measured, MTP row) / (epsim / measured, no-MTP twin)
      = measured speed-up from MTP / epsim's speed-up from MTP,

takes out what the two share (the decode step's own pricing, the prefill's in agg, the system)
and leaves what MTP adds: its accept length and the verify cycle's price against a decode step.
F < 1: epsim's MTP is too fast for its own no-MTP step. Twins with several no-MTP runs take their
errors' geometric mean. The agg B200 FP8 TP8 rows at 4-64 clients are ambiguous (both keys ran
them in one push, `agg_recipes`): the record keeps both candidates' predictions (`spread`), and
here the lower measured TPOT is read as the MTP run's, a diagnostic reading only (as
`benchmarks/mtp_b200_verify.py`). 128-512 clients of agg ran MTP alone: beside them, the no-MTP
agg TP8 rows of the same system at that many clients, any precision (what agg's own pricing
misses there with no MTP at all).

Nothing here is fitted or set: the tables are a diagnosis (`READING`).
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from recorded import recorded_main

from epsim.sim.accept_sources import SOURCES, chain_mean

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "mtp_twins.md"
# the accept length epsim gives these rows at their 2 draft steps (`workload.prompt_kind`
# random_chat: InferenceX PR #649's random ids in the chat template, `epsim.sim.accept_sources`)
ACCEPT_LENGTH = chain_mean(SOURCES["random_chat"].rate, 2)
AGG_LAYOUT = "tp8 dp1 moe_tp8 ep1"    # the agg MTP rows' (InferenceX: MTP ran TP8 only)
BANDS = ((1, 16, "1-16"), (17, 64, "32-64"), (65, 100000, "128+"))

READING = """## Reading

- MTP's own part (table 1): where a no-MTP twin ran the same deployment, at few clients epsim's
  MTP now sits near its own no-MTP prediction (F about 1 at 1-16 clients, agg and disagg), at
  the accept length of the prompts the rows sent (2.17 tokens a verify step at 2 draft steps:
  InferenceX PR #649's random ids in the chat template, `epsim.sim.accept_sources`; their client
  greedy, `temperature` 0.0 in `utils/bench_serving/backend_request_func.py`), where the
  DeepSeek-V3 report's text rate (2.57) had left F about 0.8 there. F then falls with the
  clients (agg 32-64, disagg 128+): the verify cycle priced too cheap against a decode step as
  the batch grows (`mtp_b200_verify.md`, tables 2-3: the verify step's MoE at 3b tokens after
  autotune against AIC's untuned B200 table). A reading of validation rows, never a setting.
- The agg rows of 128-512 clients ran MTP alone, so F cannot be read there. Agg's own pricing
  (table 2) is about right for FP8 without MTP at 4-64 clients (the ambiguous twins' no-MTP
  side, table 1) but 1.30x short at the one FP8 8k/1k twin (SGLang 0.5.6, 64 clients), and the
  FP4 rows are short at every client count (their own gap): an MTP row at 128-512 clients
  carries agg's own gap there, unmeasured without MTP on FP8, and MTP's F together.
- What SGLang 0.5.9 runs for these rows (`lmsysorg/sglang:v0.5.9-cu130`; the wheel's source),
  ruled out as the cause of the growth, each checked against epsim:
  - the scheduler: `dsr1_fp8_b200_mtp.sh` sets `SGLANG_ENABLE_SPEC_V2=1` as a shell variable,
    never exported (`benchmarks/benchmark_lib.sh` has no `set -a`), so the server runs the v1
    `EAGLEWorker`, and `ServerArgs._handle_speculative_decoding` turns overlap scheduling and
    mixed chunked prefill off: what epsim prices (`epsim.cost.scheduler_host.overlap_disabled`).
  - CUDA graphs: `_generate_cuda_graph_batch_sizes` (speculative list) and
    `get_batch_sizes_to_capture` reach `cuda_graph_max_bs` 512 for the verify
    (`TARGET_VERIFY`, b x 3 tokens), the draft's decode and its extend runners alike.
  - verify sampling: greedy (`verify_tree_greedy_func`); the softmax / top-k / top-p
    renormalisation over b x 3 x vocab (sglang#6949's cost) runs only when sampling.
  - the all-reduce: `apply_flashinfer_allreduce_fusion` holds to 2048 tokens, past a 512-request
    verify's 1536.
  - MoE tactics: `ModelRunner._flashinfer_autotune` tunes the target's `flashinfer_trtllm` MoE
    on a `TARGET_VERIFY` dummy run of `req_to_token_pool.size` x 3 tokens, so the verify's
    token counts are autotuned like a decode step's (epsim prices the cheapest candidate).
  - the receive interval: after a cycle the batch's mode is restored to `DECODE`
    (`forward_draft_extend_after_decode`), weight 1 in `SchedulerRecvSkipper`, as
    `epsim.sim.recv` counts a verify step.
  - the verify's attention: `trtllm_mla` runs it as one decode kernel call with 3 query rows a
    request (`forward_extend`, `trtllm_batch_decode_with_kv_cache_mla`); epsim prices 3b decode
    rows, each reading its context (`mla_attention_us` over `verify_counts`): if anything high.
  - the logits: the vocab-parallel LM head's logits are all-gathered over the TP ranks
    (`LogitsProcessor._get_logits`), b x 3 rows of 129,280 BF16 in a verify (397 MB at 512
    requests); epsim prices the LM head's GEMM, not this gather, which NVLink moves in well
    under a millisecond (an estimate from the bytes alone).
  - the draft: `speculative_moe_runner_backend` becomes `auto` when the target's is
    `flashinfer_trtllm`, and `auto` resolves to Triton (`Fp8MoEMethod.create_moe_runner`:
    DeepGEMM only with JIT DeepGEMM, which the script exports off, and DeepEP): a kernel epsim
    does not price (it prices the draft's MoE as the target's), but one MTP layer's MoE, two
    forwards a cycle, a few % of it (`mtp_b200_verify.md`, table 2).
  - per-request host work: the v1 verify appends and checks each accepted token of each request
    in Python (`EagleVerifyInput.verify`), and the scheduler's result processing and
    `stream_output` loop over the batch, all exposed with overlap off; epsim does not price it
    (`epsim.cost.scheduler_host`). To carry the agg gap alone it would cost what table 3's last
    column says a request a cycle, and that grows with the input length (8k/1k several times
    1k/1k), which per-request bookkeeping does not.
- How the benchmark counts (InferenceX `utils/bench_serving`, the index's version): a request's
  TPOT is (latency - TTFT) / (completion tokens - 1), the tokens from the server's usage, so a
  streamed chunk of several accepted tokens counts each (`calculate_metrics`), and the row is
  the mean over requests: nothing in it changes with the batch. Its random dataset
  (`sample_random_requests`) builds a prompt from consecutive token ids, what an accept length
  for these rows depends on.
- What would close it: the accept length these prompts give (SGLang logs `accept len` in its
  decode lines: a run of the recipe, or a published figure for random-token prompts), then the
  verify step's MoE at 3b tokens after autotune measured against the decode step's (the open
  item of `mtp_b200_verify.md`), then agg's own gap at 128+ clients without MTP.
"""


def record_rows() -> list[dict]:
    """The whole-set record's entries (`RECORD`)."""
    return json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]


def ran_mtp(entry: dict) -> bool:
    """Whether epsim predicted the row with MTP (its assumptions name the speculative flags)."""
    return "speculative" in " ".join(entry["epsim"].get("assumptions", []))


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def band(clients: int) -> str:
    return next(name for lo, hi, name in BANDS if lo <= clients <= hi)


def twin_factors(rows: list[dict]) -> list[dict]:
    """One dict per MTP row with a no-MTP twin (module doc): system, mode, precision, shape,
    layout, clients, the two ratios epsim / measured, F. Rows repeated across the record's dates
    (the same measurement) count once."""
    groups: dict[tuple, dict] = defaultdict(lambda: {"mtp": {}, "base": defaultdict(dict)})
    for r in rows:
        e = r["epsim"]
        key = (r["system"], r["mode"], r["precision"], r["isl"], r["osl"], r["layout"])
        measured_ms = r["measured"]["tpot_ms"]
        if e.get("status") == "predicted" and e.get("tpot_ms"):
            side = groups[key]["mtp"] if ran_mtp(r) else groups[key]["base"][r["concurrency"]]
            side[(r["concurrency"], round(measured_ms, 3))] = e["tpot_ms"] / measured_ms
        elif "spread" in e and r["mode"] == "agg":      # the ambiguous agg twins (module doc)
            cands = {c["deployment"].split(",")[0]: c["tpot_ms"]
                     for c in e["spread"]["candidates"] if c.get("tpot_ms")}
            if set(cands) == {"without MTP", "with MTP"}:
                groups[key].setdefault("ambiguous", defaultdict(dict))[r["concurrency"]][
                    round(measured_ms, 3)] = cands
    out = []
    for key, g in sorted(groups.items()):
        for (clients, _), mtp_ratio in sorted(g["mtp"].items()):
            base = list(g["base"].get(clients, {}).values())
            if base:
                out.append(_factor(key, clients, mtp_ratio, geomean(base), "twin"))
        for clients, by_measured in sorted(g.get("ambiguous", {}).items()):
            if len(by_measured) != 2:
                continue
            low, high = sorted(by_measured)            # the lower read as the MTP run's
            cands = by_measured[low]
            out.append(_factor(key, clients, cands["with MTP"] / low,
                               cands["without MTP"] / high, "ambiguous"))
    return out


def _factor(key: tuple, clients: int, mtp_ratio: float, base_ratio: float, kind: str) -> dict:
    system, mode, precision, isl, osl, layout = key
    return dict(system=system, mode=mode, precision=precision, shape=f"{isl}/{osl}",
                layout=layout, clients=clients, mtp=mtp_ratio, base=base_ratio,
                factor=mtp_ratio / base_ratio, kind=kind)


def twin_table(factors: list[dict]) -> list[str]:
    """Table 1: every twin pair, then F by mode and clients."""
    lines = ["| system | mode | precision | ISL/OSL | layout | clients | pair | epsim / measured, "
             "MTP | no MTP | F |", "|---|---|---|---|---|---:|---|---:|---:|---:|"]
    lines += [f"| {f['system']} | {f['mode']} | {f['precision']} | {f['shape']} | {f['layout']} | "
              f"{f['clients']} | {f['kind']} | {f['mtp']:.2f} | {f['base']:.2f} | "
              f"{f['factor']:.2f} |" for f in factors]
    lines += ["", "F by mode and clients (geometric mean, range, pairs):", "",
              "| mode | clients | F | range | pairs |", "|---|---|---:|---|---:|"]
    by: dict[tuple, list[float]] = defaultdict(list)
    for f in factors:
        by[(f["mode"], band(f["clients"]))].append(f["factor"])
    order = [name for _, _, name in BANDS]
    for (mode, name), vals in sorted(by.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        lines.append(f"| {mode} | {name} | {geomean(vals):.2f} | {min(vals):.2f}-{max(vals):.2f} "
                     f"| {len(vals)} |")
    return lines


def agg_context(rows: list[dict]) -> list[str]:
    """Table 2: B200 agg rows of the MTP rows' layout (`AGG_LAYOUT`), measured / epsim TPOT by
    shape and clients: no MTP (any precision, predicted rows) beside the MTP-only rows."""
    seen: dict[tuple, float] = {}
    for r in rows:
        e = r["epsim"]
        if (r["system"], r["mode"], r["layout"]) != ("b200_sxm", "agg", AGG_LAYOUT) \
                or e.get("status") != "predicted" or not e.get("tpot_ms"):
            continue
        key = ("MTP" if ran_mtp(r) else "no MTP", r["precision"], f"{r['isl']}/{r['osl']}",
               r["concurrency"], round(r["measured"]["tpot_ms"], 3))
        seen[key] = e["tpot_ms"] / r["measured"]["tpot_ms"]
    cells: dict[tuple, list[float]] = defaultdict(list)
    for (kind, precision, shape, clients, _), ratio in seen.items():
        cells[(shape, kind, precision, clients)].append(ratio)
    clients_all = sorted({k[3] for k in cells})
    lines = ["| ISL/OSL | run | precision | " + " | ".join(f"c{c}" for c in clients_all) + " |",
             "|---|---|---|" + "---:|" * len(clients_all)]
    for shape, kind, precision in sorted({k[:3] for k in cells}):
        vals = [cells.get((shape, kind, precision, c)) for c in clients_all]
        lines.append(f"| {shape} | {kind} | {precision} | " + " | ".join(
            "-" if v is None else f"{1.0 / geomean(v):.2f}x" for v in vals) + " |")
    return lines


def residual_table(rows: list[dict], accept_at_few: dict[str, float]) -> list[str]:
    """Table 3: the agg MTP-only rows' gap a cycle if epsim's accept length were the one its
    4-client twins imply (`accept_at_few`, by shape; a diagnostic), and that gap per request."""
    lines = ["| ISL/OSL | clients | measured TPOT | epsim TPOT | epsim at the implied accept "
             "length | gap a cycle, ms | per request, µs |", "|---|---:|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in sorted(rows, key=lambda r: (r["isl"], r["osl"], r["concurrency"])):
        shape = f"{r['isl']}/{r['osl']}"
        if (r["system"], r["mode"], r["precision"]) != ("b200_sxm", "agg", "fp8") \
                or not ran_mtp(r) or shape not in accept_at_few or r["epsim"].get("status") != "predicted":
            continue
        key = (shape, r["concurrency"])
        if key in seen:
            continue
        seen.add(key)
        accept = accept_at_few[shape]
        measured_ms, epsim_ms = r["measured"]["tpot_ms"], r["epsim"]["tpot_ms"]
        scaled_ms = epsim_ms * ACCEPT_LENGTH / accept
        gap_ms = (measured_ms - scaled_ms) * accept
        lines.append(f"| {shape} | {r['concurrency']} | {measured_ms:.1f} | {epsim_ms:.1f} | "
                     f"{scaled_ms:.1f} | {gap_ms:.1f} | {1e3 * gap_ms / r['concurrency']:.0f} |")
    return lines


def implied_accept(factors: list[dict]) -> dict[str, float]:
    """epsim's accept length x F of the agg B200 FP8 ambiguous twins at 4 clients, by shape (a
    diagnostic reading of validation rows: table 3 only)."""
    return {f["shape"]: ACCEPT_LENGTH * f["factor"] for f in factors
            if (f["system"], f["mode"], f["precision"], f["clients"]) == ("b200_sxm", "agg", "fp8", 4)}


def make() -> str:
    rows = record_rows()
    factors = twin_factors(rows)
    accept = implied_accept(factors)
    lines = ["## 1. MTP rows against their no-MTP twins (TPOT; validation only)", ""]
    lines += twin_table(factors)
    lines += ["", "## 2. B200 agg TP8 (MoE TP8): measured / epsim TPOT by clients, with and without MTP", ""]
    lines += agg_context(rows)
    lines += ["", "## 3. B200 FP8 agg MTP-only rows: the gap a verify cycle leaves", "",
              f"At the accept length the 4-client ambiguous twins imply (epsim's {ACCEPT_LENGTH:.2f} x F: " +
              ", ".join(f"{s}: {a:.2f}" for s, a in sorted(accept.items())) +
              f"; a diagnostic), epsim's TPOT scaled by {ACCEPT_LENGTH:.2f} / it, and what is left a cycle "
              "((measured - scaled) x accept length), also per request of the batch.", ""]
    lines += residual_table(rows, accept)
    lines += ["", READING.rstrip()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(recorded_main(None, __doc__, RESULTS, "MTP against its no-MTP twins",
                           "python benchmarks/mtp_twins.py --write", make))
