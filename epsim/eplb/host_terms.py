"""A stop-the-world rebalance as SGLang and vLLM run it, one term per step of their code.

Each term is a time with its source: the code path it models and where its value comes from
(a measurement of ours, `any/rebalance_host` of the profile, or the link model of
`epsim.eplb.cost`). The steps, in order (SGLang `EPLBManager.rebalance`, vLLM
`EplbState.rearrange`):

  gather      the expert-load window summed over the EP ranks: one all-reduce of int32 counts
              (SGLang `expert_distribution._StatAccumulator.dump`: [buffer steps, layers,
              experts]; vLLM: the window summed first, [layers, physical] int64); ring
              all-reduce, 2 (n-1)/n x bytes at the scale-out bandwidth + 2 (n-1) link latencies;
  algorithm   the placement algorithm on the host, one thread (SGLang sets
              `torch.set_num_threads(1)` on GPU workers): the fitted line of the implementation
              the engine runs (`any/rebalance_host`);
  moves       the weight moves, layer by layer (`epsim.eplb.cost.rebalance_cost` with one
              point-to-point op per weight tensor of an expert, as SGLang's
              `update_expert_weights_single_layer` and vLLM's `move_to_buffer` post them);
  map_update  the placement maps rewritten per layer chunk (SGLang
              `ExpertLocationMetadata.update`: a `torch.where` per map). Timed on a CPU by the
              bench, but the engines run it on the GPU: not in the sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epsim.errors import PlacementError

ENGINE_ALGORITHM = {
    # SGLang 0.4.6.x (`managers/deepseek_eplb.py`, May-June 2025): the chunkwise algorithm over
    # every step of the recorder's buffer; its prefill path runs on the CPU
    "sglang_0.4.6_prefill": "sglang046_prefill",
    # DeepSeek's reference `eplb.py` as SGLang >= 0.4.7 ships it (torch on the CPU)
    "sglang_reference_hierarchical": "sglang_reference_hierarchical",
    "sglang_reference_global": "sglang_reference_global",
    # vLLM's default policy is the same greedy algorithm in numpy with a Python loop per item;
    # timed here as ours (`epsim.eplb.deepseek`, numpy, the same loop structure)
    "vllm_default": "deepseek",
}


def host_us(params: dict[str, float], key: str, work: float) -> float:
    """Fitted host time (µs) of implementation `key` on `work` units (`any/rebalance_host`:
    `coef_us * work ** exponent`).

    Raises:
        PlacementError: the profile has no measurement of `key`.
    """
    coef, exponent = params.get(f"{key}_coef_us"), params.get(f"{key}_exponent")
    if coef is None or exponent is None:
        known = sorted(k[:-len("_coef_us")] for k in params if k.endswith("_coef_us"))
        raise PlacementError(f"host term ({key!r}) has no measurement in the profile's "
                             f"any/rebalance_host; measured: {known or 'none'} "
                             f"(python -m live.bench.eplb_host)")
    return coef * work ** exponent


def allreduce_us(num_bytes: float, num_ranks: int, link_gbps: float, latency_us: float) -> float:
    """Ring all-reduce of `num_bytes` over `num_ranks`: 2 (n-1)/n x bytes / bandwidth + 2 (n-1)
    latencies (µs; GB/s = 1e9 bytes/s)."""
    if num_ranks <= 1:
        return 0.0
    steps = 2 * (num_ranks - 1)
    return steps / num_ranks * num_bytes / (link_gbps * 1e3) + steps * latency_us


@dataclass(frozen=True)
class Term:
    """One step of a rebalance: its time (µs) and where the value comes from."""

    us: float
    source: str


@dataclass(frozen=True)
class EngineRebalance:
    """A stop-the-world rebalance term by term (`terms` in execution order)."""

    engine: str
    terms: dict[str, Term] = field(default_factory=dict)

    @property
    def stall_us(self) -> float:
        return float(sum(t.us for t in self.terms.values()))

    def as_dict(self) -> dict:
        return {"engine": self.engine, "stall_us": self.stall_us,
                "terms": {k: {"us": t.us, "source": t.source} for k, t in self.terms.items()}}


def engine_rebalance(engine: str, algorithm: str, host: dict[str, float], *, num_layers: int,
                     num_moe_layers: int, num_experts: int, num_physical: int, num_ranks: int,
                     num_nodes: int, window_steps: int, gather_gbps: float,
                     gather_latency_us: float, moves) -> EngineRebalance:
    """The terms of one rebalance (`engine`: "sglang" | "vllm").

    Args:
        algorithm: an `ENGINE_ALGORITHM` key (the implementation the engine runs).
        host: `any/rebalance_host` parameters.
        num_layers: layers the engine's statistics cover (SGLang: every hidden layer, dense ones
            as zero rows; vLLM: the MoE layers).
        window_steps: forward passes in the statistics buffer (SGLang: the whole circular
            buffer, `expert_distribution_recorder_buffer_size`, default 1000).
        gather_gbps, gather_latency_us: the link the all-reduce of the counts crosses.
        moves: a `RebalanceCost` of the weight moves (one op per weight tensor), or None.
    Raises:
        PlacementError: an unknown engine or algorithm, or an unmeasured host term.
    """
    if engine not in ("sglang", "vllm"):
        raise PlacementError(f"engine ({engine!r}) must be 'sglang' or 'vllm'")
    if algorithm not in ENGINE_ALGORITHM:
        raise PlacementError(f"algorithm ({algorithm!r}) must be one of {sorted(ENGINE_ALGORITHM)}")
    if engine == "sglang":
        count_bytes = 4.0 * window_steps * num_layers * num_experts           # int32
        gather_src = "SGLang _StatAccumulator.dump: all-reduce [buffer, layers, experts] int32"
    else:
        count_bytes = 8.0 * num_moe_layers * num_physical                     # int64
        gather_src = "vLLM rearrange: all-reduce of the summed window [layers, physical] int64"
    terms = {"gather": Term(allreduce_us(count_bytes, num_ranks, gather_gbps, gather_latency_us),
                            gather_src + f" ({count_bytes / 1e6:.1f} MB, ring model)")}
    key = ENGINE_ALGORITHM[algorithm]
    if key == "sglang046_prefill":
        work = window_steps * num_layers * num_experts * max((num_physical - num_experts) // num_nodes, 1)
    else:
        work = num_layers * num_physical
    terms["algorithm"] = Term(host_us(host, key, work),
                              f"{key}: measured host line, any/rebalance_host ({work:.3g} units)")
    if moves is not None:
        terms["moves"] = Term(float(moves.stall_us - moves.algorithm_us - moves.base_us),
                              "epsim.eplb.cost: bytes / link + one op per weight tensor, per layer")
    # the maps' update (`map_update`, measured on a CPU) is not added: both engines keep the
    # maps on the GPU, where the same torch.where runs in milliseconds (not measured here)
    return EngineRebalance(engine, terms)
