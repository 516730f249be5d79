"""The three slot maps of a placement: `physical_to_logical` [layers, physical] (what an
algorithm gives), the replica table and counts derived from it, and the invariants the three
keep. `epsim.eplb.Placement` is built and validated through these functions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from epsim.errors import PlacementError


class SlotMaps(NamedTuple):
    """A placement's maps (the reference EPLB's `phy2log`, `log2phy`, `logcnt`).

    Attributes:
        physical_to_logical: [layers, physical] int64, logical expert held by each slot.
        logical_to_physical: [layers, logical, max_replicas] int64, slots of each logical
            expert in replica order, padded with -1.
        logical_count: [layers, logical] int64, replicas of each logical expert.
    """

    physical_to_logical: np.ndarray
    logical_to_physical: np.ndarray
    logical_count: np.ndarray


def _check_ids(p2l: np.ndarray, num_logical: int) -> None:
    """Raise PlacementError at the first slot of `p2l` [layers, physical] holding no expert id."""
    bad = np.argwhere((p2l < 0) | (p2l >= num_logical))
    if len(bad):
        layer, slot = bad[0]
        raise PlacementError(f"physical_to_logical[{layer}, {slot}] ({p2l[layer, slot]}) "
                             f"must be in [0, {num_logical})")


def _counts(p2l: np.ndarray, num_logical: int) -> np.ndarray:
    """[layers, logical] int64 slots holding each expert, of ids checked in range (one bincount
    over flat (layer, id) indices, several times faster than `np.add.at`)."""
    num_layers = p2l.shape[0]
    flat = (np.arange(num_layers)[:, None] * num_logical + p2l).ravel()
    return np.bincount(flat, minlength=num_layers * num_logical).reshape(num_layers, num_logical)


def derive_maps(physical_to_logical: np.ndarray, num_logical: int,
                replica_rank: np.ndarray | None = None) -> SlotMaps:
    """Derive `logical_to_physical` and `logical_count` from a slot map.

    Args:
        physical_to_logical: [layers, physical] int (or whole floats), logical id per slot.
        num_logical: logical experts per layer.
        replica_rank: [layers, physical] int, the replica index of each slot within its
            expert (the order of `logical_to_physical`); default: ascending slot order.
    Raises:
        PlacementError: ids outside [0, num_logical), a malformed replica_rank.
    """
    p2l = np.asarray(physical_to_logical)
    if p2l.ndim != 2 or p2l.size == 0:
        raise PlacementError(f"physical_to_logical (shape {list(p2l.shape)}) must be a "
                             f"non-empty [layers, physical] matrix")
    if not np.issubdtype(p2l.dtype, np.integer):
        if not (np.isfinite(p2l).all() and (p2l == np.round(p2l)).all()):
            raise PlacementError("physical_to_logical must hold whole expert ids")
        p2l = p2l.astype(np.int64)
    _check_ids(p2l, num_logical)
    num_layers, num_physical = p2l.shape
    rows = np.arange(num_layers)[:, None]
    counts = _counts(p2l, num_logical)
    if replica_rank is None:
        # rank of each slot among earlier slots of the same expert: stable sort by expert
        order = np.argsort(p2l, axis=1, kind="stable")                  # [layers, physical]
        sorted_ids = np.take_along_axis(p2l, order, axis=1)
        starts = np.cumsum(counts, axis=1) - counts                      # [layers, logical]
        ranks_sorted = np.arange(num_physical)[None, :] - np.take_along_axis(starts, sorted_ids, axis=1)
        replica_rank = np.empty_like(p2l)
        np.put_along_axis(replica_rank, order, ranks_sorted, axis=1)
    replica_rank = np.asarray(replica_rank, dtype=np.int64)
    if replica_rank.shape != p2l.shape:
        raise PlacementError(f"replica_rank (shape {list(replica_rank.shape)}) must match "
                             f"physical_to_logical ({list(p2l.shape)})")
    max_replicas = max(int(counts.max()), 1)
    if (replica_rank < 0).any() or (replica_rank >= max_replicas).any():
        raise PlacementError(f"replica_rank must be in [0, {max_replicas})")
    l2p = np.full((num_layers, num_logical * max_replicas), -1, dtype=np.int64)
    l2p[rows, p2l * max_replicas + replica_rank] = np.arange(num_physical)[None, :]
    return SlotMaps(p2l, l2p.reshape(num_layers, num_logical, max_replicas), counts)


def check_maps(placement) -> None:
    """Raise PlacementError naming the first broken invariant of a placement's maps.

    Every logical expert has >= 1 replica, every rank the same number of slots, every node the
    same number of ranks, and the three maps agree.
    """
    p = placement
    p2l, l2p, counts = p.physical_to_logical, p.logical_to_physical, p.logical_count
    if p2l.ndim != 2 or l2p.ndim != 3 or counts.ndim != 2:
        raise PlacementError(f"maps (ndim {p2l.ndim}, {l2p.ndim}, {counts.ndim}) must be "
                             f"[layers, physical], [layers, logical, replicas], [layers, logical]")
    num_layers, num_physical = p2l.shape
    if counts.shape[0] != num_layers or l2p.shape[:2] != counts.shape:
        raise PlacementError(f"map shapes {list(p2l.shape)}, {list(l2p.shape)}, "
                             f"{list(counts.shape)} must agree on layers and logical experts")
    if p.num_ranks <= 0 or num_physical % p.num_ranks:
        raise PlacementError(f"num_ranks ({p.num_ranks}) must be > 0 and divide the "
                             f"physical slots ({num_physical}) so every rank holds equal slots")
    if p.num_nodes <= 0 or p.num_ranks % p.num_nodes:
        raise PlacementError(f"num_nodes ({p.num_nodes}) must be > 0 and divide "
                             f"num_ranks ({p.num_ranks})")
    num_logical = counts.shape[1]
    _check_ids(p2l, num_logical)
    missing = np.argwhere(counts < 1)
    if len(missing):
        layer, expert = missing[0]
        raise PlacementError(f"logical_count[{layer}, {expert}] ({counts[layer, expert]}) "
                             f"must be >= 1; every logical expert needs a replica")
    actual = _counts(p2l, num_logical)
    wrong = np.argwhere(actual != counts)
    if len(wrong):
        layer, expert = wrong[0]
        raise PlacementError(f"logical_count[{layer}, {expert}] ({counts[layer, expert]}) must "
                             f"equal the slots holding it ({actual[layer, expert]})")
    valid = l2p >= 0                                                    # [layers, logical, replicas]
    if (valid.sum(axis=2) != counts).any() or (np.diff(valid.astype(np.int8), axis=2) > 0).any():
        raise PlacementError("logical_to_physical must list exactly logical_count slots per "
                             "expert, then -1 padding")
    if (l2p >= num_physical).any():
        raise PlacementError(f"logical_to_physical entries must be < the physical slots ({num_physical})")
    # flat (layer, slot) of every entry, padding pointed at slot 0 and masked out below
    flat = np.arange(num_layers)[:, None, None] * num_physical + np.maximum(l2p, 0)
    held = np.take(p2l.ravel(), flat)                                  # [layers, logical, replicas]
    if ((held != np.arange(num_logical)[None, :, None]) & valid).any():
        raise PlacementError("logical_to_physical must point at slots whose "
                             "physical_to_logical is that expert")
    seen = np.bincount(flat[valid], minlength=p2l.size)
    if (seen != 1).any():
        raise PlacementError("logical_to_physical must list every physical slot exactly once")
