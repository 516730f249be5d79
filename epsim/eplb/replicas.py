"""How tokens pick among an expert's replicas (SGLang's `ep_dispatch_algorithm`). Functions of
an `epsim.eplb.Placement`, which calls them; the simulator's traffic tables and `live/`'s block
both take the static map from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.errors import PlacementError
from epsim.vocab import REPLICA_SELECTIONS


def replica_fractions(placement, selection: str = "random") -> np.ndarray:
    """Share of its logical expert's tokens each slot receives (expected value).

    `random` and `round_robin` split an expert's tokens evenly over its replicas. `static`
    follows SGLang's static dispatch map: every source rank (1/num_ranks of the tokens under DP
    attention) sends an expert's tokens to a replica on its own rank if one exists, else to one
    in its node, else to any; ties are split evenly, the expectation of SGLang's seeded fair
    draw. Every rank and replica counts (the alive mask is the traffic tables' business).

    Returns:
        [layers, physical] float64; per layer and expert the shares sum to 1.
    Raises:
        PlacementError: an unknown selection.
    """
    if selection not in REPLICA_SELECTIONS:
        raise PlacementError(f"selection ({selection!r}) must be one of {list(REPLICA_SELECTIONS)}")
    p = placement
    p2l, counts = p.physical_to_logical, p.logical_count
    rows = np.arange(p.num_layers)[:, None]
    if selection != "static":
        return 1.0 / counts[rows, p2l]
    rank = np.broadcast_to(p.rank_of_slot()[None, :], p2l.shape)
    node = rank // p.ranks_per_node
    flat = ((rows * p.num_ranks + rank) * p.num_logical + p2l).ravel()
    rank_count = np.bincount(flat, minlength=p.num_layers * p.num_ranks * p.num_logical).astype(
        np.float64).reshape(p.num_layers, p.num_ranks, p.num_logical)  # [layers, ranks, logical]
    by_node = rank_count.reshape(p.num_layers, p.num_nodes, p.ranks_per_node, p.num_logical)
    node_count = by_node.sum(axis=2)                                     # [layers, nodes, logical]
    ranks_without = (by_node == 0).sum(axis=2)                           # [layers, nodes, logical]
    # source ranks in nodes holding no replica of the expert spread over all its replicas
    ranks_in_empty_nodes = (node_count == 0).sum(axis=1) * p.ranks_per_node  # [layers, logical]
    own = 1.0 / rank_count[rows, rank, p2l]
    same_node = ranks_without[rows, node, p2l] / node_count[rows, node, p2l]
    remote = ranks_in_empty_nodes[rows, p2l] / counts[rows, p2l]
    return (own + same_node + remote) / p.num_ranks


@dataclass(frozen=True, eq=False)
class StaticMap:
    """SGLang's `static` replica choice (`static_dispatch_parts`), kept compact: an expert with
    one live replica is sent to it by every source, so only the replicated experts carry a
    per-source choice (at EP 144 the full `[ranks, layers, logical]` map is 2 M entries, the
    replicated part a tenth of them).

    Attributes:
        lowest: [layers, logical] int32 lowest live slot of each expert (every source's choice
            for an expert with one live replica).
        layer, expert: [K] int64, the experts with more than one live replica, in (layer,
            expert) order (layers counted within the map's rows).
        picked: [ranks, K] int32, the slot each source sends each of those experts to.
    """

    lowest: np.ndarray
    layer: np.ndarray
    expert: np.ndarray
    picked: np.ndarray

    def full(self) -> np.ndarray:
        """[ranks, layers, logical] int32: the slot each source sends each expert to."""
        num_ranks = self.picked.shape[0]
        num_layers, num_logical = self.lowest.shape
        out = np.broadcast_to(self.lowest, (num_ranks, num_layers, num_logical)).copy()
        flat, rows = self.layer * num_logical + self.expert, out.reshape(num_ranks, -1)
        for source in range(num_ranks):      # one row at a time: a [:, K] scatter strides by rows
            rows[source, flat] = self.picked[source]
        return out

    def with_rows(self, rows: np.ndarray, chunk: "StaticMap") -> "StaticMap":
        """This map with layers `rows` ([n] indices) taken from `chunk` (the map of those rows
        alone, its layers counted within them)."""
        lowest = self.lowest.copy()
        lowest[rows] = chunk.lowest
        keep = ~np.isin(self.layer, rows)
        layer = np.concatenate([self.layer[keep], rows[chunk.layer]])
        expert = np.concatenate([self.expert[keep], chunk.expert])
        picked = np.concatenate([self.picked[:, keep], chunk.picked], axis=1)
        order = np.argsort(layer * lowest.shape[1] + expert, kind="stable")
        return StaticMap(lowest, layer[order], expert[order], np.ascontiguousarray(picked[:, order]))


def static_dispatch_map(placement, layers=None) -> np.ndarray:
    """`static_dispatch_parts(placement, layers).full()`: [ranks, layers, logical] int32."""
    return static_dispatch_parts(placement, layers).full()


def static_dispatch_parts(placement, layers=None) -> StaticMap:
    """SGLang's `static` replica choice as one fixed map: the slot each source rank sends each
    logical expert's tokens to.

    A replica on the source's own rank if any; else the k-th replica in its node (k = the
    source's index in the node, modulo the node's replicas); else replica
    `(source + layer + expert) mod replicas`. Replicas count in ascending slot order and only
    on alive ranks. This is the simulator's and `live/`'s realization of SGLang's seeded fair
    choice; it is close to, not exactly, fair (sources that hold a replica still take a local
    index), which `replica_fractions(..., "static")` models by expectation.

    Args:
        placement: an `epsim.eplb.Placement` (its alive mask applies). Failed sources get a
            map too (they send nothing).
        layers: only these layers (indices or a slice; None: all).
    Returns:
        the map, compact (`StaticMap`; `.full()` is `[ranks, layers, logical]` int32 slot ids).
    Raises:
        PlacementError: an expert with no replica on an alive rank.
    """
    p = placement
    layer_ids = np.arange(p.num_layers)[slice(None) if layers is None else layers]
    p2l = p.physical_to_logical[layer_ids]
    num_layers, num_physical = p2l.shape
    num_ranks, num_logical, spr, rpn = p.num_ranks, p.num_logical, p.slots_per_rank, p.ranks_per_node
    key = np.where(p.live_slots()[None, :], p2l, num_logical)            # dead slots sort last
    order = np.argsort(key, axis=1, kind="stable")                       # [layers, physical]
    counts = p.live_counts()[layer_ids]                                  # [layers, logical]
    if (counts == 0).any():
        layer, expert = np.argwhere(counts == 0)[0]
        raise PlacementError(f"logical expert {expert} of layer {layer_ids[layer]} has no replica "
                             f"on a live rank; every expert must keep >= 1")
    starts = np.cumsum(counts, axis=1) - counts                          # [layers, logical]
    lowest = np.take_along_axis(order, starts, axis=1).astype(np.int32)  # lowest live slot
    layer, expert = np.nonzero(counts > 1)                               # [K] replicated
    if layer.shape[0] == 0:
        return StaticMap(lowest, layer, expert, np.zeros((num_ranks, 0), dtype=np.int32))
    num = counts[layer, expert]                                          # [K]
    kth_replica = np.arange(int(num.max()))[None, :]                     # [1, M]
    valid = kth_replica < num[:, None]                                   # [K, M]
    slots = order[layer[:, None], np.minimum(starts[layer, expert][:, None] + kth_replica,
                                             num_physical - 1)]          # [K, M] ascending
    rank = slots // spr                                                  # [K, M]
    # tables below are [ranks, K] (`StaticMap.full` writes them into the map row by row) and
    # int32, whose division is several times faster than int64's
    num_k = layer.shape[0]
    src, num32 = np.arange(num_ranks, dtype=np.int32), num.astype(np.int32)
    # no replica on the source's node: spread by source, layer and expert
    choice = (src[:, None] + (layer_ids[layer] + expert).astype(np.int32)[None, :]) % num32
    # replicas ascend by slot, so by rank and node: a node's replicas are one run of m
    num_on_node = np.bincount((np.arange(num_k)[:, None] * p.num_nodes + rank // rpn)[valid],
                              minlength=num_k * p.num_nodes).reshape(num_k, p.num_nodes).T
    num_on_node = np.ascontiguousarray(num_on_node, dtype=np.int32)     # [nodes, K]
    first_on_node = np.cumsum(num_on_node, axis=0, dtype=np.int32) - num_on_node
    src_node = src // rpn
    on_node = num_on_node[src_node]                                      # [ranks, K]
    choice = np.where(on_node > 0, first_on_node[src_node] + (src % rpn)[:, None]
                      % np.maximum(on_node, 1), choice)
    for m in range(int(num.max()) - 1, -1, -1):       # a replica on the source's own rank;
        k = np.flatnonzero(valid[:, m])               # the lowest m last, so it wins
        choice[rank[k, m], k] = m
    width = slots.shape[1]
    picked = np.take(slots.ravel(), choice + np.arange(0, num_k * width, width, dtype=np.int32))
    return StaticMap(lowest, layer, expert, picked)
