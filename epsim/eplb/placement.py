"""Placement: which logical expert each physical expert slot holds, per MoE layer.

Slot `s` of a layer lives on GPU `s // slots_per_gpu`; GPU `g` on node `g // gpus_per_node`.
Every algorithm in `epsim.eplb` returns a `Placement`; the simulator, `live/` and the app
read loads, balance and moves from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.errors import PlacementError
from epsim.vocab import REPLICA_SELECTIONS as SELECTIONS


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=np.int64, copy=True)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Placement:
    """Expert-parallel placement of one model, all MoE layers.

    Attributes:
        physical_to_logical: [layers, physical] int64, logical expert held by each slot.
        logical_to_physical: [layers, logical, max_replicas] int64, slots of each logical
            expert in replica order, padded with -1.
        logical_count: [layers, logical] int64, replicas of each logical expert.
        num_gpus: EP ranks; every GPU holds `physical // num_gpus` consecutive slots.
        num_nodes: nodes; every node holds `num_gpus // num_nodes` consecutive GPUs.
    """

    physical_to_logical: np.ndarray
    logical_to_physical: np.ndarray
    logical_count: np.ndarray
    num_gpus: int
    num_nodes: int = 1

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_physical_to_logical(cls, physical_to_logical: np.ndarray, num_logical: int,
                                 num_gpus: int, num_nodes: int = 1,
                                 replica_rank: np.ndarray | None = None) -> "Placement":
        """Derive `logical_to_physical` and `logical_count` from the slot map.

        Args:
            physical_to_logical: [layers, physical] int, logical id per slot.
            num_logical: logical experts per layer.
            replica_rank: [layers, physical] int, the replica index of each slot within its
                expert (the order of `logical_to_physical`); default: ascending slot order.
        Raises:
            PlacementError: ids outside [0, num_logical) or a malformed replica_rank.
        """
        p2l = np.asarray(physical_to_logical)
        if p2l.ndim != 2 or p2l.size == 0:
            raise PlacementError(f"physical_to_logical (shape {list(p2l.shape)}) must be a "
                                 f"non-empty [layers, physical] matrix")
        if not np.issubdtype(p2l.dtype, np.integer):
            if not (np.isfinite(p2l).all() and (p2l == np.round(p2l)).all()):
                raise PlacementError("physical_to_logical must hold whole expert ids")
            p2l = p2l.astype(np.int64)
        bad = np.argwhere((p2l < 0) | (p2l >= num_logical))
        if len(bad):
            layer, slot = bad[0]
            raise PlacementError(f"physical_to_logical[{layer}, {slot}] ({p2l[layer, slot]}) "
                                 f"must be in [0, {num_logical})")
        num_layers, num_physical = p2l.shape
        rows = np.arange(num_layers)[:, None]
        counts = np.zeros((num_layers, num_logical), dtype=np.int64)
        np.add.at(counts, (np.broadcast_to(rows, p2l.shape), p2l), 1)
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
        return cls(_readonly(p2l), _readonly(l2p.reshape(num_layers, num_logical, max_replicas)),
                   _readonly(counts), int(num_gpus), int(num_nodes))

    @classmethod
    def contiguous(cls, num_layers: int, num_logical: int, num_gpus: int,
                   num_nodes: int = 1) -> "Placement":
        """No redundancy: expert `e` on GPU `e // (num_logical // num_gpus)` in every layer."""
        p2l = np.tile(np.arange(num_logical), (num_layers, 1))
        return cls.from_physical_to_logical(p2l, num_logical, num_gpus, num_nodes)

    @classmethod
    def from_dict(cls, data: dict, num_logical: int | None = None, where: str = "placement") -> "Placement":
        """Read `{"phy2log": [[...]], "num_gpus": G, "num_nodes": N}` (the shape `to_dict` and
        `epsim eplb --json` write); `num_logical` defaults to the largest id + 1."""
        if not isinstance(data, dict) or "phy2log" not in data:
            raise PlacementError(f"{where}: phy2log (missing) must be a [layers, physical] list")
        try:
            p2l = np.asarray(data["phy2log"], dtype=np.float64)
        except (TypeError, ValueError):
            raise PlacementError(f"{where}: phy2log must be a rectangular [layers, physical] "
                                 f"list of expert ids") from None
        if p2l.ndim == 1:
            p2l = p2l[None, :]
        num_gpus = data.get("num_gpus")
        if not isinstance(num_gpus, int) or num_gpus <= 0:
            raise PlacementError(f"{where}: num_gpus ({num_gpus!r}) must be a positive integer")
        num_nodes = data.get("num_nodes", 1)
        if not isinstance(num_nodes, int) or num_nodes <= 0:
            raise PlacementError(f"{where}: num_nodes ({num_nodes!r}) must be a positive integer")
        if num_logical is None:
            num_logical = int(np.nanmax(p2l)) + 1 if p2l.size else 0
        try:
            return cls.from_physical_to_logical(p2l, num_logical, num_gpus, num_nodes).validate()
        except PlacementError as exc:
            raise PlacementError(f"{where}: {exc}") from None

    # -- shape ---------------------------------------------------------------------------
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
    def slots_per_gpu(self) -> int:
        return self.num_physical // self.num_gpus

    @property
    def gpus_per_node(self) -> int:
        return self.num_gpus // self.num_nodes

    def gpu_of_slot(self) -> np.ndarray:
        """[physical] int64, the GPU (EP rank) each slot lives on."""
        return np.arange(self.num_physical) // self.slots_per_gpu

    def node_of_gpu(self) -> np.ndarray:
        """[gpus] int64, the node each GPU lives in."""
        return np.arange(self.num_gpus) // self.gpus_per_node

    def as_tuple(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(phy2log, log2phy, logcnt)`, the reference EPLB's return value."""
        return self.physical_to_logical, self.logical_to_physical, self.logical_count

    def to_dict(self) -> dict:
        """JSON-ready maps under the reference's names, plus the topology."""
        return {"phy2log": self.physical_to_logical.tolist(),
                "log2phy": self.logical_to_physical.tolist(),
                "logcnt": self.logical_count.tolist(),
                "num_gpus": self.num_gpus, "num_nodes": self.num_nodes}

    # -- loads -----------------------------------------------------------------------------
    def replica_fractions(self, selection: str = "random") -> np.ndarray:
        """Share of its logical expert's tokens each slot receives (expected value).

        `random` and `round_robin` split an expert's tokens evenly over its replicas. `static`
        follows SGLang's static dispatch map: every source rank (1/num_gpus of the tokens
        under DP attention) sends an expert's tokens to a replica on its own GPU if one
        exists, else to one in its node, else to any; ties are split evenly, the expectation
        of SGLang's seeded fair draw.

        Returns:
            [layers, physical] float64; per layer and expert the shares sum to 1.
        """
        if selection not in SELECTIONS:
            raise PlacementError(f"selection ({selection!r}) must be one of {list(SELECTIONS)}")
        p2l = self.physical_to_logical
        counts = self.logical_count
        rows = np.arange(self.num_layers)[:, None]
        if selection != "static":
            return 1.0 / counts[rows, p2l]
        gpu = np.broadcast_to(self.gpu_of_slot()[None, :], p2l.shape)
        node = gpu // self.gpus_per_node
        gpu_count = np.zeros((self.num_layers, self.num_gpus, self.num_logical))
        np.add.at(gpu_count, (np.broadcast_to(rows, p2l.shape), gpu, p2l), 1)  # [layers, gpus, logical]
        node_count = gpu_count.reshape(self.num_layers, self.num_nodes, self.gpus_per_node,
                                       self.num_logical).sum(axis=2)            # [layers, nodes, logical]
        gpus_without = (gpu_count.reshape(self.num_layers, self.num_nodes, self.gpus_per_node,
                                          self.num_logical) == 0).sum(axis=2)   # [layers, nodes, logical]
        # source ranks in nodes holding no replica of the expert spread over all its replicas
        ranks_in_empty_nodes = ((node_count == 0).sum(axis=1) * self.gpus_per_node)  # [layers, logical]
        own = 1.0 / gpu_count[rows, gpu, p2l]
        same_node = gpus_without[rows, node, p2l] / node_count[rows, node, p2l]
        remote = ranks_in_empty_nodes[rows, p2l] / counts[rows, p2l]
        return (own + same_node + remote) / self.num_gpus

    def live_slots(self, alive: np.ndarray | None = None) -> np.ndarray:
        """[physical] bool, slots on the `alive` GPUs ([gpus] bool; None: every slot)."""
        if alive is None:
            return np.ones(self.num_physical, dtype=bool)
        return np.repeat(np.asarray(alive, dtype=bool), self.slots_per_gpu)

    def live_counts(self, alive: np.ndarray | None = None) -> np.ndarray:
        """[layers, logical] int64 replicas of each expert on the `alive` GPUs (None: all)."""
        if alive is None:
            return self.logical_count
        key = np.where(self.live_slots(alive)[None, :], self.physical_to_logical, self.num_logical)
        counts = np.zeros((self.num_layers, self.num_logical + 1), dtype=np.int64)
        np.add.at(counts, (np.broadcast_to(np.arange(self.num_layers)[:, None], key.shape), key), 1)
        return counts[:, :self.num_logical]

    def static_dispatch_map(self, alive: np.ndarray | None = None, layers=None) -> np.ndarray:
        """SGLang's `static` replica choice as one fixed map: the slot each source GPU sends
        each logical expert's tokens to.

        A replica on the source's own GPU if any; else the k-th replica in its node (k = the
        source's index in the node, modulo the node's replicas); else replica
        `(source + layer + expert) mod replicas`. Replicas count in ascending slot order and
        only on `alive` GPUs. This is the simulator's and `live/`'s realization of SGLang's
        seeded fair choice; it is close to, not exactly, fair (sources that hold a replica
        still take a local index), which `replica_fractions("static")` models by expectation.

        Args:
            alive: [gpus] bool, GPUs that serve (None: all). Dead sources get a map too (they
                send nothing).
            layers: only these layers (indices or a slice; None: all).
        Returns:
            [gpus, layers, logical] int64 slot ids.
        Raises:
            PlacementError: an expert with no replica on a live GPU.
        """
        layer_ids = np.arange(self.num_layers)[slice(None) if layers is None else layers]
        p2l = self.physical_to_logical[layer_ids]
        num_layers, num_physical = p2l.shape
        num_gpus, num_logical, spr = self.num_gpus, self.num_logical, self.slots_per_gpu
        key = np.where(self.live_slots(alive)[None, :], p2l, num_logical)  # dead slots sort last
        order = np.argsort(key, axis=1, kind="stable")                       # [layers, physical]
        counts = self.live_counts(alive)[layer_ids]                          # [layers, logical]
        if (counts == 0).any():
            layer, expert = np.argwhere(counts == 0)[0]
            layer = layer_ids[layer]
            raise PlacementError(f"logical expert {expert} of layer {layer} has no replica on a "
                                 f"live GPU; every expert must keep >= 1")
        starts = np.cumsum(counts, axis=1) - counts                          # [layers, logical]
        out = np.broadcast_to(np.take_along_axis(order, starts, axis=1),     # lowest live slot
                              (num_gpus, num_layers, num_logical)).copy()
        layer, expert = np.nonzero(counts > 1)                               # [K] replicated
        if layer.shape[0] == 0:
            return out
        num = counts[layer, expert]                                          # [K]
        kth_replica = np.arange(int(num.max()))[None, :]                     # [1, M]
        valid = kth_replica < num[:, None]                                   # [K, M]
        slots = order[layer[:, None], np.minimum(starts[layer, expert][:, None] + kth_replica,
                                                 num_physical - 1)]          # [K, M] ascending
        gpu = np.where(valid, slots // spr, -1)
        node = np.where(valid, gpu // self.gpus_per_node, -1)
        src = np.arange(num_gpus)
        on_gpu = gpu[:, :, None] == src[None, None, :]                       # [K, M, gpus]
        on_node = node[:, :, None] == (src // self.gpus_per_node)[None, None, :]
        num_on_node = on_node.sum(axis=1)                                    # [K, gpus]
        kth = (src % self.gpus_per_node)[None, :] % np.maximum(num_on_node, 1)
        node_pick = (np.cumsum(on_node, axis=1) == (kth + 1)[:, None, :]) & on_node
        spread = (src[None, :] + layer_ids[layer][:, None] + expert[:, None]) % num[:, None]
        choice = np.where(on_gpu.any(axis=1), on_gpu.argmax(axis=1),
                          np.where(num_on_node > 0, node_pick.argmax(axis=1), spread))  # [K, gpus]
        out[:, layer, expert] = np.take_along_axis(slots, choice, axis=1).T
        return out

    def physical_loads(self, weight: np.ndarray, selection: str = "random") -> np.ndarray:
        """[layers, physical] float64 tokens each slot serves, from logical `weight`
        [layers, logical]."""
        weight = self._check_weight(weight)
        rows = np.arange(self.num_layers)[:, None]
        return weight[rows, self.physical_to_logical] * self.replica_fractions(selection)

    def gpu_loads(self, weight: np.ndarray, selection: str = "random") -> np.ndarray:
        """[layers, gpus] float64 tokens each GPU's experts serve.

        Args:
            weight: [layers, logical] tokens routed to each logical expert.
            selection: how tokens pick among replicas: static | random | round_robin.
        """
        per_slot = self.physical_loads(weight, selection)
        return per_slot.reshape(self.num_layers, self.num_gpus, self.slots_per_gpu).sum(axis=2)

    def balancedness(self, weight: np.ndarray, selection: str = "random") -> np.ndarray:
        """[layers] float64 mean GPU load / max GPU load (1.0 = balanced; 1.0 for idle layers)."""
        loads = self.gpu_loads(weight, selection)
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
        """Check the invariants; return self.

        Every logical expert has >= 1 replica, every GPU the same number of slots, every node
        the same number of GPUs, and the three maps agree.

        Raises:
            PlacementError: naming the first broken invariant.
        """
        p2l, l2p, counts = self.physical_to_logical, self.logical_to_physical, self.logical_count
        if p2l.ndim != 2 or l2p.ndim != 3 or counts.ndim != 2:
            raise PlacementError(f"maps (ndim {p2l.ndim}, {l2p.ndim}, {counts.ndim}) must be "
                                 f"[layers, physical], [layers, logical, replicas], [layers, logical]")
        num_layers, num_physical = p2l.shape
        if counts.shape[0] != num_layers or l2p.shape[:2] != counts.shape:
            raise PlacementError(f"map shapes {list(p2l.shape)}, {list(l2p.shape)}, "
                                 f"{list(counts.shape)} must agree on layers and logical experts")
        if self.num_gpus <= 0 or num_physical % self.num_gpus:
            raise PlacementError(f"num_gpus ({self.num_gpus}) must be > 0 and divide the "
                                 f"physical slots ({num_physical}) so every GPU holds equal slots")
        if self.num_nodes <= 0 or self.num_gpus % self.num_nodes:
            raise PlacementError(f"num_nodes ({self.num_nodes}) must be > 0 and divide "
                                 f"num_gpus ({self.num_gpus})")
        num_logical = counts.shape[1]
        bad = np.argwhere((p2l < 0) | (p2l >= num_logical))
        if len(bad):
            layer, slot = bad[0]
            raise PlacementError(f"physical_to_logical[{layer}, {slot}] ({p2l[layer, slot]}) "
                                 f"must be in [0, {num_logical})")
        missing = np.argwhere(counts < 1)
        if len(missing):
            layer, expert = missing[0]
            raise PlacementError(f"logical_count[{layer}, {expert}] ({counts[layer, expert]}) "
                                 f"must be >= 1; every logical expert needs a replica")
        rows = np.arange(num_layers)[:, None]
        actual = np.zeros_like(counts)
        np.add.at(actual, (np.broadcast_to(rows, p2l.shape), p2l), 1)
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
        layer_idx = np.broadcast_to(np.arange(num_layers)[:, None, None], l2p.shape)
        experts = np.broadcast_to(np.arange(num_logical)[None, :, None], l2p.shape)
        if (p2l[layer_idx[valid], l2p[valid]] != experts[valid]).any():
            raise PlacementError("logical_to_physical must point at slots whose "
                                 "physical_to_logical is that expert")
        seen = np.zeros((num_layers, num_physical), dtype=np.int64)
        np.add.at(seen, (layer_idx[valid], l2p[valid]), 1)
        if (seen != 1).any():
            raise PlacementError("logical_to_physical must list every physical slot exactly once")
        return self
