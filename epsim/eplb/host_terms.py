"""A stop-the-world rebalance as SGLang and vLLM run it, one term per step of their code.

Each term is a time with its source: the code path it models and where its value comes from
(host lines measured by `live.bench.eplb_host` and fitted as `any/rebalance_host`, or the link
model of `epsim.eplb.cost`). Host work is CPU time of one thread on the machine that measured
it (SGLang's GPU workers call `torch.set_num_threads(1)`; vLLM's policy is single-threaded
numpy); a faster host runs it faster, by a ratio nobody here measured.

SGLang (`EPLBManager.rebalance`, 0.4.7 as of June 2025 and later; its log line
`[EPLBManager] rebalance end time=...` times all of it):

  gather        `dump_record`: the recorder's circular buffer `[buffer steps, hidden layers,
                experts]` int32 all-reduced over the EP group (NCCL ring);
  algorithm     `eplb_algorithms.rebalance_experts`: DeepSeek's reference `eplb.py` in torch on
                the CPU, hierarchical when groups divide over nodes (`--eplb-algorithm auto`);
  dispatch_map  `compute_logical_to_rank_dispatch_physical_map`, a Python loop over layers x
                experts x ranks, run when `ep_dispatch_algorithm` is `static` (SGLang's choice
                when EPLB is on and none is given);
  updater       `update_expert_weights_single_layer`: each layer's move plan in Python;
  moves         one `batch_isend_irecv` per layer, waited on before the next (one op per weight
                tensor of an expert), priced by `epsim.eplb.cost` per layer.

vLLM (`EplbState.rearrange`, sync mode, 0.22 with `communicator: nixl`; its log line
`Rearranged experts in ... s` times all of it with CUDA events):

  gather        the window summed first, `[MoE layers, experts]`, all-reduced over EP;
  algorithm     `policy.default` (numpy since PR #30697, December 2025);
  plan          `move_to_buffer` per layer (numpy);
  barrier       `NixlEplbCommunicator.execute` calls `monitored_barrier` on the gloo CPU group
                before every layer's READs: 2 (n - 1) messages through rank 0;
  moves         the layer's READs, waited on in a loop that sleeps 0.5 ms between checks.

Not modelled (no measurement here): NIXL's per-peer descriptor and handle setup, the D2D pack
and unpack copies' launches, the map commit on the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from epsim.eplb.cost import rebalance_cost
from epsim.errors import PlacementError
from epsim.profile import Profile, default_profile_path

# What each timed implementation's work is counted in: the loops it runs, a first and an
# optional second count (one definition, used by the bench that times it and the model that
# prices it). "packs": the bins a greedy packing scans per item (GPUs per node when
# hierarchical, all GPUs when global).
WORK_UNIT = {
    "placement": ("layers x physical slots", "layers x physical slots x packs"),
    "sglang_dispatch_map": ("layers x experts", "layers x experts x ranks"),
    "sglang_updater": ("MoE layers x slots per rank", ""),
    "vllm_move_to_buffer": ("MoE layers", "MoE layers x slots per rank"),
    "plan": ("layers x physical slots", ""),
    "gloo_message": ("messages", ""),
    "masked_path": ("layers x physical slots", ""),   # live.eplb.elastic.mask_ranks (ours)
}
PLACEMENT_KEYS = ("deepseek", "deepseek_global", "sticky", "sglang_reference_hierarchical",
                  "sglang_reference_global", "sglang047_reference_hierarchical",
                  "sglang047_reference_global", "vllm_policy")
KEY_UNIT = {**{key: "placement" for key in PLACEMENT_KEYS},
            "sglang047_dispatch_map": "sglang_dispatch_map",
            **{unit: unit for unit in WORK_UNIT if unit != "placement"}}
NIXL_POLL_US = 500.0        # NixlEplbCommunicator._wait_for_all_transfers: time.sleep(0.0005)


def unit_of(key: str) -> str:
    """The `WORK_UNIT` entry of implementation `key`."""
    if key not in KEY_UNIT:
        raise PlacementError(f"implementation ({key!r}) has no work unit; known: {sorted(KEY_UNIT)}")
    return KEY_UNIT[key]


def hierarchical(key: str, num_groups: int, num_nodes: int) -> bool:
    """Whether implementation `key` packs per node (DeepSeek's rule: groups divide over nodes)."""
    if key.endswith("_global") or key == "sticky":
        return False
    if key.endswith("_hierarchical"):
        return True
    return num_nodes > 1 and num_groups % num_nodes == 0


def work_of(key: str, *, num_layers: int, num_experts: int, num_physical: int, num_ranks: int,
            num_nodes: int = 1, num_groups: int = 1) -> tuple[float, float]:
    """(first, second) work counts of implementation `key` on one shape (`WORK_UNIT`)."""
    unit = unit_of(key)
    slots_per_rank = num_physical // num_ranks
    if unit == "placement":
        packs = num_ranks // num_nodes if hierarchical(key, num_groups, num_nodes) else num_ranks
        return float(num_layers * num_physical), float(num_layers * num_physical * packs)
    if unit == "sglang_dispatch_map":
        return float(num_layers * num_experts), float(num_layers * num_experts * num_ranks)
    if unit == "sglang_updater":
        return float(num_layers * slots_per_rank), 0.0
    if unit == "vllm_move_to_buffer":
        return float(num_layers), float(num_layers * slots_per_rank)
    if unit in ("plan", "masked_path"):
        return float(num_layers * num_physical), 0.0
    return float(num_layers), 0.0


def host_us(params: dict[str, float], key: str, work: tuple[float, float]) -> float:
    """Fitted host time (µs, one thread) of implementation `key` on `work` (`work_of`):
    `base_us + us_per_unit x first + us_per_unit2 x second` (`any/rebalance_host`).

    Raises:
        PlacementError: the profile has no measurement of `key`.
    """
    base, slope = params.get(f"{key}_base_us"), params.get(f"{key}_us_per_unit")
    if base is None or slope is None:
        known = sorted(k[:-len("_us_per_unit")] for k in params if k.endswith("_us_per_unit"))
        raise PlacementError(f"host term ({key!r}) has no measurement in the profile's "
                             f"any/rebalance_host; measured: {known or 'none'} "
                             f"(python -m live.bench.eplb_host)")
    return base + slope * work[0] + params.get(f"{key}_us_per_unit2", 0.0) * work[1]


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
    """A stop-the-world rebalance term by term (`terms` in execution order).

    Attributes:
        once_us: paid once per rebalance, before the first layer moves (µs).
        layer_us: [MoE layers] per-layer cost (host plan, barrier, transfers) (µs); a
            layer-chunked rebalance pays a chunk's layers per forward pass.
    """

    engine: str
    terms: dict[str, Term] = field(default_factory=dict)
    once_us: float = 0.0
    layer_us: tuple[float, ...] = ()

    @property
    def stall_us(self) -> float:
        return float(sum(t.us for t in self.terms.values()))

    def as_dict(self) -> dict:
        return {"engine": self.engine, "stall_us": self.stall_us,
                "terms": {k: {"us": t.us, "source": t.source} for k, t in self.terms.items()}}


@dataclass(frozen=True)
class Shape:
    """What a rebalance's host terms depend on.

    Attributes:
        num_stat_layers: layers the engine's statistics and algorithm cover (SGLang: every
            hidden layer, dense ones as zero rows; vLLM: the MoE layers).
        window_steps: forward passes in SGLang's recorder buffer (it all-reduces all of it).
    """

    num_stat_layers: int
    num_moe_layers: int
    num_experts: int
    num_physical: int
    num_ranks: int
    num_nodes: int
    num_groups: int
    window_steps: int = 1000


def _placement_key(prefix: str, shape: Shape) -> str:
    hierarchical = shape.num_groups % shape.num_nodes == 0 and shape.num_nodes > 1
    return f"{prefix}_{'hierarchical' if hierarchical else 'global'}"


def sglang_rebalance(host: dict[str, float], shape: Shape, layer_move_us, *, gather_gbps: float,
                     gather_latency_us: float, dispatch_static: bool = True,
                     version: str = "0.4.7", algorithm: str | None = None) -> EngineRebalance:
    """SGLang's rebalance, term by term (see the module docstring).

    Args:
        host: `any/rebalance_host` parameters.
        layer_move_us: [MoE layers] the slowest rank's transfer time of each layer (µs).
        version: "0.4.7" (per-element torch algorithm, June 2025) or "0.5" (its list rewrite).
        algorithm: the timed implementation to price the placement with (default: DeepSeek's
            reference as that SGLang version ships it, hierarchical when groups divide over nodes).
    """
    s = shape
    count_bytes = 4.0 * s.window_steps * s.num_stat_layers * s.num_experts        # int32
    algo = algorithm or _placement_key("sglang047_reference" if version == "0.4.7"
                                       else "sglang_reference", s)
    dims = dict(num_layers=s.num_stat_layers, num_experts=s.num_experts,
                num_physical=s.num_physical, num_ranks=s.num_ranks, num_nodes=s.num_nodes,
                num_groups=s.num_groups)
    terms = {
        "gather": Term(allreduce_us(count_bytes, s.num_ranks, gather_gbps, gather_latency_us),
                       f"_StatAccumulator.dump: all-reduce [{s.window_steps}, {s.num_stat_layers}, "
                       f"{s.num_experts}] int32 ({count_bytes / 1e6:.1f} MB), ring model"),
        "algorithm": Term(host_us(host, algo, work_of(algo, **dims)),
                          f"{algo}: measured host line (any/rebalance_host)")}
    if dispatch_static:
        key = "sglang047_dispatch_map" if version == "0.4.7" else "sglang_dispatch_map"
        terms["dispatch_map"] = Term(host_us(host, key, work_of(key, **dims)),
                                     f"{key}: measured host line (ep_dispatch_algorithm static)")
    moe = dict(dims, num_layers=1)
    per_layer_plan = host_us(host, "sglang_updater", work_of("sglang_updater", **moe))
    layer_us = tuple(per_layer_plan + float(m) for m in layer_move_us)
    terms["updater"] = Term(per_layer_plan * s.num_moe_layers,
                            "sglang_updater: measured host line, per MoE layer")
    terms["moves"] = Term(float(sum(layer_move_us)),
                          "epsim.eplb.cost: one batch_isend_irecv per layer, waited on")
    once = sum(t.us for k, t in terms.items() if k not in ("updater", "moves"))
    return EngineRebalance("sglang", terms, once_us=once, layer_us=layer_us)


def vllm_rebalance(host: dict[str, float], shape: Shape, layer_move_us, *, gather_gbps: float,
                   gather_latency_us: float) -> EngineRebalance:
    """vLLM's synchronous rearrangement with the NIXL communicator (see the module docstring)."""
    s = shape
    count_bytes = 8.0 * s.num_moe_layers * s.num_experts
    dims = dict(num_layers=s.num_moe_layers, num_experts=s.num_experts,
                num_physical=s.num_physical, num_ranks=s.num_ranks, num_nodes=s.num_nodes,
                num_groups=s.num_groups)
    messages = 2 * (s.num_ranks - 1)
    barrier = host_us(host, "gloo_message", (messages, 0.0))
    plan = host_us(host, "vllm_move_to_buffer", work_of("vllm_move_to_buffer", **dict(dims, num_layers=1)))
    waits = [math.ceil(float(m) / NIXL_POLL_US) * NIXL_POLL_US for m in layer_move_us]
    terms = {
        "gather": Term(allreduce_us(count_bytes, s.num_ranks, gather_gbps, gather_latency_us),
                       f"rearrange: all-reduce of the summed window ({count_bytes / 1e3:.0f} kB)"),
        "algorithm": Term(host_us(host, "vllm_policy", work_of("vllm_policy", **dims)),
                          "vllm_policy: vLLM's policy/default.py, measured host line"),
        "plan": Term(plan * s.num_moe_layers, "vllm_move_to_buffer: measured host line, per layer"),
        "barrier": Term(barrier * s.num_moe_layers,
                        f"monitored_barrier per layer: {messages} gloo messages, measured per message"),
        "moves": Term(float(sum(waits)), "epsim.eplb.cost per layer, rounded up to the 0.5 ms poll"),
    }
    layer_us = tuple(plan + barrier + w for w in waits)
    return EngineRebalance("vllm", terms, once_us=terms["gather"].us + terms["algorithm"].us,
                           layer_us=layer_us)


def per_op_params(params: dict[str, float], tensors_per_expert: int) -> dict[str, float]:
    """`rebalance_params` for an engine's transfers: one op per weight tensor of an expert, and
    without the fixed and per-layer costs of our own updater (the engine's terms replace them)."""
    return dict(params, base_us=0.0, per_layer_us=0.0,
                nvlink_latency_us=params["nvlink_latency_us"] * tensors_per_expert,
                rdma_latency_us=params["rdma_latency_us"] * tensors_per_expert)


def layer_moves_us(old, new, expert_bytes: float, params: dict[str, float],
                   tensors_per_expert: int) -> np.ndarray:
    """[layers] µs the slowest rank spends moving each layer's weights when every layer is its
    own batch of transfers (`epsim.eplb.cost` with chunks of one layer)."""
    return rebalance_cost(old, new, expert_bytes, per_op_params(params, tensors_per_expert),
                          algorithm=None, layers_per_chunk=1).chunk_us


def tensors_per_expert(weight_dtype: str) -> int:
    """Weight tensors SGLang moves per expert: w13 and w2, plus their block scales in FP8."""
    return 4 if weight_dtype == "fp8" else 2


@lru_cache(maxsize=1)
def shipped_host_params() -> dict[str, float]:
    """`any/rebalance_host` of the shipped profile: host CPU times, whatever GPU a scenario
    names (the host terms were timed on a CPU, not on the profile's GPU)."""
    return Profile.load(default_profile_path()).params("any", "rebalance_host")


def deployment_terms(host: dict[str, float], links: dict[str, float], model, deployment,
                     num_nodes: int, layer_move_us, num_alive: int | None = None) -> EngineRebalance:
    """A rebalance of a scenario's deployment as SGLang 0.5 runs it (`sglang_rebalance`), over
    `num_alive` serving ranks (default all): the deployment's `eplb_algorithm` priced as SGLang's
    implementation of that policy (`sticky`, which SGLang lacks, as ours), the dispatch map when
    `ep_dispatch_algorithm` is static, the recorder's whole buffer gathered over the scale-out
    link when the instance spans nodes.

    Args:
        links: `epsim.eplb.rebalance_params` of the cluster (bandwidths, per-transfer latencies).
        layer_move_us: [MoE layers] the slowest rank's transfer time of each layer (µs).
    """
    d, m = deployment, model
    alive = d.ep_size if num_alive is None else num_alive
    shape = Shape(num_stat_layers=m.num_layers, num_moe_layers=m.num_moe_layers,
                  num_experts=m.num_experts,
                  num_physical=(m.num_experts + d.ep_num_redundant_experts) // d.ep_size * alive,
                  num_ranks=alive, num_nodes=num_nodes if alive == d.ep_size else 1,
                  num_groups=m.num_expert_groups,
                  window_steps=d.expert_distribution_recorder_buffer_size)
    algorithm = {"sticky": "sticky", "deepseek_global": "sglang_reference_global",
                 "deepseek_hierarchical": "sglang_reference_hierarchical"}.get(d.eplb_algorithm)
    link = "rdma" if num_nodes > 1 else "nvlink"
    return sglang_rebalance(host, shape, layer_move_us, gather_gbps=links[f"{link}_gbps"],
                            gather_latency_us=links[f"{link}_latency_us"],
                            dispatch_static=d.ep_dispatch_algorithm == "static", version="0.5",
                            algorithm=algorithm)
