"""Qwen3MoeSparseMoeBlock: the Qwen3 MoE sparse block, sharded over EP ranks by a placement.

Router (linear, no bias) -> softmax in fp32 -> top-k -> renormalize (`norm_topk_prob`) ->
each choice mapped to a physical slot -> experts (grouped GEMM over the rank's slots) ->
weighted sum. On one device it computes what transformers' `Qwen3MoeSparseMoeBlock` computes;
over ranks the backend decides the path: `forward_deepep` (dispatch / experts / combine) when
`epsim.vocab.is_deepep_class(backend.name)`, else `forward_normal` (all-gather / experts / all-reduce).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

from epsim import vocab
from live.backends import A2ABackend, AllReduceBackend, BackendSpec, Dispatched, DispatchStats
from live.backends.base import pairs_by_slot, reduce_pairs
from live.config import MoeConfig
from live.errors import LiveError
from live.experts import FusedExperts
from live.location import ExpertLocation, as_placement
from live.routing import Routing, route
from live.timing import StageTimer

ExpertFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def single_device_backend(config: MoeConfig, dtype: torch.dtype,
                          device: torch.device | str) -> AllReduceBackend:
    """The `none` backend without a process group: the block on one device."""
    return AllReduceBackend(BackendSpec(hidden_size=config.hidden_size,
                                        num_physical_experts=config.num_experts, top_k=config.top_k,
                                        dtype=dtype, device=torch.device(device)))


class Qwen3MoeSparseMoeBlock(nn.Module):
    """One layer's MoE block on one EP rank.

    Args:
        config: block sizes.
        layer_id: model layer (row of the placement).
        placement: an `epsim.eplb.Placement` (with its alive mask), a `[layers, physical]`
            array, or None for the identity placement (`live.location.as_placement`).
        backend: an A2ABackend on the EP group; None = one device, no group.
        dispatch_mode: replica choice for redundant experts: "static" (per source rank, see
            `epsim.eplb.Placement.static_dispatch_map`) or "random" (uniform per choice among
            the alive replicas, seeded).
        experts_impl: "auto" | "grouped_mm" | "loop".
    Attributes (after a forward):
        last_routing: the Routing used (logical ids; EPLB's recorder reads it).
        last_stats: DispatchStats of the forward (per-rank and per-slot token counts).
    """

    def __init__(self, config: MoeConfig, layer_id: int = 0, placement=None,
                 backend: A2ABackend | None = None, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", dispatch_mode: str = "static",
                 experts_impl: str = "auto", seed: int = 0):
        super().__init__()
        if not 0 <= layer_id < config.num_layers:
            raise LiveError(f"layer_id ({layer_id}) must be in [0, {config.num_layers})")
        if dispatch_mode not in vocab.LIVE_REPLICA_SELECTIONS:
            raise LiveError(f"dispatch_mode ({dispatch_mode!r}) must be one of "
                            f"{', '.join(vocab.LIVE_REPLICA_SELECTIONS)}")
        self.config, self.layer_id, self.dispatch_mode = config, layer_id, dispatch_mode
        self.backend = backend if backend is not None else single_device_backend(config, dtype, device)
        self.rank, self.ep_size = self.backend.rank, self.backend.ep_size
        self.device = torch.device(device)
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False,
                              dtype=dtype, device=device)
        self.gate.weight.requires_grad_(False)
        self.placement = as_placement(placement, config.num_layers, config.num_experts,
                                      self.ep_size)
        if self.placement.num_physical != self.backend.spec.num_physical_experts:
            raise LiveError(f"placement has {self.placement.num_physical} physical slots; the "
                            f"backend was built for {self.backend.spec.num_physical_experts}")
        self.experts = FusedExperts(self.placement.slots_per_rank, config.hidden_size,
                                    config.moe_intermediate_size, dtype, device, experts_impl)
        self._generator, self._seed = None, seed
        if dispatch_mode == "random":
            self._generator = torch.Generator(device=self.device)
            self._reseed()
        self.update_placement(self.placement)
        self.last_routing: Routing | None = None
        self._last_dispatched: Dispatched | None = None
        self._checked_routing: Routing | None = None

    @property
    def last_stats(self) -> DispatchStats | None:
        """Counts of the last forward (computed on first read)."""
        return None if self._last_dispatched is None else self._last_dispatched.stats

    # -- placement -------------------------------------------------------------------------
    def update_placement(self, placement) -> None:
        """Point the replica choice at a new placement (EPLB moves the weights separately)."""
        self.placement = as_placement(placement, self.config.num_layers, self.config.num_experts,
                                      self.ep_size, self.placement.num_nodes)
        self.location = ExpertLocation.build(self.placement, self.layer_id, self.rank, self.device)
        self.local_logical = self.location.local_logical                             # [slots]
        # slot per expert [experts]; alive replicas [experts, max]; their counts [experts]
        for name in ("slot_of_expert", "replicas", "replica_count"):
            self.register_buffer(name, getattr(self.location, name), persistent=False)

    def set_backend(self, backend: A2ABackend, placement) -> None:
        """Serve through another backend and group (elastic EP); the local slots keep their
        weights, so `placement` must give this rank as many slots as before."""
        if backend.num_local_slots != self.experts.num_slots:
            raise LiveError(f"backend holds {backend.num_local_slots} slots per rank; this block "
                            f"holds {self.experts.num_slots}")
        self.backend, self.rank, self.ep_size = backend, backend.rank, backend.ep_size
        if self._generator is not None:                 # the random choice follows the new rank
            self._reseed()
        self.update_placement(placement)

    def _reseed(self) -> None:
        """Seed the `random` replica choice per (seed, layer, rank): reproducible, distinct."""
        self._generator.manual_seed(self._seed * 1_000_003 + self.layer_id * 1009 + self.rank)

    def select_slots(self, topk_ids: torch.Tensor) -> torch.Tensor:
        """[tokens, top_k] logical ids -> physical slots by the dispatch mode."""
        if self.dispatch_mode == "static":
            return self.slot_of_expert[topk_ids]
        draw = torch.rand(topk_ids.shape, generator=self._generator, device=topk_ids.device)
        pick = (draw * self.replica_count[topk_ids]).long()
        return self.replicas[topk_ids, pick]

    # -- forward ---------------------------------------------------------------------------
    def route(self, hidden_states: torch.Tensor) -> Routing:
        """The router on [tokens, H]."""
        return route(hidden_states, self.gate.weight, self.config.top_k, self.config.norm_topk_prob)

    def forward(self, hidden_states: torch.Tensor, routing: Routing | None = None,
                expert_fn: ExpertFn | None = None, timer: StageTimer | None = None) -> torch.Tensor:
        """The block on this rank's tokens.

        Args:
            hidden_states: [tokens, H] or [batch, seq, H].
            routing: forced expert choices (e.g. `live.routing.forced_routing`); None = router.
            expert_fn: replaces the experts (rows [n, H], counts [slots]) -> [n, H]; for checks.
            timer: marks "router", "dispatch", "experts", "combine".
        Returns:
            Same shape as `hidden_states`.
        """
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        if timer is not None:
            timer.start()
        if routing is None:
            routing = self.route(x)
        elif routing is not self._checked_routing:
            # checking the id range waits for the device; a timing loop reuses one Routing
            routing.check(x.shape[0], self.config.top_k, self.config.num_experts)
            self._checked_routing = routing
        if timer is not None:
            timer.mark("router")
        topk_slots = self.select_slots(routing.topk_ids)
        expert_fn = self.experts if expert_fn is None else expert_fn
        forward = (self.forward_deepep if vocab.is_deepep_class(self.backend.name)
                   else self.forward_normal)
        out = forward(x, topk_slots, routing.topk_weights, expert_fn, timer)
        self.last_routing = routing
        return out.reshape(shape)

    def forward_deepep(self, x, topk_slots, topk_weights, expert_fn: ExpertFn,
                       timer: StageTimer | None = None) -> torch.Tensor:
        """Dispatch token copies to the slots' ranks, run local experts, combine back.

        The "experts" stage includes the layout steps around the GEMMs (grouping rows by slot,
        weighting, packing for combine), as in SGLang's MoE runners; "dispatch" and "combine"
        are the backend's communication calls.
        """
        dispatched = self.backend.dispatch(x, topk_slots, topk_weights)
        if timer is not None:
            timer.mark("dispatch")
        rows, counts = self.backend.expert_rows(dispatched)
        payload = self.backend.expert_payload(expert_fn(rows, counts), dispatched)
        if timer is not None:
            timer.mark("experts")
        out = self.backend.combine(payload, dispatched)
        if timer is not None:
            timer.mark("combine")
        self._last_dispatched = dispatched
        return out

    def forward_normal(self, x, topk_slots, topk_weights, expert_fn: ExpertFn,
                       timer: StageTimer | None = None) -> torch.Tensor:
        """All-gather tokens, compute the pairs whose slot is local, all-reduce the sums."""
        gathered = self.backend.gather(x, topk_slots, topk_weights)
        if timer is not None:
            timer.mark("dispatch")
        rows, pairs = self.permute_local(gathered)
        partial = self.weight_local(expert_fn(rows, pairs[2]), gathered, pairs)
        if timer is not None:
            timer.mark("experts")
        out = self.backend.reduce(partial, gathered)
        if timer is not None:
            timer.mark("combine")
        self._last_dispatched = Dispatched((gathered, pairs[2]), lambda h: self.backend.stats(*h))
        return out

    # the block's own work around the experts on one rank (timed alone by
    # `live.bench.component_ops`' `block_ops`): the permute into expert order, and the top-k
    # weighting and sum
    def permute_local(self, gathered) -> tuple[torch.Tensor, tuple]:
        """Rows of the gathered tokens' pairs whose slot is on this rank, grouped by slot.

        Returns:
            (rows [pairs, H], (pair_row [pairs], pair_k [pairs], counts [local slots] int64)).
            With one rank every choice is local, so the pairs are known without a host sync
            (the path a CUDA graph can capture).
        """
        num_slots = self.experts.num_slots
        first = self.rank * num_slots
        local = torch.where((gathered.topk_slots >= first) & (gathered.topk_slots < first + num_slots),
                            gathered.topk_slots - first, -1)
        pairs = pairs_by_slot(local, num_slots, all_local=self.ep_size == 1)
        return gathered.x[pairs[0]], pairs

    def weight_local(self, expert_y: torch.Tensor, gathered, pairs: tuple) -> torch.Tensor:
        """[gathered tokens, H] in the hidden dtype: each pair's output times its routing weight,
        summed per token in fp32, cast back."""
        pair_row, pair_k, _ = pairs
        return reduce_pairs(expert_y, pair_row, gathered.topk_weights[pair_row, pair_k],
                            gathered.x.shape[0]).to(gathered.x.dtype)

    # -- weights ---------------------------------------------------------------------------
    def slots_of(self, logical: int) -> np.ndarray:
        """Local slots holding logical expert `logical` (empty if this rank holds none)."""
        return np.nonzero(self.local_logical == logical)[0]

    def load_expert(self, logical: int, gate_proj: torch.Tensor, up_proj: torch.Tensor,
                    down_proj: torch.Tensor) -> int:
        """Copy one expert's HF weights (gate/up [I, H], down [H, I]) into every local slot
        holding it; returns how many slots were written."""
        slots = self.slots_of(logical)
        gate_up = self.experts.gate_up_proj.data
        inter = self.config.moe_intermediate_size
        for slot in slots.tolist():
            gate_up[slot, :inter].copy_(gate_proj)
            gate_up[slot, inter:].copy_(up_proj)
            self.experts.down_proj.data[slot].copy_(down_proj)
        return len(slots)

    def bind_fused(self, gate_weight: torch.Tensor, gate_up_proj: torch.Tensor,
                   down_proj: torch.Tensor) -> bool:
        """Use fused logical weights (`[experts, 2I, H]`, `[experts, H, I]`) without a copy where
        the local slots are a consecutive run of experts and dtype/device match (a view into
        the shared tensor); else gather a copy. Returns True when no copy was made."""
        slots = self.local_logical
        run = bool(np.all(np.diff(slots) == 1))
        same = (gate_up_proj.dtype == self.experts.gate_up_proj.dtype
                and gate_up_proj.device == self.experts.gate_up_proj.device)
        if run and same:
            begin, end = int(slots[0]), int(slots[-1]) + 1
            gate_up, down, zero_copy = gate_up_proj[begin:end], down_proj[begin:end], True
        else:
            index = torch.as_tensor(slots, device=gate_up_proj.device)
            gate_up = gate_up_proj.index_select(0, index)
            down = down_proj.index_select(0, index)
            zero_copy = False
        dtype, device = self.experts.gate_up_proj.dtype, self.device
        self.experts.gate_up_proj = nn.Parameter(gate_up.to(dtype=dtype, device=device),
                                                 requires_grad=False)
        self.experts.down_proj = nn.Parameter(down.to(dtype=dtype, device=device), requires_grad=False)
        self.gate.weight = nn.Parameter(gate_weight.to(dtype=dtype, device=device), requires_grad=False)
        return zero_copy
