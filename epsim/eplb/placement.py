"""Placement: which logical expert each physical expert slot holds, per MoE layer, and which EP
ranks serve (the alive mask of elastic EP).

Slot `s` of a layer lives on rank `s // slots_per_rank`; rank `r` on node `r // ranks_per_node`.
Every algorithm in `epsim.eplb` returns a `Placement`; the simulator, `live/` and the app read
loads, balance, the static dispatch map (`epsim.eplb.replicas`) and moves (`epsim.eplb.moves`)
from it. A failed rank keeps its slots in the maps (what it held is what it holds when it comes
back) but takes no tokens and sends no weights: every "live" view below leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from epsim.eplb import replicas
from epsim.eplb.maps import check_maps, derive_maps
from epsim.errors import PlacementError


def _readonly(array: np.ndarray, dtype=np.int64) -> np.ndarray:
    array = np.array(array, dtype=dtype, copy=True)
    array.setflags(write=False)
    return array


def ranks_per_node(num_ranks: int, gpus_per_node: int) -> int:
    """EP ranks per node: an EP group smaller than a node sits inside one node.

    Raises:
        PlacementError: a group spanning nodes that is not a whole number of nodes.
    """
    per_node = min(int(gpus_per_node), int(num_ranks))
    if per_node <= 0 or num_ranks % per_node:
        raise PlacementError(f"num_ranks ({num_ranks}) must be a multiple of gpus_per_node "
                             f"({gpus_per_node}) when it spans nodes")
    return per_node


@dataclass(frozen=True, eq=False)
class Placement:
    """Expert-parallel placement of one model, all MoE layers.

    Attributes:
        physical_to_logical: [layers, physical] int64, logical expert held by each slot.
        logical_to_physical: [layers, logical, max_replicas] int64, slots of each logical
            expert in replica order (alive or not), padded with -1.
        logical_count: [layers, logical] int64, replicas of each logical expert (alive or not).
        num_ranks: EP ranks; every rank holds `physical // num_ranks` consecutive slots.
        num_nodes: nodes; every node holds `num_ranks // num_nodes` consecutive ranks.
        alive: [ranks] bool, ranks that serve (read-only); None = every rank.
    """

    physical_to_logical: np.ndarray
    logical_to_physical: np.ndarray
    logical_count: np.ndarray
    num_ranks: int
    num_nodes: int = 1
    alive: np.ndarray | None = None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_physical_to_logical(cls, physical_to_logical: np.ndarray, num_logical: int,
                                 num_ranks: int, num_nodes: int = 1,
                                 replica_rank: np.ndarray | None = None,
                                 alive: np.ndarray | None = None) -> "Placement":
        """A placement of a slot map, its other maps derived (`epsim.eplb.maps.derive_maps`).

        Args:
            physical_to_logical: [layers, physical] int, logical id per slot.
            num_logical: logical experts per layer.
            replica_rank: [layers, physical] int, the replica index of each slot within its
                expert (the order of `logical_to_physical`); default: ascending slot order.
            alive: [ranks] bool, ranks that serve (None: all).
        Raises:
            PlacementError: ids outside [0, num_logical), a malformed replica_rank or mask.
        """
        maps = derive_maps(physical_to_logical, num_logical, replica_rank)
        out = cls(_readonly(maps.physical_to_logical), _readonly(maps.logical_to_physical),
                  _readonly(maps.logical_count), int(num_ranks), int(num_nodes))
        return out if alive is None else out.with_alive(alive)

    @classmethod
    def on_cluster(cls, physical_to_logical: np.ndarray, num_logical: int, num_ranks: int,
                   gpus_per_node: int, alive: np.ndarray | None = None) -> "Placement":
        """A slot map over `num_ranks` EP ranks of a cluster with `gpus_per_node` GPUs per node
        (nodes: `ranks_per_node`), validated."""
        num_nodes = num_ranks // ranks_per_node(num_ranks, gpus_per_node)
        return cls.from_physical_to_logical(physical_to_logical, num_logical, num_ranks,
                                            num_nodes, alive=alive).validate()

    @classmethod
    def contiguous(cls, num_layers: int, num_logical: int, num_ranks: int,
                   num_nodes: int = 1) -> "Placement":
        """No redundancy: expert `e` on rank `e // (num_logical // num_ranks)` in every layer."""
        p2l = np.tile(np.arange(num_logical), (num_layers, 1))
        return cls.from_physical_to_logical(p2l, num_logical, num_ranks, num_nodes)

    @classmethod
    def from_dict(cls, data: dict, num_logical: int | None = None, where: str = "placement") -> "Placement":
        """Read `{"phy2log": [[...]], "num_gpus": R, "num_nodes": N}` (the shape `to_dict` and
        `epsim eplb --json` write, the reference's names); `num_logical` defaults to the largest
        id + 1."""
        if not isinstance(data, dict) or "phy2log" not in data:
            raise PlacementError(f"{where}: phy2log (missing) must be a [layers, physical] list")
        try:
            p2l = np.asarray(data["phy2log"], dtype=np.float64)
        except (TypeError, ValueError):
            raise PlacementError(f"{where}: phy2log must be a rectangular [layers, physical] "
                                 f"list of expert ids") from None
        if p2l.ndim == 1:
            p2l = p2l[None, :]
        num_ranks = data.get("num_gpus")
        if not isinstance(num_ranks, int) or num_ranks <= 0:
            raise PlacementError(f"{where}: num_gpus ({num_ranks!r}) must be a positive integer")
        num_nodes = data.get("num_nodes", 1)
        if not isinstance(num_nodes, int) or num_nodes <= 0:
            raise PlacementError(f"{where}: num_nodes ({num_nodes!r}) must be a positive integer")
        if num_logical is None:
            num_logical = int(np.nanmax(p2l)) + 1 if p2l.size else 0
        try:
            return cls.from_physical_to_logical(p2l, num_logical, num_ranks, num_nodes).validate()
        except PlacementError as exc:
            raise PlacementError(f"{where}: {exc}") from None

    # -- derived placements ------------------------------------------------------------------
    def with_alive(self, alive: np.ndarray | Sequence[bool] | None) -> "Placement":
        """The same slots with another alive mask ([ranks] bool; None or all True: all serve).

        Raises:
            PlacementError: a mask of the wrong length or with no rank alive.
        """
        if alive is not None:
            alive = np.asarray(alive)
            if alive.shape != (self.num_ranks,):
                raise PlacementError(f"alive (shape {list(alive.shape)}) must be [ranks] = "
                                     f"[{self.num_ranks}]")
            alive = None if alive.astype(bool).all() else _readonly(alive, bool)
        if alive is not None and not alive.any():
            raise PlacementError("alive (no rank) must keep at least one rank serving")
        if _same_mask(alive, self.alive):
            return self                              # keeps a computed dispatch map
        return replace(self, alive=alive)

    def with_physical_to_logical(self, physical_to_logical: np.ndarray) -> "Placement":
        """Other slots on the same ranks, nodes and mask (validated)."""
        return Placement.from_physical_to_logical(physical_to_logical, self.num_logical,
                                                  self.num_ranks, self.num_nodes,
                                                  alive=self.alive).validate()

    def with_rows(self, other: "Placement", layers) -> "Placement":
        """This placement with `layers` (indices or a slice) taken from `other` (a layer chunk of
        a rebalance moved), this mask. Both are valid per layer, so rows mix without validating
        again; a dispatch map computed here keeps its other rows (each layer's map depends on
        that layer alone), so moving chunk by chunk recomputes only the chunk's."""
        rows = np.arange(self.num_layers)[layers]

        def mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            if a.ndim == 3 and a.shape[2] != b.shape[2]:   # replica tables: pad to the wider
                width = max(a.shape[2], b.shape[2])
                a, b = (np.pad(x, ((0, 0), (0, 0), (0, width - x.shape[2])), constant_values=-1)
                        for x in (a, b))
            out = np.array(a, copy=True)
            out[rows] = b[rows]
            out.setflags(write=False)
            return out

        out = replace(self, physical_to_logical=mix(self.physical_to_logical, other.physical_to_logical),
                      logical_to_physical=mix(self.logical_to_physical, other.logical_to_physical),
                      logical_count=mix(self.logical_count, other.logical_count))
        mine = self.__dict__.get("_dispatch_parts")
        if mine is not None:
            chunk = replicas.static_dispatch_parts(out, layers=rows)
            out.__dict__["_dispatch_parts"] = mine.with_rows(rows, chunk)
        return out

    def survivors(self) -> "Placement":
        """The alive ranks' slots alone, renumbered, as one node of `num_alive` ranks (what the
        survivors of a failure serve; placement algorithms run on it)."""
        return Placement.from_physical_to_logical(
            self.physical_to_logical[:, self.live_slot_ids()], self.num_logical, self.num_alive)

    def expand(self, survivors: "Placement | np.ndarray") -> "Placement":
        """Inverse of `survivors`: the alive ranks' slots replaced by `survivors`' (a Placement
        or [layers, alive slots]), the failed ranks' slots unchanged, this topology and mask."""
        compact = np.asarray(getattr(survivors, "physical_to_logical", survivors))
        slots = self.live_slot_ids()
        if compact.shape != (self.num_layers, len(slots)):
            raise PlacementError(f"survivor placement (shape {list(compact.shape)}) must be "
                                 f"[layers, alive slots] = {[self.num_layers, len(slots)]}")
        out = self.physical_to_logical.copy()
        out[:, slots] = compact
        return self.with_physical_to_logical(out)

    # -- shape -----------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.physical_to_logical.shape[0]

    @property
    def num_physical(self) -> int:
        return self.physical_to_logical.shape[1]

    @property
    def num_logical(self) -> int:
        return self.logical_count.shape[1]

    @property
    def num_redundant(self) -> int:
        return self.num_physical - self.num_logical

    @property
    def slots_per_rank(self) -> int:
        return self.num_physical // self.num_ranks

    @property
    def ranks_per_node(self) -> int:
        return self.num_ranks // self.num_nodes

    @property
    def alive_mask(self) -> np.ndarray:
        """[ranks] bool, True where the rank serves (all True without a mask)."""
        return np.ones(self.num_ranks, dtype=bool) if self.alive is None else self.alive.copy()

    @property
    def all_alive(self) -> bool:
        return self.alive is None

    @property
    def num_alive(self) -> int:
        return self.num_ranks if self.alive is None else int(self.alive.sum())

    def rank_of_slot(self) -> np.ndarray:
        """[physical] int64, the EP rank each slot lives on."""
        return np.arange(self.num_physical) // self.slots_per_rank

    def node_of_rank(self) -> np.ndarray:
        """[ranks] int64, the node each rank lives in."""
        return np.arange(self.num_ranks) // self.ranks_per_node

    def local_slots(self, rank: int) -> np.ndarray:
        """[layers, slots_per_rank] int64, the logical expert of each slot `rank` holds."""
        begin = rank * self.slots_per_rank
        return self.physical_to_logical[:, begin:begin + self.slots_per_rank]

    def as_tuple(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(phy2log, log2phy, logcnt)`, the reference EPLB's return value."""
        return self.physical_to_logical, self.logical_to_physical, self.logical_count

    def to_dict(self) -> dict:
        """JSON-ready maps and topology under the reference's names (`num_gpus`: the EP ranks),
        plus the alive mask when some rank failed."""
        out = {"phy2log": self.physical_to_logical.tolist(),
               "log2phy": self.logical_to_physical.tolist(),
               "logcnt": self.logical_count.tolist(),
               "num_gpus": self.num_ranks, "num_nodes": self.num_nodes}
        if self.alive is not None:
            out["alive"] = self.alive.tolist()
        return out

    # -- the live ranks' view ----------------------------------------------------------------
    def live_slots(self) -> np.ndarray:
        """[physical] bool, slots on alive ranks."""
        return np.repeat(self.alive_mask, self.slots_per_rank)

    def live_slot_ids(self) -> np.ndarray:
        """[alive physical] int64, the slots on alive ranks, ascending."""
        return np.flatnonzero(self.live_slots())

    def live_counts(self) -> np.ndarray:
        """[layers, logical] int64 replicas of each expert on alive ranks."""
        if self.alive is None:
            return self.logical_count
        width = self.num_logical + 1                  # dead slots count in a last column
        key = np.where(self.live_slots()[None, :], self.physical_to_logical, self.num_logical)
        flat = (np.arange(self.num_layers)[:, None] * width + key).ravel()
        counts = np.bincount(flat, minlength=self.num_layers * width).reshape(self.num_layers, width)
        return counts[:, :self.num_logical]

    def live_logical_to_physical(self) -> np.ndarray:
        """[layers, logical, max alive replicas] int64, each expert's slots on alive ranks in
        replica order, -1 padded (what a `random` replica choice draws from)."""
        if self.alive is None:
            return self.logical_to_physical
        l2p = self.logical_to_physical
        keep = (l2p >= 0) & self.live_slots()[np.maximum(l2p, 0)]
        order = np.argsort(~keep, axis=2, kind="stable")                  # kept first, in order
        out = np.where(np.take_along_axis(keep, order, axis=2), np.take_along_axis(l2p, order, axis=2), -1)
        return _readonly(out[:, :, :max(int(self.live_counts().max()), 1)])

    def check_live(self) -> "Placement":
        """Raise PlacementError unless every logical expert has a replica on an alive rank."""
        counts = self.live_counts()
        if (counts == 0).any():
            layer, expert = np.argwhere(counts == 0)[0]
            raise PlacementError(f"logical expert {expert} of layer {layer} has no replica on a "
                                 f"live rank; every expert must keep >= 1")
        return self

    # -- tokens ----------------------------------------------------------------------------
    def static_dispatch_map(self, layers=None) -> np.ndarray:
        """[ranks, layers, logical] int32: the slot each source rank sends each logical
        expert's tokens to under SGLang's `static` selection, over alive replicas
        (`epsim.eplb.replicas.static_dispatch_parts`); all layers are computed once and kept.

        Raises:
            PlacementError: an expert with no replica on an alive rank.
        """
        if layers is not None:
            return replicas.static_dispatch_map(self, layers)
        if "_dispatch_map" not in self.__dict__:
            full = self.static_dispatch_parts().full()
            full.setflags(write=False)
            self.__dict__["_dispatch_map"] = full       # a cache; the dataclass stays frozen
        return self.__dict__["_dispatch_map"]

    def static_dispatch_parts(self) -> "replicas.StaticMap":
        """`static_dispatch_map` kept compact (`epsim.eplb.replicas.StaticMap`: the replicated
        experts' per-source choices only), computed once and kept.

        Raises:
            PlacementError: an expert with no replica on an alive rank.
        """
        if "_dispatch_parts" not in self.__dict__:
            self.__dict__["_dispatch_parts"] = replicas.static_dispatch_parts(self)
        return self.__dict__["_dispatch_parts"]

    def replica_fractions(self, selection: str = "random") -> np.ndarray:
        """[layers, physical] float64 share of its logical expert's tokens each slot receives
        (expected value; `epsim.eplb.replicas.replica_fractions`)."""
        return replicas.replica_fractions(self, selection)

    def physical_loads(self, weight: np.ndarray, selection: str = "random") -> np.ndarray:
        """[layers, physical] float64 tokens each slot serves, from logical `weight`
        [layers, logical]."""
        weight = self._check_weight(weight)
        rows = np.arange(self.num_layers)[:, None]
        return weight[rows, self.physical_to_logical] * self.replica_fractions(selection)

    def rank_loads(self, weight: np.ndarray, selection: str = "random") -> np.ndarray:
        """[layers, ranks] float64 tokens each rank's experts serve.

        Args:
            weight: [layers, logical] tokens routed to each logical expert.
            selection: how tokens pick among replicas: static | random | round_robin.
        """
        per_slot = self.physical_loads(weight, selection)
        return per_slot.reshape(self.num_layers, self.num_ranks, self.slots_per_rank).sum(axis=2)

    def balancedness(self, weight: np.ndarray, selection: str = "random") -> np.ndarray:
        """[layers] float64 mean rank load / max rank load (1.0 = balanced; 1.0 for idle layers)."""
        loads = self.rank_loads(weight, selection)
        peak = loads.max(axis=1)
        return np.where(peak > 0, loads.mean(axis=1) / np.where(peak > 0, peak, 1.0), 1.0)

    def changed_slots(self, previous: "Placement") -> np.ndarray:
        """[layers] int64 slots whose logical expert differs from `previous`'s."""
        if previous.physical_to_logical.shape != self.physical_to_logical.shape:
            raise PlacementError(f"previous placement (shape {list(previous.physical_to_logical.shape)}) "
                                 f"must have this placement's shape "
                                 f"{list(self.physical_to_logical.shape)}")
        return (previous.physical_to_logical != self.physical_to_logical).sum(axis=1)

    def _check_weight(self, weight: np.ndarray) -> np.ndarray:
        weight = np.asarray(weight, dtype=np.float64)
        if weight.shape != (self.num_layers, self.num_logical):
            raise PlacementError(f"weight (shape {list(weight.shape)}) must be [layers, logical] = "
                                 f"{[self.num_layers, self.num_logical]}")
        return weight

    # -- invariants ------------------------------------------------------------------------
    def validate(self) -> "Placement":
        """Check the invariants (`epsim.eplb.maps.check_maps`); return self.

        Raises:
            PlacementError: naming the first broken invariant.
        """
        check_maps(self)
        return self


def _same_mask(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
