"""Placement lookup tables: where each physical expert slot lives and, for static replica
selection, which slot each source rank sends each logical expert to.

Slot p lives on rank `p // slots_per_rank`; rank r on node `r // ranks_per_node`. Built once
per placement (the simulator rebuilds them when EPLB installs a new one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.errors import SpecError

REPLICA_SELECTIONS = ("static", "random", "round_robin")


def contiguous_placement(num_layers: int, num_experts: int, num_ranks: int,
                         num_redundant: int = 0) -> np.ndarray:
    """The default placement: logical experts in order over the ranks, no replicas.

    Redundant slots (if any) repeat experts 0, 1, ... so every slot holds an expert; that
    is only a valid start for an EPLB run, which replaces it.

    Returns:
        [layers, physical] int64 physical_to_logical.
    """
    num_physical = num_experts + num_redundant
    if num_physical % num_ranks:
        raise SpecError(f"num_ranks ({num_ranks}) must divide the physical expert slots "
                        f"({num_experts} + {num_redundant} redundant = {num_physical})")
    row = np.arange(num_physical, dtype=np.int64) % num_experts
    return np.tile(row, (num_layers, 1))


@dataclass(frozen=True, eq=False)
class PlacementTables:
    """Lookup tables a placement implies for the traffic math; built once per placement.

    Attributes:
        physical_to_logical: [layers, physical] int64.
        num_experts: logical experts per layer.
        num_ranks, ranks_per_node: EP ranks, and ranks on each node.
        dispatch_algorithm: `ep_dispatch_algorithm`: static | random | round_robin.
        slot_share: [layers, physical] float64, the share of its logical expert's tokens a slot
            gets when every source splits evenly over replicas (1 without replicas).
        is_identity: slot p holds logical p in every layer (no gather needed).
        source_slot: [ranks, layers, experts] int64 slot each source rank sends logical e to
            (static selection with replicas only; else None: sources are interchangeable).
    """

    physical_to_logical: np.ndarray
    num_experts: int
    num_ranks: int
    ranks_per_node: int
    dispatch_algorithm: str
    slot_share: np.ndarray
    is_identity: bool
    source_slot: np.ndarray | None = None

    @property
    def num_layers(self) -> int:
        return self.physical_to_logical.shape[0]

    @property
    def num_physical(self) -> int:
        return self.physical_to_logical.shape[1]

    @property
    def slots_per_rank(self) -> int:
        return self.num_physical // self.num_ranks

    @property
    def num_nodes(self) -> int:
        return self.num_ranks // self.ranks_per_node


def build_tables(physical_to_logical: np.ndarray, num_experts: int, num_ranks: int,
                 gpus_per_node: int, dispatch_algorithm: str = "static",
                 per_source: bool | None = None) -> PlacementTables:
    """Validate a placement and precompute what `count_traffic` needs.

    Static selection (SGLang's `ep_dispatch_algorithm=static`) sends each source rank's tokens
    for a logical expert to one fixed replica: one on the source's own rank if any, else one on
    its node (spread by the source's local index), else one spread by source index. Random and
    round-robin split every source's tokens evenly over the replicas (their expected value).

    Args:
        physical_to_logical: [layers, physical] int, logical expert of each slot.
        gpus_per_node: GPUs per node of the cluster; ranks per node = min(it, num_ranks).
        per_source: force (True) or forbid (False) per-source tables; default: only for static
            selection when some expert has replicas.
    Raises:
        SpecError: a slot count not divisible by ranks, ids out of range, an expert with no
            slot, or an unknown selection.
    """
    p2l = np.asarray(physical_to_logical)
    if p2l.ndim != 2:
        raise SpecError(f"physical_to_logical (shape {list(p2l.shape)}) must be [layers, physical]")
    p2l = p2l.astype(np.int64)
    num_layers, num_physical = p2l.shape
    if dispatch_algorithm not in REPLICA_SELECTIONS:
        raise SpecError(f"ep_dispatch_algorithm ({dispatch_algorithm!r}) must be one of "
                        f"{list(REPLICA_SELECTIONS)}")
    if num_ranks <= 0 or num_physical % num_ranks:
        raise SpecError(f"num_ranks ({num_ranks}) must divide the physical slots ({num_physical})")
    ranks_per_node = min(gpus_per_node, num_ranks)
    if num_ranks % ranks_per_node:
        raise SpecError(f"num_ranks ({num_ranks}) must be a multiple of gpus_per_node "
                        f"({gpus_per_node}) when it spans nodes")
    if p2l.min() < 0 or p2l.max() >= num_experts:
        raise SpecError(f"physical_to_logical values ({p2l.min()}..{p2l.max()}) must be in "
                        f"[0, {num_experts})")
    counts = np.zeros((num_layers, num_experts), dtype=np.int64)         # [layers, experts]
    np.add.at(counts, (np.repeat(np.arange(num_layers), num_physical), p2l.ravel()), 1)
    if (counts == 0).any():
        layer, expert = np.argwhere(counts == 0)[0]
        raise SpecError(f"logical expert {expert} of layer {layer} has no slot; every expert "
                        f"must have >= 1 replica")
    slot_share = 1.0 / np.take_along_axis(counts, p2l, axis=1)           # [layers, physical]
    is_identity = num_physical == num_experts and bool(
        (p2l == np.arange(num_experts)[None, :]).all())
    if per_source is None:
        per_source = dispatch_algorithm == "static" and bool((counts > 1).any())
    source_slot = _static_source_slots(p2l, counts, num_ranks, ranks_per_node) if per_source else None
    return PlacementTables(p2l, num_experts, num_ranks, ranks_per_node, dispatch_algorithm,
                           slot_share, is_identity, source_slot)


def _static_source_slots(p2l: np.ndarray, counts: np.ndarray, num_ranks: int,
                         ranks_per_node: int) -> np.ndarray:
    """[ranks, layers, experts] the slot each source rank uses for each logical expert."""
    num_layers, num_physical = p2l.shape
    num_experts = counts.shape[1]
    slots_per_rank = num_physical // num_ranks
    sources = np.arange(num_ranks)
    src_node, src_local = sources // ranks_per_node, sources % ranks_per_node
    # single-replica experts: every source uses the one slot
    first_slot = np.full((num_layers, num_experts), -1, dtype=np.int64)
    layer_idx = np.repeat(np.arange(num_layers), num_physical)
    slot_idx = np.tile(np.arange(num_physical), num_layers)
    first_slot[layer_idx[::-1], p2l.ravel()[::-1]] = slot_idx[::-1]     # lowest slot wins
    out = np.broadcast_to(first_slot, (num_ranks, num_layers, num_experts)).copy()
    for layer, expert in zip(*np.nonzero(counts > 1)):
        slots = np.nonzero(p2l[layer] == expert)[0]                       # [replicas]
        ranks = slots // slots_per_rank
        on_rank = ranks[None, :] == sources[:, None]                      # [ranks, replicas]
        on_node = (ranks[None, :] // ranks_per_node) == src_node[:, None]
        num_on_node = on_node.sum(axis=1)
        # k-th same-node replica, k spread by the source's local index
        kth = src_local % np.maximum(num_on_node, 1)
        node_pick = (np.cumsum(on_node, axis=1) == (kth + 1)[:, None]) & on_node
        spread = (sources + layer + expert) % len(slots)
        choice = np.where(on_rank.any(axis=1), on_rank.argmax(axis=1),
                          np.where(num_on_node > 0, node_pick.argmax(axis=1), spread))
        out[:, layer, expert] = slots[choice]
    return out
