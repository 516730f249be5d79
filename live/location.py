"""ExpertLocation: where experts live, as one rank's block dispatches it.

Where experts live, which ranks serve, the static replica each source rank sends to and the
moves of a rebalance are `epsim.eplb`'s (`Placement`, `plan_moves`): one owner for the simulator
and `live/`. This module only turns a placement into the device tensors a block reads (names
follow SGLang's `ExpertLocationMetadata`: `physical_to_logical_map`,
`logical_to_all_physical_map`, `logical_to_rank_dispatch_physical_map`), and reads the placement
forms a user may pass (`as_placement`), with `LiveError`s that name the problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import torch

from epsim.eplb import Placement
from epsim.errors import EpsimError
from live.errors import LiveError


@dataclass(frozen=True, eq=False)
class ExpertLocation:
    """An `epsim.eplb.Placement` and the tensors one layer's block on one rank dispatches with.

    Attributes:
        placement: the placement (all layers, all ranks, with its alive mask).
        layer, rank: the block's model layer and EP rank.
        local_logical: [slots_per_rank] int64, the logical expert of each of this rank's slots.
        slot_of_expert: [experts] int64 tensor, the `static` replica this rank sends each logical
            expert's tokens to (`Placement.static_dispatch_map`, alive replicas only).
        replicas: [experts, max alive replicas] int64 tensor, -1 padded; `random` draws here.
        replica_count: [experts] int64 tensor, alive replicas of each expert.
    """

    placement: Placement
    layer: int
    rank: int
    local_logical: np.ndarray
    slot_of_expert: torch.Tensor
    replicas: torch.Tensor
    replica_count: torch.Tensor

    @classmethod
    def build(cls, placement: Placement, layer: int, rank: int,
              device: torch.device | str = "cpu") -> "ExpertLocation":
        """The tensors of `layer` on `rank`.

        Raises:
            LiveError: an expert with no replica on an alive rank (re-place it first:
                `live.eplb.elastic`).
        """
        try:
            static = placement.static_dispatch_map()[rank, layer]                  # [experts]
        except EpsimError as exc:
            raise LiveError(f"{exc} (re-place it onto the alive ranks first: "
                            f"live.eplb.elastic.mask_ranks)") from None
        return cls(placement, layer, rank, placement.local_slots(rank)[layer].copy(),
                   torch.tensor(np.array(static), dtype=torch.int64, device=device),
                   torch.tensor(np.array(placement.live_logical_to_physical()[layer]), device=device),
                   torch.tensor(np.array(placement.live_counts()[layer]), device=device))


def as_placement(placement, num_layers: int, num_experts: int, num_ranks: int,
                 num_nodes: int = 1, alive=None) -> Placement:
    """A placement of a model over `num_ranks` EP ranks, from any form a user may pass.

    Args:
        placement: None (expert e in slot e, no redundancy), an `epsim.eplb.Placement` (its own
            nodes and mask kept), a `[layers, physical]` slot map or a per-rank mapping
            `{rank: [layers][slots]}` (`rank_slots_to_physical`).
        num_nodes: nodes of the ranks, for forms that carry none.
        alive: [ranks] bool, the mask for forms that carry none (None: all ranks serve).
    Raises:
        LiveError: shapes, ids, rank counts or masks that do not fit the model (named).
    """
    if placement is None:
        placement = np.tile(np.arange(num_experts), (num_layers, 1))
    if isinstance(placement, Mapping):
        placement = rank_slots_to_physical(placement, num_layers, num_ranks)
    if isinstance(placement, Placement):
        if placement.num_ranks != num_ranks:
            raise LiveError(f"placement.num_ranks ({placement.num_ranks}) must equal the EP ranks "
                            f"({num_ranks})")
        out = placement
    else:
        p2l = np.asarray(placement)
        if p2l.ndim != 2 or p2l.shape[1] == 0:
            raise LiveError(f"physical_to_logical (shape {list(p2l.shape)}) must be a "
                            f"[layers, physical] matrix")
        if not np.issubdtype(p2l.dtype, np.integer):
            raise LiveError(f"physical_to_logical (dtype {p2l.dtype}) must hold integer expert ids")
        if p2l.shape[1] % num_ranks:
            raise LiveError(f"physical experts ({p2l.shape[1]} = {num_experts} logical + "
                            f"{p2l.shape[1] - num_experts} redundant) must be divisible by the EP "
                            f"ranks ({num_ranks}) so every rank holds equal slots")
        try:
            out = Placement.from_physical_to_logical(p2l, num_experts, num_ranks, num_nodes,
                                                     alive=alive).validate()
        except EpsimError as exc:
            raise LiveError(str(exc)) from None
    if out.num_layers != num_layers:
        raise LiveError(f"physical_to_logical has {out.num_layers} rows; it must have one per "
                        f"model layer (num_layers={num_layers})")
    if out.num_logical != num_experts:
        raise LiveError(f"placement (experts={out.num_logical}) must match the model "
                        f"(experts={num_experts})")
    return out


def check_ranks(ranks, num_ranks: int, name: str = "rank") -> list[int]:
    """Validate rank ids: integers in [0, num_ranks), no repeats.

    Raises:
        LiveError: `rank (5) must be in [0, 4)`.
    """
    out = []
    for rank in ranks:
        if not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_ranks:
            raise LiveError(f"{name} ({rank!r}) must be in [0, {num_ranks})")
        if int(rank) in out:
            raise LiveError(f"{name} ({rank}) must appear once")
        out.append(int(rank))
    return out


def rank_slots_to_physical(rank_slots: Mapping, num_layers: int, num_ranks: int) -> np.ndarray:
    """A placement given per rank -> [layers, physical].

    Args:
        rank_slots: {rank: [layers][slots] logical ids}, the experts each rank holds in each
            layer, in slot order.
    Raises:
        LiveError: a rank out of range or missing, a rank with the wrong number of layers, or
            ranks holding unequal numbers of slots.
    """
    items = dict(rank_slots)
    check_ranks(list(items), num_ranks)
    missing = sorted(set(range(num_ranks)) - set(items))
    if missing:
        raise LiveError(f"rank {missing[0]} (missing) must be in the placement; every one of the "
                        f"{num_ranks} EP ranks holds slots")
    rows = []
    for layer in range(num_layers):
        row, width = [], None
        for rank in range(num_ranks):
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
