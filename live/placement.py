"""ExpertPlacement: `epsim.eplb.Placement` as a live rank uses it, plus the replica choice.

Slot `s` of a layer lives on EP rank `s // slots_per_rank` (the convention of `epsim.eplb`).
Redundant experts are logical experts with several slots; a token's (logical) choice is
mapped to one physical slot by the per-source-rank static map of `epsim.cost.build_tables`,
so the live block and the simulator route replicas identically.
"""

from __future__ import annotations

import numpy as np

from epsim.errors import EpsimError
from live.errors import LiveError

GPUS_PER_NODE = 8


class ExpertPlacement:
    """A placement of `num_physical` slots over `ep_size` ranks for every layer of a model.

    Args:
        physical_to_logical: [layers, physical] int, logical expert held by each slot; one row
            per model layer (layer id = row index).
        num_experts: logical experts per layer.
        ep_size: EP ranks; each holds `physical // ep_size` consecutive slots.
        gpus_per_node: ranks per node, for the static choice's same-node preference.
    Attributes:
        placement: the `epsim.eplb.Placement` (maps validated by epsim).
        logical_to_physical: [layers, experts, max_replicas] int64, -1 padded.
        logical_count: [layers, experts] int64 replicas.
    Raises:
        LiveError: a shape, id or divisibility that does not fit (the message names it).
    """

    def __init__(self, physical_to_logical, num_experts: int, ep_size: int,
                 gpus_per_node: int = GPUS_PER_NODE):
        from epsim.eplb import Placement

        p2l = np.asarray(physical_to_logical)
        if ep_size <= 0:
            raise LiveError(f"ep_size ({ep_size}) must be >= 1")
        if p2l.ndim != 2 or p2l.shape[1] == 0:
            raise LiveError(f"physical_to_logical (shape {list(p2l.shape)}) must be a "
                            f"[layers, physical] matrix")
        if not np.issubdtype(p2l.dtype, np.integer):
            raise LiveError(f"physical_to_logical (dtype {p2l.dtype}) must hold integer expert ids")
        num_physical = p2l.shape[1]
        if num_physical % ep_size:
            raise LiveError(f"physical experts ({num_physical} = {num_experts} logical + "
                            f"{num_physical - num_experts} redundant) must be divisible by ep_size "
                            f"({ep_size}) so every rank holds equal slots")
        self.ep_size, self.num_experts = ep_size, num_experts
        self.gpus_per_node = min(gpus_per_node, ep_size)
        try:
            self.placement = Placement.from_physical_to_logical(
                p2l, num_experts, ep_size, max(1, ep_size // self.gpus_per_node)).validate()
        except EpsimError as exc:
            raise LiveError(str(exc)) from None
        self.physical_to_logical = self.placement.physical_to_logical
        self.logical_to_physical = self.placement.logical_to_physical
        self.logical_count = self.placement.logical_count
        self._dispatch_map: np.ndarray | None = None

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def identity(cls, num_layers: int, num_experts: int, ep_size: int) -> "ExpertPlacement":
        """Slot e holds expert e in every layer (no redundancy)."""
        return cls(np.tile(np.arange(num_experts), (num_layers, 1)), num_experts, ep_size)

    @classmethod
    def from_any(cls, placement, num_layers: int, num_experts: int,
                 ep_size: int) -> "ExpertPlacement":
        """From None (identity), an ExpertPlacement, an `epsim.eplb.Placement` or an array.

        Raises:
            LiveError: the placement's layers, experts or GPU count do not match the model.
        """
        if placement is None:
            return cls.identity(num_layers, num_experts, ep_size)
        if isinstance(placement, ExpertPlacement):
            out = placement
        else:
            num_gpus = getattr(placement, "num_gpus", None)
            if num_gpus is not None and num_gpus != ep_size:
                raise LiveError(f"placement.num_gpus ({num_gpus}) must equal ep_size ({ep_size})")
            p2l = getattr(placement, "physical_to_logical", placement)
            out = cls(np.asarray(p2l), num_experts, ep_size)
        if out.num_layers != num_layers:
            raise LiveError(f"physical_to_logical has {out.num_layers} rows; it must have one per "
                            f"model layer (num_layers={num_layers})")
        if out.num_experts != num_experts or out.ep_size != ep_size:
            raise LiveError(f"placement (experts={out.num_experts}, ep_size={out.ep_size}) must "
                            f"match the model (experts={num_experts}, ep_size={ep_size})")
        return out

    # -- sizes -----------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.placement.num_layers

    @property
    def num_physical(self) -> int:
        return self.placement.num_physical

    @property
    def slots_per_rank(self) -> int:
        return self.placement.slots_per_gpu

    def local_logical(self, rank: int) -> np.ndarray:
        """[layers, slots_per_rank] int64, logical expert of each slot rank `rank` holds."""
        begin = rank * self.slots_per_rank
        return self.physical_to_logical[:, begin:begin + self.slots_per_rank]

    # -- replica choice --------------------------------------------------------------------
    def dispatch_map(self) -> np.ndarray:
        """The `static` replica choice: [layers, ranks, experts] int64 physical slot per source rank.

        SGLang's static dispatch as the simulator models it (`epsim.cost.build_tables`):
        a replica on the source rank itself, else one on its node (spread by the source's
        index within the node), else one spread by source index.
        """
        if self._dispatch_map is None:
            from epsim.cost import build_tables

            tables = build_tables(self.physical_to_logical, self.num_experts, self.ep_size,
                                  self.gpus_per_node, "static", per_source=True)
            self._dispatch_map = np.ascontiguousarray(tables.source_slot.transpose(1, 0, 2))
            self._dispatch_map.setflags(write=False)
        return self._dispatch_map
