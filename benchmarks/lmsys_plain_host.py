"""The host time between forwards in LMSYS's MTP case study (16 H200, DP attention, 2 requests a
rank, 65,536-token prompts), part by part: a plain decode step of SGLang's normal loop against
a speculative (NEXTN, v1) cycle, as `epsim.cost.scheduler_host` prices them for
`scenarios/deepseek_v3_mtp_decode.yaml`, with two of SGLang 0.4.9.post2's host parts timed on
this CPU. Validation only: the published throughputs are set beside the sums, nothing is fitted.

    python benchmarks/lmsys_plain_host.py            # print
    python benchmarks/lmsys_plain_host.py --write    # also record benchmarks/results/lmsys_plain_host.md

What each loop runs between forwards (0.4.9.post2, `event_loop_normal_disagg_decode`, read from
the wheel): `recv_requests`' gloo broadcast over the 16 ranks (`broadcast_pyobj`, one size
tensor); `process_decode_queue` (empty queues: no poll, no all-reduce); `prepare_for_decode`
(a plain step) or the draft's preparation (a cycle); `prepare_mlp_sync_batch_raw`'s
`all_gather_into_tensor` over the TP group's gloo CPU group; `ForwardBatch.init_new`, the CUDA
graph's replay preparation and replay; a plain step's sampler (after the replay, under the graph)
and `next_token_ids.tolist()`; a cycle's draft graph, `build_tree` (under the draft graph), the
verify graph and its acceptance read-backs, `check_forward_draft_extend_after_decode`'s gloo
all-reduce, the draft extend's graph (the cycle's last launch: the result's and stream's loops
and the next iteration's broadcast and gather run under it until the next draft's allocation
reads `ret_values.item()`); `process_batch_result_decode` and `stream_output_generation`. A
cycle runs every collective and loop a plain step runs, plus its own: no host part is in the
plain step and not in the cycle.

Timed here (the fastest of 41 runs; a serving host's CPU is faster or slower, nobody here timed
one): (1) 0.4.9's `Req.init_incremental_detokenize`, which every streamed output runs and which
concatenates the whole prompt with the output (`origin_input_ids_unpadded + output_ids`, then a
slice): O(context) per request per output, at 65,536 prompt tokens and 2,048 output tokens
(mid-run); SGLang 0.5.3+ extends a kept list by the new tokens instead (epsim's `REQUEST_HOST_US`
is 0.5.9's); (2) `prepare_mlp_sync_batch_raw`'s CPU tensor work around its gather (the local
info tensor, the global buffer, four column `tolist`s and the TBO preparer's read-back), the
collective itself apart. Neither is in epsim's price (module doc of `epsim.cost.scheduler_host`:
the mlp-sync's host part is priced as 2 eager launches).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mtp_lmsys import CASES, SCENARIO  # noqa: E402
from recorded import recorded_main  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "lmsys_plain_host.md"
PROMPT, OUTPUT, REQUESTS, DP = 65_536, 2_048, 2, 16
REPEATS = 41
PUBLISHED_PLAIN, PUBLISHED_OVERLAP = 51.0, 60.4        # tokens/s per rank (mtp_lmsys.py)


def fastest_us(fn, repeats: int = REPEATS, inner: int = 20) -> float:
    """The fastest of `repeats` runs of `inner` calls of `fn`, per call (µs)."""
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best * 1e6


def detokenize_concat_us() -> float:
    """0.4.9's `init_incremental_detokenize` on one request of PROMPT + OUTPUT tokens (µs)."""
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(1000, 129_280, PROMPT)]
    output = [int(t) for t in rng.integers(1000, 129_280, OUTPUT)]
    surr_offset, read_offset = PROMPT - 5, PROMPT

    def run():
        all_ids = prompt + output
        return all_ids[surr_offset:], read_offset - surr_offset
    return fastest_us(run)


def mlp_sync_cpu_us() -> float:
    """`prepare_mlp_sync_batch_raw`'s CPU tensor work around its gather (µs), the gather a copy."""
    import torch
    local = [REQUESTS, 1, REQUESTS, 0, 0, 0]

    def run():
        info = torch.tensor(local, dtype=torch.int64)
        gathered = torch.empty((DP, 1, 6), dtype=torch.int64)
        gathered.view(DP, 6)[:] = info                   # stands in for the all-gather
        tokens = gathered[:, 0, 0].tolist()
        min(gathered[:, 0, 1].tolist())
        gathered[:, 0, 2].tolist()
        any(gathered[:, 0, 3].tolist())
        gathered[:, :, 4:6].tolist()                     # TboDPAttentionPreparer.compute_output
        return max(tokens)
    return fastest_us(run)


def ledgers() -> list[dict]:
    """Each case's host parts (µs a step) as epsim prices them, and its draft forwards."""
    from epsim.cost.attention import BatchCounts
    from epsim.sim.engine import Simulation
    from epsim.spec import load_scenario
    rows = []
    for name, overrides, published, _ in CASES:
        sim = Simulation(load_scenario(SCENARIO, overrides))
        host = sim.cost_model.scheduler_host
        row = {"case": name, "published": published, "exposed": host.exposed,
               "launches": host.launches, "launch_us": host.launches_us,
               "requests_us": host.requests_us(REQUESTS), "hidden_us": 0.0}
        for c, times in host.gloo_collectives:
            row[c] = host.gloo_part_us(c) * host.exposed
        if sim.draft is not None:        # its forwards at the run's middle context
            draft, context = sim.draft, PROMPT + OUTPUT
            req, z = np.full(DP, float(REQUESTS)), np.zeros(DP)
            rng = np.random.Generator(np.random.SFC64(0))
            tokens = req * draft.topk
            decode_us = (draft.steps - 1) * draft.forward_us(
                BatchCounts(tokens, tokens * (context + 1), z, z, z, tokens, "decode"), 0.0, rng)
            ext = req * (draft.steps + 1)
            extend_us = draft.forward_us(
                BatchCounts(ext, ext * (context + 1), z, z, z, req, "decode"), 0.0, rng)
            row["hidden_us"] = float(draft.cost_model.scheduler_host.hidden_us(
                decode_us, extend_us, float(REQUESTS)))
            row["draft_gpu_us"] = decode_us + extend_us
        row["exposed_us"] = (host.step_us + row["requests_us"] - row["hidden_us"])
        rows.append(row)
    return rows


def price_table(rows: list[dict]) -> list[str]:
    """The first section: epsim's price of each case's host parts (deterministic)."""
    lines = ["## epsim's price of the host time between forwards (µs a step or cycle)", "",
             "| case | eager launches | gloo broadcast | gloo all-gather (DP info) | gloo "
             "all-reduce (draft-extend check) | per-request loops (2) | under the draft's "
             "graphs | exposed |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['launches'] if r['exposed'] else 0} = "
            f"{r['launch_us'] * r['exposed']:.0f} | {r.get('broadcast', 0.0):.0f} | "
            f"{r.get('all_gather', 0.0):.0f} | {r.get('all_reduce', 0.0):.0f} | "
            f"{r['requests_us']:.0f} | -{r['hidden_us']:.0f} | {r['exposed_us']:.0f} |")
    return lines


def table() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # EP 16 outside the one-node fits: known
        rows = ledgers()
    concat_us, sync_us = detokenize_concat_us(), mlp_sync_cpu_us()
    lines = price_table(rows)
    plain = next(r for r in rows if r["case"] == "no MTP")
    implied_us = (2 / PUBLISHED_PLAIN - 2 / PUBLISHED_OVERLAP) * 1e6
    spec = [r for r in rows if "draft_gpu_us" in r]
    lines += ["", "## SGLang 0.4.9.post2 host parts epsim does not price, timed on this CPU", "",
              "| part | µs | a plain step (2 requests) | a cycle (2 requests) |",
              "|---|---:|---:|---:|",
              f"| `init_incremental_detokenize`: prompt + output list concatenated, "
              f"{PROMPT:,} + {OUTPUT:,} tokens, a request | {concat_us:.0f} | "
              f"{REQUESTS * concat_us:.0f} | {REQUESTS * concat_us:.0f} |",
              f"| `prepare_mlp_sync_batch_raw`'s CPU tensor work (the gather apart) | "
              f"{sync_us:.0f} | {sync_us:.0f} | {sync_us:.0f} |", "",
              "## Beside the published pair (validation only)", "",
              f"Published: {PUBLISHED_PLAIN} tokens/s per rank without overlap, "
              f"{PUBLISHED_OVERLAP} with: a plain step exposes about "
              f"{implied_us / 1e3:.2f} ms of host time (2 / {PUBLISHED_PLAIN} - 2 / "
              f"{PUBLISHED_OVERLAP} s). epsim exposes {plain['exposed_us'] / 1e3:.2f} ms; the "
              f"0.4.9 parts timed above add {(REQUESTS * concat_us + sync_us) / 1e3:.2f} ms to "
              f"a step and as much to a cycle. A cycle's own parts (its launches beyond the "
              f"step's, the draft-extend check's all-reduce) come to "
              + ", ".join(f"{(r['exposed_us'] + r['hidden_us'] - plain['exposed_us']) / 1e3:.2f}"
                          f" ms ({r['case']})" for r in spec)
              + " more than a plain step's; its draft's graphs hide "
              + ", ".join(f"{r['hidden_us'] / 1e3:.2f} of {r['draft_gpu_us'] / 1e3:.2f} ms"
                          for r in spec)
              + ", so a cycle exposes "
              + ", ".join(f"{(r['exposed_us'] - plain['exposed_us']) / 1e3:+.2f} ms" for r in spec)
              + " against a plain step. Any price per gloo message or per launch that "
              "raised the plain step toward the published figure raises a cycle more."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "The host time between forwards in LMSYS's MTP "
                         "case study", "python benchmarks/lmsys_plain_host.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
