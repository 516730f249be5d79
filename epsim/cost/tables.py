"""Placement lookup tables: where each physical expert slot lives and, for static replica
selection, which slot each source rank sends each logical expert to.

Slot p lives on rank `p // slots_per_rank`; rank r on node `r // ranks_per_node` (the geometry
of `epsim.eplb.Placement`, which the tables hold and read it from). Built once per placement (the simulator
rebuilds them when EPLB installs a new one or a rank fails).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from epsim.eplb.placement import Placement
from epsim.errors import SpecError
from epsim.vocab import REPLICA_SELECTIONS


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

    The geometry (slots per rank, ranks per node, replica counts, the alive mask, the static
    replica map) is `placement`'s, an `epsim.eplb.Placement`: one owner for the simulator, EPLB
    and `live/`; these tables add only what the per-step traffic sums read.

    Attributes:
        placement: the placement, with its alive mask (elastic EP: dead ranks get no tokens).
        dispatch_algorithm: `ep_dispatch_algorithm`: static | random | round_robin.
        slot_share: [layers, physical] float64, the share of its logical expert's tokens a slot
            gets when every source splits evenly over the live replicas (1 without replicas; 0 on
            a dead rank).
        is_identity: slot p holds logical p in every layer and every rank is alive (no gather).
        source_slot: [ranks, layers, experts] int64 slot each source rank sends logical e to
            (static selection with replicas only; else None: sources are interchangeable).
    """

    placement: Placement
    dispatch_algorithm: str
    slot_share: np.ndarray
    is_identity: bool
    source_slot: np.ndarray | None = None

    @cached_property
    def source_operators(self) -> "SourceOperators":
        """Sparse linear maps of the static per-source choice (`source_slot` must be set);
        built on first use, then every step of this placement reuses them."""
        return SourceOperators.build(self)


@dataclass(frozen=True, eq=False)
class SourceOperators:
    """`source_slot` as sparse 0/1 matrices, so per-step sums over (source, layer, expert) are
    one sparse product each (scipy.sparse CSC, built straight from the map: no column holds a
    row twice, so nothing needs sorting or merging).

    Attributes:
        to_slot: [layers * physical, sources]: slot weight = sum of the shares of the sources
            that send to the slot.
        to_rank: [sources * layers * ranks, layers * experts]: per source and layer, the sum
            over the experts it sends to each destination rank.
        to_node: same with destination nodes, `[sources * layers * nodes, layers * experts]`.
    """

    to_slot: object
    to_rank: object
    to_node: object

    @classmethod
    def build(cls, tables: "PlacementTables") -> "SourceOperators":
        from scipy import sparse                    # only runs with static replicas
        num_sources, num_layers, num_experts = tables.source_slot.shape
        p = tables.placement
        num_physical, num_ranks, num_nodes = p.num_physical, p.num_ranks, p.num_nodes
        nnz = tables.source_slot.size
        ones = np.ones(nnz)

        def csc(rows: np.ndarray, column_size: int, shape: tuple[int, int]):
            """Columns of `column_size` consecutive entries of `rows` (already column-major)."""
            return sparse.csc_matrix((ones, rows.ravel(), np.arange(0, nnz + 1, column_size)),
                                     shape=shape)

        # to_slot: one column per source, its [layers, experts] slots (distinct per layer)
        slot_rows = tables.source_slot + (np.arange(num_layers) * num_physical)[None, :, None]
        to_slot = csc(slot_rows, num_layers * num_experts, (num_layers * num_physical, num_sources))
        # to_rank / to_node: one column per (layer, expert), one row per source in it
        dest = tables.source_slot.transpose(1, 2, 0) // p.slots_per_rank         # [L, E, S] rank
        row = (np.arange(num_sources)[None, None, :] * num_layers
               + np.arange(num_layers)[:, None, None])                          # s * L + l
        columns = num_layers * num_experts
        to_rank = csc(row * num_ranks + dest, num_sources, (num_sources * num_layers * num_ranks, columns))
        to_node = csc(row * num_nodes + dest // p.ranks_per_node, num_sources,
                      (num_sources * num_layers * num_nodes, columns))
        return cls(to_slot, to_rank, to_node)


def build_tables(placement: Placement, dispatch_algorithm: str = "static",
                 per_source: bool | None = None) -> PlacementTables:
    """Precompute what `count_traffic` needs for `placement` (validated here).

    Static selection (SGLang's `ep_dispatch_algorithm=static`) sends each source rank's tokens
    for a logical expert to one fixed replica (`Placement.static_dispatch_map`): one on the
    source's own rank if any, else one on its node (spread by the source's local index), else
    one spread by source index. Random and round-robin split every source's tokens evenly over
    the replicas (their expected value).

    Args:
        placement: an `epsim.eplb.Placement` (`Placement.on_cluster` for a slot map); slots on
            ranks outside its alive mask take no tokens, replicas are chosen among live ones.
        per_source: force (True) or forbid (False) per-source tables; default: only for static
            selection when some expert has replicas.
    Raises:
        SpecError: an unknown selection; PlacementError: broken maps or an expert with no slot
            on a live rank.
    """
    if dispatch_algorithm not in REPLICA_SELECTIONS:
        raise SpecError(f"ep_dispatch_algorithm ({dispatch_algorithm!r}) must be one of "
                        f"{list(REPLICA_SELECTIONS)}")
    placement.check_live()
    p2l, counts = placement.physical_to_logical, placement.live_counts()   # [layers, experts]
    slot_share = 1.0 / np.take_along_axis(counts, p2l, axis=1)           # [layers, physical]
    if not placement.all_alive:
        slot_share = np.where(placement.live_slots()[None, :], slot_share, 0.0)
    is_identity = placement.all_alive and placement.num_redundant == 0 and bool(
        (p2l == np.arange(placement.num_logical)[None, :]).all())
    if per_source is None:
        per_source = dispatch_algorithm == "static" and bool((counts > 1).any())
    source_slot = placement.static_dispatch_map() if per_source else None
    return PlacementTables(placement, dispatch_algorithm, slot_share, is_identity, source_slot)
