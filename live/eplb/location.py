"""Expert location: which physical slot holds which logical expert, which ranks serve, and the
replica each source rank dispatches to.

`ExpertLocation` is an `ExpertPlacement` (so every block and backend takes it as is) plus an
active-rank mask: with a masked rank (elastic EP), `logical_to_all_physical`, the replica counts
and the static per-source-rank dispatch map list only slots on active ranks, so no token is sent
to a masked rank. Names follow SGLang's `ExpertLocationMetadata` (`physical_to_logical_map`,
`logical_to_all_physical_map`, `logical_to_rank_dispatch_physical_map`).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from live.errors import LiveError
from live.placement import GPUS_PER_NODE, ExpertPlacement


class ExpertLocation(ExpertPlacement):
    """A placement of every model layer over `ep_size` ranks, some of which may be masked.

    Args:
        physical_to_logical: [layers, physical] int, logical expert of each slot (slot `s` on
            rank `s // slots_per_rank`). Slots of masked ranks keep whatever they held.
        active_ranks: [ranks] bool (or 0/1), ranks that serve; None = all.
    Attributes (besides ExpertPlacement's):
        active_ranks: [ranks] bool, read-only.
        logical_to_physical: [layers, experts, max_replicas] int64, active slots of each expert
            (-1 padded); `random` dispatch draws among these.
        logical_count: [layers, experts] int64, active replicas.
    Raises:
        LiveError: a mask of the wrong length, with no active rank, or one that leaves a logical
            expert without an active replica (re-place it first: `live.eplb.elastic`).
    """

    def __init__(self, physical_to_logical, num_experts: int, ep_size: int,
                 gpus_per_node: int = GPUS_PER_NODE, active_ranks=None):
        super().__init__(physical_to_logical, num_experts, ep_size, gpus_per_node)
        self.active_ranks = check_active_ranks(active_ranks, ep_size)
        if not self.active_ranks.all():
            self._mask_replicas()

    # -- the maps, under SGLang's names ----------------------------------------------------
    @property
    def logical_to_all_physical(self) -> np.ndarray:
        """[layers, experts, max_replicas] int64 active slots of each expert, -1 padded."""
        return self.logical_to_physical

    def replicas_of(self, layer: int, expert: int) -> list[int]:
        """Active physical slots holding `expert` in `layer`, in replica order."""
        row = self.logical_to_physical[layer, expert]
        return row[row >= 0].tolist()

    @property
    def active_rank_ids(self) -> list[int]:
        return np.nonzero(self.active_ranks)[0].tolist()

    @property
    def is_masked(self) -> bool:
        return not bool(self.active_ranks.all())

    def rank_of_slot(self) -> np.ndarray:
        """[physical] int64, the EP rank holding each slot."""
        return np.arange(self.num_physical) // self.slots_per_rank

    def active_slots(self, active_ranks=None) -> np.ndarray:
        """[active physical] int64, the slots on active ranks (this mask, or `active_ranks`),
        ascending."""
        mask = self.active_ranks if active_ranks is None else np.asarray(active_ranks, dtype=bool)
        return np.nonzero(mask[self.rank_of_slot()])[0]

    def dispatch_map(self) -> np.ndarray:
        """[layers, ranks, experts] int64, the `static` replica each source rank sends to.

        The simulator's rule over the active ranks only (`ExpertPlacement.dispatch_map`); rows
        of masked source ranks repeat the first active rank's (a masked rank sends nothing).
        """
        if not self.is_masked:
            return super().dispatch_map()
        if self._dispatch_map is None:
            from epsim.cost import build_tables

            slots = self.active_slots()
            active = self.active_rank_ids
            tables = build_tables(self.physical_to_logical[:, slots], self.num_experts, len(active),
                                  min(self.gpus_per_node, len(active)), "static", per_source=True)
            compact = tables.source_slot                        # [active ranks, layers, experts]
            out = np.empty((self.num_layers, self.ep_size, self.num_experts), dtype=np.int64)
            for rank in range(self.ep_size):
                source = active.index(rank) if rank in active else 0
                out[:, rank] = slots[compact[source]]
            out.setflags(write=False)
            self._dispatch_map = out
        return self._dispatch_map

    # -- derived locations -----------------------------------------------------------------
    def with_rows(self, other: "ExpertLocation", layers: Sequence[int]) -> "ExpertLocation":
        """This location with `layers` taken from `other` (a layer chunk moved by the updater).

        Both are validated and every invariant holds per layer, so rows are mixed without
        validating again (this runs once per chunk); dispatch-map rows are copied, not
        recomputed: each layer's map depends on that layer alone.
        """
        layers = list(layers)
        out = copy.copy(self)
        out.placement = replace(
            self.placement,
            physical_to_logical=_mix(self.placement.physical_to_logical,
                                     other.placement.physical_to_logical, layers),
            logical_to_physical=_mix(self.placement.logical_to_physical,
                                     other.placement.logical_to_physical, layers),
            logical_count=_mix(self.placement.logical_count, other.placement.logical_count, layers))
        out.physical_to_logical = out.placement.physical_to_logical
        out.logical_to_physical = _mix(self.logical_to_physical, other.logical_to_physical, layers)
        out.logical_count = _mix(self.logical_count, other.logical_count, layers)
        out._dispatch_map = _mix(self.dispatch_map(), other.dispatch_map(), layers)
        return out

    def with_physical_to_logical(self, physical_to_logical) -> "ExpertLocation":
        """Other slots, the same ranks and mask."""
        return ExpertLocation(physical_to_logical, self.num_experts, self.ep_size,
                              self.gpus_per_node, self.active_ranks)

    def with_active_ranks(self, active_ranks) -> "ExpertLocation":
        """The same slots with another mask."""
        return ExpertLocation(self.physical_to_logical, self.num_experts, self.ep_size,
                              self.gpus_per_node, active_ranks)

    def compact(self, active_ranks=None) -> np.ndarray:
        """[layers, active ranks x slots_per_rank] int64, the slot map of the active ranks
        (this mask, or `active_ranks`) alone, renumbered (what the survivors serve)."""
        return self.physical_to_logical[:, self.active_slots(active_ranks)].copy()

    def expand(self, compact_physical_to_logical, active_ranks=None) -> np.ndarray:
        """Inverse of `compact`: [layers, physical] with the active ranks' slots replaced and
        the masked ranks' slots unchanged."""
        compact = np.asarray(compact_physical_to_logical)
        slots = self.active_slots(active_ranks)
        if compact.shape != (self.num_layers, len(slots)):
            raise LiveError(f"survivor placement (shape {list(compact.shape)}) must be "
                            f"[layers, active slots] = {[self.num_layers, len(slots)]}")
        out = self.physical_to_logical.copy()
        out[:, slots] = compact
        return out

    # -- internals ---------------------------------------------------------------------------
    def _mask_replicas(self) -> None:
        slots = self.active_slots()
        p2l = self.physical_to_logical[:, slots]                       # [layers, active slots]
        counts = np.zeros((self.num_layers, self.num_experts), dtype=np.int64)
        np.add.at(counts, (np.repeat(np.arange(self.num_layers), len(slots)), p2l.ravel()), 1)
        missing = np.argwhere(counts == 0)
        if len(missing):
            layer, expert = (int(v) for v in missing[0])
            raise LiveError(f"logical expert {expert} of layer {layer} has no replica on the active "
                            f"ranks {self.active_rank_ids}; re-place it onto them first "
                            f"(live.eplb.elastic.mask_ranks)")
        width = int(counts.max())
        l2p = np.full((self.num_layers, self.num_experts, width), -1, dtype=np.int64)
        for layer in range(self.num_layers):
            order = np.argsort(p2l[layer], kind="stable")             # slots grouped by expert
            experts = p2l[layer][order]
            starts = np.cumsum(counts[layer]) - counts[layer]
            l2p[layer, experts, np.arange(len(order)) - starts[experts]] = slots[order]
        for array in (l2p, counts):
            array.setflags(write=False)
        self.logical_to_physical, self.logical_count = l2p, counts


def _mix(mine: np.ndarray, theirs: np.ndarray, layers: list[int]) -> np.ndarray:
    """`mine` with rows `layers` from `theirs`, read-only; a 3-D replica table is -1 padded to
    the wider of the two."""
    if mine.ndim == 3 and mine.shape[2] != theirs.shape[2]:
        width = max(mine.shape[2], theirs.shape[2])
        mine, theirs = (np.pad(a, ((0, 0), (0, 0), (0, width - a.shape[2])), constant_values=-1)
                        for a in (mine, theirs))
    out = mine.copy()
    out[layers] = theirs[layers]
    out.setflags(write=False)
    return out


def check_active_ranks(active_ranks, ep_size: int) -> np.ndarray:
    """[ranks] bool mask from None (all), a bool/0-1 sequence of length `ep_size`.

    Raises:
        LiveError: the wrong length, values other than 0/1, or no active rank.
    """
    if active_ranks is None:
        mask = np.ones(ep_size, dtype=bool)
    else:
        values = np.asarray(active_ranks)
        if values.shape != (ep_size,) or not np.isin(values, (0, 1)).all():
            raise LiveError(f"active_ranks ({values.tolist()}) must be {ep_size} flags (0/1), "
                            f"one per EP rank")
        mask = values.astype(bool)
    if not mask.any():
        raise LiveError(f"active_ranks ({mask.astype(int).tolist()}) must keep at least one rank")
    mask = mask.copy()
    mask.setflags(write=False)
    return mask


def check_ranks(ranks, ep_size: int, name: str = "rank") -> list[int]:
    """Validate rank ids: integers in [0, ep_size), no repeats.

    Raises:
        LiveError: `rank (5) must be in [0, 4)`.
    """
    out = []
    for rank in ranks:
        if not isinstance(rank, (int, np.integer)) or not 0 <= rank < ep_size:
            raise LiveError(f"{name} ({rank!r}) must be in [0, {ep_size})")
        if int(rank) in out:
            raise LiveError(f"{name} ({rank}) must appear once")
        out.append(int(rank))
    return out


def rank_slots_to_physical(rank_slots: Mapping, num_layers: int, ep_size: int) -> np.ndarray:
    """A placement given per rank -> [layers, physical].

    Args:
        rank_slots: {rank: [layers][slots] logical ids}, the experts each rank holds in each
            layer, in slot order.
    Raises:
        LiveError: a rank out of range or missing, a rank with the wrong number of layers, or
            ranks holding unequal numbers of slots.
    """
    items = dict(rank_slots)
    check_ranks(list(items), ep_size)
    missing = sorted(set(range(ep_size)) - set(items))
    if missing:
        raise LiveError(f"rank {missing[0]} (missing) must be in the placement; every one of the "
                        f"{ep_size} EP ranks holds slots")
    rows = []
    for layer in range(num_layers):
        row, width = [], None
        for rank in range(ep_size):
            layers = items[rank]
            if len(layers) != num_layers:
                raise LiveError(f"rank {rank} lists {len(layers)} layers; it must list {num_layers}")
            slots = list(layers[layer])
            if width is None:
                width = len(slots)
            elif len(slots) != width:
                raise LiveError(f"rank {rank} holds {len(slots)} slots in layer {layer}; every rank "
                                f"must hold the same number (rank 0 holds {width})")
            row += slots
        rows.append(row)
    return np.asarray(rows, dtype=np.int64)


def as_location(placement, num_layers: int, num_experts: int, ep_size: int,
                active_ranks=None, gpus_per_node: int = GPUS_PER_NODE) -> ExpertLocation:
    """An ExpertLocation from any placement form.

    Args:
        placement: ExpertLocation, ExpertPlacement, `epsim.eplb.Placement`, a `[layers,
            physical]` array, or a per-rank mapping `{rank: [layers][slots]}`
            (`rank_slots_to_physical`).
        active_ranks: mask for forms that carry none; None keeps an ExpertLocation's own.
    Raises:
        LiveError: shapes, ids, GPU count, ranks or slot counts that do not fit (named).
    """
    if isinstance(placement, Mapping):
        placement = rank_slots_to_physical(placement, num_layers, ep_size)
    checked = ExpertPlacement.from_any(placement, num_layers, num_experts, ep_size)
    if isinstance(checked, ExpertLocation):
        return checked if active_ranks is None else checked.with_active_ranks(active_ranks)
    return ExpertLocation(checked.physical_to_logical, num_experts, ep_size, gpus_per_node,
                          active_ranks)


def location_of(model) -> ExpertLocation:
    """The model's current placement as an ExpertLocation (all ranks active if it has no mask)."""
    cfg = model.config
    return as_location(model.placement, cfg.num_layers, cfg.num_experts, model.placement.ep_size)
