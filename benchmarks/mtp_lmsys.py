"""MTP speculative decoding against one published measurement (validation only, nothing fitted).

    python benchmarks/mtp_lmsys.py            # print
    python benchmarks/mtp_lmsys.py --write    # also record benchmarks/results/mtp_lmsys.md

LMSYS, "Accelerating SGLang with Multiple Token Prediction" (2025-07-17, lmsys.org/blog/
2025-07-17-mtp), case study 1, quoted: "we deploy two decoding nodes across a total of 16 H200
GPUs, running 2 concurrent requests per rank with input sequence length of 65,536 tokens and
output sequence length of 4,096 tokens. As baseline, we tested the case with no MTP and no
overlap scheduling, and the system achieves an output throughput of 51 tokens/sec per rank."
"With a 3-token MTP window and topk=1, the system achieves a throughput of 81.5 tokens/sec per
rank, with an average acceptance length of 2.18 tokens." "With a 4-token MTP window and topk=1,
throughput increases to 82.0 tokens/sec per rank, with an average acceptance length of 2.44
tokens." "Using overlap scheduling alone, a feature introduced in SGLang v0.4, we achieved
60.4 tokens/sec per rank" (no MTP): the scheduler's host work hidden under the forward, so the
two runs without MTP part the step into the GPU's forward and the host time between forwards.
Decode settings: SGLang's reproduction instructions (sgl-project/sglang#7998, "Using Main
Branch", 2025-07-13), in `scenarios/deepseek_v3_mtp_decode.yaml`.

The scenario is run as shipped (2 draft steps, accept length 2.18), without speculative
decoding (with and without overlap scheduling), and at 3 draft steps (accept length 2.44); the
accept lengths are the measurement's conditions. Each run starts with its 32 requests part-way
through their outputs and reports its output tokens per second per rank over the window (every
rank is one GPU), the scheduler's host time priced in its step (`epsim.cost.scheduler_host`;
a speculative cycle's draft graphs hide part of it, which the draft share is net of:
`benchmarks/lmsys_plain_host.py` gives the parts) and the speed-up over the run without MTP,
beside the published ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "deepseek_v3_mtp_decode.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "mtp_lmsys.md"
OFF = {f"deployment.speculative_{k}": None for k in ("algorithm", "num_steps", "eagle_topk",
                                                       "num_draft_tokens", "accept_length")}
CASES = (  # (name, overrides, published tokens/s per rank, published accept length)
    ("no MTP", OFF, 51.0, None),
    ("no MTP, overlap scheduling", {**OFF, "deployment.disable_overlap_schedule": False}, 60.4,
     None),
    ("MTP, 3-token window (2 steps)", {}, 81.5, 2.18),
    ("MTP, 4-token window (3 steps)", {"deployment.speculative_num_steps": 3,
                                       "deployment.speculative_num_draft_tokens": 4,
                                       "deployment.speculative_accept_length": 2.44}, 82.0, 2.44),
)


def run() -> list[dict]:
    """One row per case: predicted and published throughput per rank, speed-ups, accept length."""
    from epsim.report import summarize
    from epsim.sim.engine import Simulation
    from epsim.spec import load_scenario
    rows = []
    for name, overrides, published, accept in CASES:
        sim = Simulation(load_scenario(SCENARIO, overrides))
        host_ms = sim.cost_model.scheduler_host.step_us / 1e3
        s = summarize(sim.run())
        rows.append({"case": name, "published": published, "accept": accept, "host_ms": host_ms,
                     "predicted": s["output_tokens_per_s_per_gpu"],
                     "accept_run": s["bench_serving"].get("accept_length"),
                     "step_ms": s["step_ms"]["mean"], "tpot_ms": s["tpot_ms"]["mean"],
                     "attention": s["time_breakdown_frac"]["attention"],
                     "draft": s["time_breakdown_frac"]["draft"]})
    base = rows[0]
    for row in rows:
        row["speedup"] = row["predicted"] / base["predicted"]
        row["published_speedup"] = row["published"] / base["published"]
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | accept length (given / run) | step (ms) | of it scheduler host (ms) | "
             "TPOT (ms) | attention share | "
             "draft share | tokens/s per rank: epsim | published | error | speed-up: epsim | "
             "published |", "|" + "---|" * 12]
    for r in rows:
        accept = "-" if r["accept"] is None else f"{r['accept']:.2f} / {r['accept_run']:.2f}"
        lines.append(f"| {r['case']} | {accept} | {r['step_ms']:.2f} | {r['host_ms']:.2f} | "
                     f"{r['tpot_ms']:.2f} | "
                     f"{r['attention']:.0%} | {r['draft']:.1%} | {r['predicted']:.1f} | "
                     f"{r['published']:.1f} | {r['predicted'] / r['published'] - 1:+.1%} | "
                     f"{r['speedup']:.3f} | {r['published_speedup']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "MTP against LMSYS's measurement",
                         "python benchmarks/mtp_lmsys.py --write", lambda: table(run()))


if __name__ == "__main__":
    sys.exit(main())
