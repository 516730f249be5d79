"""The clock a busy GPU holds through a prefill forward: op tables time bursts, at the boost clock.

Every op table epsim fits is timed in a burst on an idle GPU: aiconfigurator-core's collectors
replay a CUDA graph a few times after a short warm-up (`collector/helper.py`,
`benchmark_with_power`, power measurement off), our own records time short loops. A prefill
forward runs compute-bound GEMMs and attention back to back for tens of milliseconds to seconds,
long enough for the board's power limit to pull the SM clock down (docs/calibration.md, "Burst-
timed tables against sustained serving"). Decode steps stream weights and KV from HBM and keep the
full clock.

Measured (`python benchmarks/sustained_clock.py`, record `benchmarks/results/sustained_clock_h100/`,
`sweep/` for the token axis): one DeepSeek-V3 layer's prefill on one GPU of an EP-8 deployment
(FP8 projections and experts, causal attention over the prompt, 8192 tokens) sustained for 45 s
after idle against the same layer's burst: 1.13x on two H100 hosts; the same layer at 64 tokens
(a decode step, 4096-token contexts) keeps its clock (1.00x). The ratio is a property of the
forward's size (how compute-bound its kernels are): a forward of `T` tokens on a GPU takes the
ratio at `T`, log2-interpolated between the two measured sizes (an assumption: no size between
them is measured), the end points' ratios beyond them.

Where it is measured and where it is carried (`SOURCES`): the H100 (700 W) is measured; the H200 is
the same GH100 die at the same 700 W limit; B200 is extrapolated, with one public kernel-level
figure beside it (FlashInfer PR #2899, 2026-03: BF16 FA4 attention on a B200 back to back, SM clock
1965 -> ~1580 MHz at ~1000 W, 1450 -> 1237 TFLOP/s, 1.17x; the H100's compute-bound GEMMs 1.16x);
the other Blackwell parts (B300, GB200, GB300: 1100-1400 W limits) are extrapolated with nothing
measured beside them. Applied to a step's device compute (attention, experts, shared experts,
block ops, dense layers and LM head), not to its collectives (NVLink- or network-bound) nor to host
time; only to prefill (extend) steps, whose forwards are long and compute-bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from epsim.cost.moe import MoECost
from epsim.cost.params import StepKindParams

# [points] tokens a GPU's forward runs, and sustained / burst time of the DeepSeek-V3 layer at that
# size: the decode layer (64 tokens) and the prefill layer (8192), each the mean of the two H100
# hosts' records (benchmarks/results/sustained_clock_h100/records.jsonl, second_host/; 1.018 and
# 0.988, 1.132 and 1.135); between them log2-interpolated (tests/epsim/cost/test_sustained.py
# holds these to the records)
CURVE_TOKENS = (64.0, 8192.0)
CURVE_RATIO = (1.0031, 1.1339)

SOURCES = {
    "H100": "measured on an H100 (700 W)",
    "H200": "measured on an H100, carried to the H200 (the same die at the same 700 W limit)",
    "H800": "measured on an H100, carried to the H800 (the same die at the same 700 W limit)",
    "B200": "measured on an H100, extrapolated to B200 (FlashInfer PR #2899's B200 figure: "
            "compute-bound attention 1.17x back to back, the H100's GEMMs 1.16x)",
}
EXTRAPOLATED = "measured on an H100, extrapolated to {gpu} (its power limit's ratio unmeasured)"


@dataclass(frozen=True)
class SustainedClock:
    """The sustained / burst ratio of a prefill forward by its size, on one GPU type.

    Attributes:
        gpu: the GPU's name (`HardwareSpec.name`).
        source: where the ratio comes from, for people (`SOURCES`).
        measured: whether it was measured on this GPU type (else carried from another).
    """

    gpu: str
    source: str
    measured: bool

    def factor(self, tokens: float) -> float:
        """Sustained / burst time of a forward of `tokens` tokens on one GPU: the curve in
        log2(tokens), its end points' ratios beyond it; 1 for an empty forward."""
        if tokens <= 0:
            return 1.0
        return float(np.interp(np.log2(tokens), _LOG_TOKENS, CURVE_RATIO))


_LOG_TOKENS = np.log2(np.array(CURVE_TOKENS))


def sustained_clock(gpu_name: str, enabled: bool = True) -> SustainedClock | None:
    """The ratio for a GPU named `gpu_name`, or None where it is not priced (`enabled` off:
    `deployment.sustained_clock`)."""
    if not enabled:
        return None
    return SustainedClock(gpu_name, SOURCES.get(gpu_name, EXTRAPOLATED.format(gpu=gpu_name)),
                          gpu_name == "H100")


def slowed_layer(slow: float, collectives_us: float, attn_us: float, shared_us: float,
                 moe: MoECost, step: StepKindParams) -> tuple[float, float, MoECost]:
    """One MoE layer's attention, shared experts and MoE device compute `slow` times longer:
    not the attention's TP collectives (`collectives_us`, inside `attn_us`), the exchanges, nor
    the eager host time inside the experts and block ops (`step.host_rows`, `block_ops_host`).
    Returns (attention µs, shared experts µs, the MoE layers' cost) as `CostModel.step` uses them.
    """
    expert_host = float(step.host_rows[moe.mode][1]) if moe.mode in step.host_rows else 0.0
    block_host = float(step.block_ops_host.get(moe.mode, 0.0))
    experts = moe.experts_us + (slow - 1.0) * np.maximum(moe.experts_us - expert_host, 0.0)
    block = moe.block_ops_us + (slow - 1.0) * np.maximum(
        np.asarray(moe.block_ops_us) - block_host, 0.0)
    return (collectives_us + (attn_us - collectives_us) * slow, shared_us * slow,
            replace(moe, experts_us=experts, block_ops_us=block))


def slowed_by_us(priced: tuple[float, float, MoECost], slowed: tuple[float, float, MoECost],
                 scale: float, num_layers: int) -> float:
    """What `slowed_layer` added to one step's MoE layers (µs): `priced` and `slowed` are
    (attention, shared experts, MoE cost) before and after; `scale` micro-batches a step."""
    (p_attn, p_shared, p_moe), (attn, shared, moe) = priced, slowed
    return (((attn - p_attn) + (shared - p_shared)) * scale * num_layers
            + (float(np.sum(moe.experts_us - p_moe.experts_us))
               + moe.block_ops_sum - p_moe.block_ops_sum) * scale)
