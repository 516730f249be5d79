"""PlacementState: the expert placement (with its alive mask) the step loop reads each step.

The engine starts it from the static contiguous placement (redundant slots, if any, repeat
experts 0, 1, ... as SGLang's trivial placement does). Extension processes (EPLB, elastic EP)
change it between steps: `update` installs a new `epsim.eplb.Placement`, whole or only some
layers (a chunk of a rebalance); `set_alive` masks a failed rank, optionally installing the
placement the survivors serve at the same time. Each change bumps `version`; the traffic
tables are built (and the placement checked) when the change is made.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.tables import PlacementTables, build_tables
from epsim.eplb.placement import Placement


class PlacementState:
    """The current `Placement` `[layers, physical]` over `[ranks]` of one EP instance, and its
    traffic tables under the deployment's replica selection."""

    def __init__(self, placement: Placement, dispatch_algorithm: str = "static"):
        self.dispatch_algorithm = dispatch_algorithm
        self.version = 1                    # the first placement installed
        self._tables = build_tables(placement, dispatch_algorithm)

    @property
    def placement(self) -> Placement:
        """The current placement (all ranks, failed ones included, with the alive mask)."""
        return self._tables.placement

    @property
    def tables(self) -> PlacementTables:
        """Traffic lookup tables of the current placement."""
        return self._tables

    @property
    def physical_to_logical(self) -> np.ndarray:
        """[layers, physical] int64 (read-only)."""
        return self.placement.physical_to_logical

    @property
    def alive(self) -> np.ndarray:
        """[ranks] bool, ranks that serve."""
        return self.placement.alive_mask

    @property
    def all_alive(self) -> bool:
        return self.placement.all_alive

    @property
    def num_alive(self) -> int:
        return self.placement.num_alive

    def update(self, placement: Placement | np.ndarray, layers=None,
               tables: PlacementTables | None = None) -> None:
        """Install a new placement (checked now, so a bad one fails where it is made).

        Args:
            placement: the new placement (its alive mask is replaced by the current one), or
                its [layers, physical] slot map over the same ranks (a hand-made placement).
            layers: install only these rows (indices or a slice); the rest stay. Static
                dispatch rows already computed are kept, so moving a rebalance chunk by chunk
                stays cheap.
            tables: `build_tables` of the whole new placement under the current alive mask,
                when the caller has them already (not checked against `placement`).
        """
        if tables is not None and layers is None:
            self._tables = tables
        else:
            placement = self._as_placement(placement).with_alive(self.placement.alive)
            if layers is not None:
                placement = self.placement.with_rows(placement, layers)
            self._tables = build_tables(placement, self.dispatch_algorithm)
        self.version += 1

    def set_alive(self, rank: int, alive: bool, placement: Placement | np.ndarray | None = None) -> None:
        """Mark a rank failed (False) or recovered (True); a dead rank takes no tokens.

        Args:
            placement: install this placement (or slot map) in the same change (e.g. the
                survivors' slots once the failed rank's only replicas are re-placed), checked
                with the new mask.
        Raises:
            ValueError: a rank out of range.
            PlacementError: a logical expert left without a slot on a live rank.
        """
        current = self.placement
        if not 0 <= rank < current.num_ranks:
            raise ValueError(f"rank ({rank}) must be in [0, {current.num_ranks})")
        mask = current.alive_mask
        mask[rank] = alive
        new = current if placement is None else self._as_placement(placement)
        self._tables = build_tables(new.with_alive(mask), self.dispatch_algorithm)
        self.version += 1

    def _as_placement(self, placement: Placement | np.ndarray) -> Placement:
        """A Placement, or a [layers, physical] slot map on the current ranks and nodes."""
        if isinstance(placement, Placement):
            return placement
        return self.placement.with_physical_to_logical(np.asarray(placement))
