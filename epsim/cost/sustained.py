"""The clock a busy GPU holds through a prefill forward: op tables time bursts, at the boost clock.

Every op table epsim fits is timed in a burst on an idle GPU: aiconfigurator-core's collectors
replay a CUDA graph a few times after a short warm-up (`collector/helper.py`,
`benchmark_with_power`, power measurement off), our own records time short loops. A prefill
forward runs compute-bound GEMMs and attention back to back for tens of milliseconds to seconds,
long enough for the board's power limit to pull the SM clock down (docs/calibration.md, "Burst-
timed tables against sustained serving"). Decode steps stream weights and KV from HBM and keep the
full clock.

Measured (`python benchmarks/sustained_clock.py`, record `benchmarks/results/sustained_clock_h100/`):
one DeepSeek-V3 layer's prefill on one GPU of an EP-8 deployment (FP8 projections and experts,
causal attention over the prompt) sustained for 20-45 s after idle against the same layer's burst.
At 8192 tokens, four H100 hosts: 1.132, 1.135, 1.082 (`sweep/`) and 1.141 (`graph_sweep/`), mean
1.123. Along the forward's size, one host with the layer in a CUDA graph (`graph_sweep/`, `--graph`:
the only sweep whose small layers time the GPU rather than ~45 eager launches): 1.00 at 64-1024
tokens (the clock holds 1974-1980 MHz), 1.053 at 2048, 1.119 at 4096, 1.141 at 8192. The curve is
that sweep's shape at the four hosts' mean level: 1 + k (r(T) - 1), k = 0.123 / 0.141, a forward of
`T` tokens log2-interpolated between the measured sizes. Beyond 8192 the 8192 ratio holds: the
16384-token layer's burst (13 calls of 22 ms, ~290 ms) outlasts the ~100-400 ms in which the 8192
layer's clock fell (its ramp, call by call), so that burst is not at the boost clock and its 1.04
is not a sustained / burst ratio of the kind the op tables need.

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
# size: graph_sweep/'s ratios r(T) (64 = its decode layer) as 1 + k max(0, r(T) - 1), k scaling its
# 8192 ratio (1.141) to the four hosts' mean there (1.123); a ratio below 1 is noise (a clock that
# held), taken as 1 (tests/epsim/cost/test_sustained.py recomputes these from the records)
CURVE_TOKENS = (64.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0)
CURVE_RATIO = (1.0, 1.0001, 1.0, 1.0003, 1.0457, 1.1038, 1.1228)

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
