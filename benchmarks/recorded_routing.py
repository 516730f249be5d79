"""What SGLang's recorded DeepSeek-V3 expert loads imply for an EP deployment (issue 39): how
unequal the experts are, how few of them a small batch activates, and how much more than its
share the busiest EP rank serves, against the uniform routing epsim's silicon rows assumed
before. Calibration data only (router counts): nothing here reads a measured time.

    python benchmarks/recorded_routing.py [--write]

For each vendored recording (`epsim.routing.recorded`, epsim/data/routing/PROVENANCE.md), over
DeepSeek-V3's 58 MoE layers, from the recording's shares `q` (per layer, summing to 1, capped at
1/top_k as the simulator caps them, `epsim.routing.popularity.cap_shares`):

1. the hottest expert's share over the mean share (max q * 256), and the Gini coefficient;
2. the expected number of distinct experts a batch of B tokens activates in a layer, each token
   picking top-8: sum_e 1 - (1 - 8 q_e)^B (tokens independent; 8 q_e is the chance a token picks
   expert e), against uniform routing's 256 (1 - (1 - 8/256)^B);
3. the busiest EP rank's load over the mean rank load, in expectation (infinite batch): under
   the trivial placement (experts in order; EP 72 needs 32 redundant slots, which repeat experts
   0-31, each replica taking an equal part of its expert's tokens) and under DeepSeek's EPLB of
   the same loads with 32 redundant experts (the wide-EP scripts' `--ep-num-redundant-experts
   32`; hierarchical over nodes of 8 ranks where the 8 expert groups divide over the nodes,
   global otherwise, as the reference algorithm chooses).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recorded import recorded_main  # noqa: E402

from epsim.cost.tables import contiguous_placement  # noqa: E402
from epsim.eplb import Placement, compute_placement  # noqa: E402
from epsim.routing import cap_shares, gini, read_trace  # noqa: E402
from epsim.routing.recorded import RECORDINGS  # noqa: E402
from epsim.routing.trace import moe_layers  # noqa: E402

NUM_MOE_LAYERS, NUM_EXPERTS, TOP_K, NUM_GROUPS = 58, 256, 8, 8      # DeepSeek-V3
BATCH_TOKENS = (1, 8, 32, 64, 128, 256, 512, 2048)
EP_SIZES = (8, 16, 32, 72)
REDUNDANT = 32
RANKS_PER_NODE = 8
RESULT = ROOT / "benchmarks" / "results" / "recorded_routing.md"


def shares_of(recording) -> np.ndarray:
    """[layers, experts] capped shares of a recording's MoE layers."""
    counts = moe_layers(read_trace(recording.path), NUM_MOE_LAYERS).sum(axis=0)  # [layers, experts]
    return cap_shares(counts / counts.sum(axis=1, keepdims=True), TOP_K)


def distinct_experts(shares: np.ndarray, num_tokens: int) -> np.ndarray:
    """[layers] expected distinct experts `num_tokens` top-k tokens activate (module doc, 2)."""
    return (1.0 - (1.0 - TOP_K * shares) ** num_tokens).sum(axis=1)


def busiest_rank(shares: np.ndarray, ep_size: int, eplb: bool) -> np.ndarray:
    """[layers] busiest rank's load / mean rank load (module doc, 3)."""
    redundant = REDUNDANT if eplb or NUM_EXPERTS % ep_size else 0
    num_nodes = max(ep_size // RANKS_PER_NODE, 1)
    if eplb:
        placement = compute_placement("deepseek", shares, NUM_EXPERTS + redundant, NUM_GROUPS,
                                      num_nodes, ep_size)
    else:
        placement = Placement.from_physical_to_logical(
            contiguous_placement(NUM_MOE_LAYERS, NUM_EXPERTS, ep_size, redundant), NUM_EXPERTS,
            ep_size)
    loads = placement.rank_loads(shares, selection="random")           # [layers, ranks]
    return loads.max(axis=1) / loads.mean(axis=1)


def _spread(values: np.ndarray, fmt: str = "{:.2f}") -> str:
    """median (min-max) over layers."""
    return (f"{fmt.format(np.median(values))} ({fmt.format(values.min())}-"
            f"{fmt.format(values.max())})")


def make() -> str:
    loaded = [(r, shares_of(r)) for r in RECORDINGS]
    uniform = np.full((1, NUM_EXPERTS), 1.0 / NUM_EXPERTS)
    out = ["Per recording, over the 58 MoE layers: median (min-max). Uniform routing: max/mean "
           "1, Gini 0.", "",
           "## Expert popularity", "",
           "| recording | hottest expert / mean | Gini | experts holding half the slots |",
           "|---|---|---|---|"]
    for r, q in loaded:
        half = (np.cumsum(np.sort(q, axis=1)[:, ::-1], axis=1) < 0.5).sum(axis=1) + 1
        out.append(f"| {r.name} | {_spread(q.max(axis=1) * NUM_EXPERTS)} | {_spread(gini(q))} | "
                   f"{_spread(half.astype(float), '{:.0f}')} (uniform 128) |")
    out += ["", "## Distinct experts a batch of B tokens activates (of 256)", "",
            "| recording | " + " | ".join(f"B={b}" for b in BATCH_TOKENS) + " |",
            "|---|" + "---|" * len(BATCH_TOKENS),
            "| uniform | " + " | ".join(f"{distinct_experts(uniform, b)[0]:.1f}"
                                       for b in BATCH_TOKENS) + " |"]
    for r, q in loaded:
        out.append(f"| {r.name} | " + " | ".join(
            f"{np.mean(distinct_experts(q, b)):.1f}" for b in BATCH_TOKENS) + " |")
    out += ["", "Mean over layers. The ratio recorded/uniform is the share of the routed "
            "experts' weight bytes a memory-bound decode step reads, against uniform routing.",
            "", "## Busiest EP rank's load / mean rank load (infinite batch)", "",
            "| recording | placement | " + " | ".join(f"EP {e}" for e in EP_SIZES) + " |",
            "|---|---|" + "---|" * len(EP_SIZES)]
    flat = np.full((NUM_MOE_LAYERS, NUM_EXPERTS), 1.0 / NUM_EXPERTS)
    for name, q in [("uniform", flat)] + [(r.name, q) for r, q in loaded]:
        for eplb in (False, True):
            label = f"EPLB deepseek, +{REDUNDANT} redundant" if eplb else "trivial"
            out.append(f"| {name} | {label} | " + " | ".join(
                _spread(busiest_rank(q, e, eplb)) for e in EP_SIZES) + " |")
    out += ["", f"Trivial at EP 72: {NUM_EXPERTS} experts + {REDUNDANT} redundant slots "
            "(SGLang refuses EP that does not divide the experts without them; the replicated "
            "experts' ranks serve less, so even uniform routing's busiest rank is above the "
            "mean). These are the recordings' long-run averages: a single batch's routing can "
            "be more concentrated (tokens of one prompt share experts), which this does not "
            "show."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULT, "SGLang's recorded DeepSeek-V3 expert loads",
                         "python benchmarks/recorded_routing.py --write", make)


if __name__ == "__main__":
    raise SystemExit(main())
