"""Placement lookup tables: where each physical expert slot lives and, for static replica
selection, which slot each source rank sends each logical expert to.

Slot p lives on rank `p // slots_per_rank`; rank r on node `r // ranks_per_node` (the geometry
of `epsim.eplb.Placement`, which the tables hold and read it from). Built once per placement (the simulator
rebuilds them when EPLB installs a new one or a rank fails).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from epsim.cost.groups import rank_sum
from epsim.eplb.placement import Placement
from epsim.eplb.replicas import StaticMap
from epsim.errors import SpecError
from epsim.vocab import REPLICA_SELECTIONS


def contiguous_placement(num_layers: int, num_experts: int, num_ranks: int,
                         num_redundant: int = 0) -> np.ndarray:
    """The default placement: logical experts in order over the ranks, no replicas.

    Redundant slots (if any) repeat experts 0, 1, ... so every slot holds an expert (SGLang's
    trivial placement: slot p holds expert p mod E); an EPLB run replaces it, a server without
    EPLB keeps it.

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
        static_map: the slot each source rank sends each logical expert to, compact
            (`Placement.static_dispatch_parts`; static selection with replicas only; else None:
            sources are interchangeable).
    """

    placement: Placement
    dispatch_algorithm: str
    slot_share: np.ndarray
    is_identity: bool
    static_map: StaticMap | None = None

    @property
    def source_slot(self) -> np.ndarray | None:
        """[ranks, layers, experts] int32 `static_map` in full (None without one)."""
        return None if self.static_map is None else self.placement.static_dispatch_map()

    @cached_property
    def _slot_columns(self) -> np.ndarray:
        """[layers * physical] int: each slot's logical expert as a flat (layer, expert) index."""
        p = self.placement
        return (np.arange(p.num_layers)[:, None] * p.num_logical + p.physical_to_logical).ravel()

    def per_slot(self, values: np.ndarray) -> np.ndarray:
        """[..., layers, experts] -> [..., layers, physical]: each slot's logical expert's value
        (one flat gather, several times faster than `take_along_axis` at these sizes)."""
        lead = values.shape[:-2]
        return np.take(values.reshape(*lead, -1), self._slot_columns, axis=-1).reshape(
            *lead, *self.placement.physical_to_logical.shape)

    @cached_property
    def source_operators(self) -> "SourceOperators":
        """Sparse linear maps of the static per-source choice (`static_map` must be set);
        built on first use, then every step of this placement reuses them."""
        return SourceOperators.build(self)


@dataclass(frozen=True, eq=False)
class SourceOperators:
    """The static map (`PlacementTables.static_map`) as sparse 0/1 matrices and per-slot masks,
    so per-step sums over (source, layer, expert) are one sparse product or one pass over
    `[layers, physical]` each.

    scipy.sparse CSR with every row's entries in increasing column order: a product adds each
    output's terms from 0 in that order, the order the column-major (CSC) form of the same
    matrix adds them in, so both give the same bits; CSR reads its rows in turn instead of
    scattering into the output, faster on these shapes. Built by masking, not sorting: which
    slots each source uses (`used`, `[sources, layers, physical]`), with each destination's
    slots ordered by the logical expert they hold.

    Attributes:
        to_slot: [slot sets, sources]: the distinct sets of sources that send to one slot
            (most slots are sent to by every live source), one row each; `slot_set`
            [layers * physical] int, each slot's row. Slot weight (`slot_weights`) = sum of
            the shares of the sources that send to the slot; equal rows give equal sums, so
            one product per distinct set gives every slot's bits.
        to_slot_peer_remote: the same for the sources in the slot's node other than its own
            rank, then for the sources in other nodes, stacked (`peer_remote_tokens`);
            `peer_remote_set` [2 * layers * physical] each one's row.
        own_used: [layers, physical] bool, the slot is the one its own rank sends its expert to.
        node_first: [layers, physical] bool, the lowest live slot of each expert a node holds
            (one per node and expert).
        node_holds_all: [layers, ranks] bool, the rank's node holds a live replica of every
            expert (its sources send nothing over RDMA).
        to_rank: [sources * layers * ranks, layers * experts]: per source and layer, the sum
            over the experts it sends to each destination rank (built on first use: only
            rank- and node-deduplicated copies read it).
        to_node: same with destination nodes, `[sources * layers * nodes, layers * experts]`
            (built on first use: only node-deduplicated copies read it).
    """

    placement: Placement     # (not the tables, which hold these operators: no reference cycle)
    static_map: StaticMap
    to_slot: object
    slot_set: np.ndarray
    to_slot_peer_remote: object
    peer_remote_set: np.ndarray
    own_used: np.ndarray
    node_first: np.ndarray
    node_holds_all: np.ndarray
    _last_weights: list = field(default_factory=lambda: [None, None])   # (share bytes, weights)
    _last_tokens: list = field(default_factory=lambda: [None, None])    # (token bytes, sums)

    def slot_weights(self, share: np.ndarray) -> np.ndarray:
        """[layers * physical] `to_slot` rows of the sources' token shares ([sources]), spread
        to every slot; the last one is remembered (the draws of one batch share it)."""
        key = share.tobytes()
        if self._last_weights[0] != key:
            self._last_weights[:] = [key, (self.to_slot @ share)[self.slot_set]]
        return self._last_weights[1]

    def peer_remote_tokens(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[layers, physical] twice: the tokens ([sources]) sent to each slot by the sources in
        its node other than its own rank, and by the sources in other nodes; the last pair is
        remembered (the draws of one batch share it)."""
        key = tokens.tobytes()
        if self._last_tokens[0] != key:
            both = (self.to_slot_peer_remote @ tokens)[self.peer_remote_set]
            self._last_tokens[:] = [key, tuple(both.reshape(2, *self.own_used.shape))]
        return self._last_tokens[1]

    @classmethod
    def build(cls, tables: "PlacementTables") -> "SourceOperators":
        """From the compact map: an expert with one live replica is sent to its slot by every
        source, so only the slots of replicated experts (`varied`, a tenth of them at EP 144)
        get a row of their own; the others share the all-sources, the own-node and other-node
        rows of their rank (the same distinct sets, so the same sums, as one row per slot)."""
        p, static = tables.placement, tables.static_map
        num_sources = static.picked.shape[0]
        num_layers, num_physical = p.physical_to_logical.shape
        varies = p.live_counts() > 1                                             # [L, E]
        shared = _shared_slots(static, varies, num_physical)                     # [L, P]
        varied = np.take_along_axis(varies, p.physical_to_logical, axis=1).ravel()   # [L * P]
        flat = np.flatnonzero(varied)
        row_of = np.full(num_layers * num_physical, -1, dtype=np.int64)
        row_of[flat] = np.arange(flat.shape[0])
        by_varied = np.zeros((flat.shape[0], num_sources), dtype=bool)           # [V, S]
        by_varied[row_of[static.layer * num_physical + static.picked],
                  np.arange(num_sources)[:, None]] = True
        assert int(np.count_nonzero(by_varied)) == static.picked.size   # one slot per (source, expert)
        rank = np.tile(p.rank_of_slot(), num_layers)                            # [L * P]
        node_of = p.node_of_rank()
        same_node = node_of[:, None] == node_of[None, :]                         # [ranks, S]
        peer = same_node & ~np.eye(num_sources, dtype=bool)
        varied_rank = rank[flat]
        everyone, nobody = np.ones((1, num_sources), bool), np.zeros((1, num_sources), bool)
        to_slot, sets = _source_sets(np.concatenate([by_varied, everyone, nobody]))
        num_varied = flat.shape[0]
        slot_set = np.where(shared.ravel(), sets[num_varied], sets[num_varied + 1])
        slot_set[flat] = sets[:num_varied]
        to_peer_remote, sets = _source_sets(np.concatenate([
            by_varied & peer[varied_rank], by_varied & ~same_node[varied_rank], peer,
            ~same_node, nobody]))
        peer_set = np.where(shared.ravel(), sets[2 * num_varied + rank], sets[-1])
        remote_set = np.where(shared.ravel(), sets[2 * num_varied + num_sources + rank], sets[-1])
        peer_set[flat], remote_set[flat] = sets[:num_varied], sets[num_varied:2 * num_varied]
        own_used = shared.ravel().copy()
        own_used[flat] = by_varied[np.arange(num_varied), varied_rank]
        node_first = _first_per_node(p)
        held_in_node = _group_count(node_first, p.slots_per_rank * p.ranks_per_node)
        return cls(p, static, to_slot, slot_set, to_peer_remote,
                   np.concatenate([peer_set, remote_set]),
                   own_used.reshape(num_layers, num_physical), node_first,
                   np.repeat(held_in_node == p.num_logical, p.ranks_per_node, axis=-1))

    @cached_property
    def used(self) -> np.ndarray:
        """[sources, layers, physical] bool: slot p is the one source s sends p's expert to
        (built on first use: only rank- and node-deduplicated copies read it)."""
        static = self.static_map
        num_sources = static.picked.shape[0]
        shared = _shared_slots(static, self.placement.live_counts() > 1,
                               self.placement.num_physical)
        by_slot = np.repeat(shared[None, :, :], num_sources, axis=0)             # [S, L, P]
        by_slot[np.arange(num_sources)[:, None], static.layer[None, :], static.picked] = True
        return by_slot

    @cached_property
    def to_rank(self):
        return self._to_destination(self.placement.slots_per_rank)

    @cached_property
    def to_node(self):
        return self._to_destination(self.placement.slots_per_rank * self.placement.ranks_per_node)

    def _to_destination(self, slots_per_dest: int):
        p = self.placement
        return _to_destination(p, self.used, slots_per_dest,
                               np.ones(self.used.shape[0] * self.used.shape[1] * p.num_logical))


def _shared_slots(static: StaticMap, varies: np.ndarray, num_physical: int) -> np.ndarray:
    """[layers, physical] bool: the slot every source sends its expert to (the one live replica
    of an expert; `varies` [layers, experts]: the expert has more than one)."""
    num_layers = static.lowest.shape[0]
    shared = np.zeros((num_layers, num_physical), dtype=bool)
    shared[np.arange(num_layers)[:, None], static.lowest] = ~varies
    return shared


def _source_sets(by_slot: np.ndarray):
    """(CSR [sets, sources] of the distinct rows of `by_slot` ([..., layers, physical, sources]
    bool: which sources send to each slot), [... * layers * physical] int each slot's row), rows
    in the order `np.unique` sorts them, each row's sources in increasing order."""
    num_sources = by_slot.shape[-1]
    by_slot = by_slot.reshape(-1, num_sources)
    packed = np.packbits(by_slot, axis=1)                                        # [L * P, S / 8]
    _, first, slot_set = np.unique(packed.view(np.dtype((np.void, packed.shape[1]))).ravel(),
                                   return_index=True, return_inverse=True)
    sets = by_slot[first]                                                        # [sets, S]
    sources = np.broadcast_to(np.arange(num_sources, dtype=np.int32), sets.shape)[sets]
    return (_csr(np.ones(sources.size), sources, sets.sum(axis=1, dtype=np.int32), num_sources),
            slot_set.ravel())


def _first_per_node(p: Placement) -> np.ndarray:
    """[layers, physical] bool: per layer, node and logical expert, its lowest live slot."""
    num_layers, num_physical = p.physical_to_logical.shape
    node = p.rank_of_slot() // p.ranks_per_node
    dead = p.num_nodes * p.num_logical                                           # sorts last
    key = np.where(p.live_slots()[None, :], node[None, :] * p.num_logical + p.physical_to_logical,
                   dead)                                                         # [L, P]
    order = np.argsort(key, axis=1, kind="stable")
    ordered = np.take_along_axis(key, order, axis=1)
    first = np.ones_like(ordered, dtype=bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    out = np.zeros((num_layers, num_physical), dtype=bool)
    np.put_along_axis(out, order, first & (ordered < dead), axis=1)
    return out


def _csr(ones: np.ndarray, indices: np.ndarray, counts: np.ndarray, num_columns: int):
    """CSR matrix of the given column `indices` (row-major), `counts` [...] entries per row."""
    from scipy import sparse                    # only runs with static replicas
    indptr = np.zeros(counts.size + 1, dtype=np.int32)
    np.cumsum(counts.ravel(), dtype=np.int32, out=indptr[1:])
    return sparse.csr_matrix((ones, indices, indptr), shape=(counts.size, num_columns))


def _to_destination(p: Placement, used: np.ndarray, slots_per_dest: int, ones: np.ndarray):
    """[sources * layers * dests, layers * experts] CSR: row (source, layer, dest) holds the
    experts that source sends to that destination (rank or node), in increasing order.

    A destination's slots, ordered by the logical expert each holds ([layers, physical]
    `order`), list its row's experts in increasing order where the source uses them (a source
    uses one slot per expert, so no expert appears twice)."""
    num_sources, num_layers, num_experts = used.shape[0], used.shape[1], p.num_logical
    p2l = p.physical_to_logical                                                  # [L, P]
    num_dest = p.num_physical // slots_per_dest
    by_dest = p2l.reshape(num_layers, num_dest, slots_per_dest)
    order = np.argsort(by_dest, axis=2, kind="stable") + (
        np.arange(num_dest) * slots_per_dest)[None, :, None]                    # [L, D, k] slots
    order = order.reshape(num_layers, -1)
    flat_order = (np.arange(num_layers)[:, None] * p.num_physical + order).ravel()
    mask = np.take(used.reshape(num_sources, -1), flat_order, axis=1).reshape(used.shape)
    columns = (np.take_along_axis(p2l, order, axis=1)
               + (np.arange(num_layers) * num_experts)[:, None]).astype(np.int32)  # l * E + e
    indices = np.broadcast_to(columns, mask.shape)[mask]
    return _csr(ones, indices, _group_count(mask, slots_per_dest), num_layers * num_experts)


def _group_count(mask: np.ndarray, group: int) -> np.ndarray:
    """[..., n] bool -> [..., n // group] int32 trues per consecutive group (`rank_sum`)."""
    return rank_sum(mask.astype(np.int32), group)


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
    static_map = placement.static_dispatch_parts() if per_source else None
    return PlacementTables(placement, dispatch_algorithm, slot_share, is_identity, static_map)
