"""PlacementState: the expert placement and live ranks the step loop reads each step.

The engine starts it from the static contiguous placement (no redundancy). Extension
processes (EPLB, elastic EP) change it between steps: `update` installs a new
`physical_to_logical` (an array or anything with a `.physical_to_logical` attribute, such as
`epsim.eplb.Placement`), `set_alive` masks a failed rank. Each change bumps `version`; the
traffic tables are rebuilt lazily on the next read.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.tables import PlacementTables, build_tables


class PlacementState:
    """Current placement `[layers, physical]` and alive mask `[ranks]` of one EP instance."""

    def __init__(self, physical_to_logical, num_experts: int, num_ranks: int, gpus_per_node: int,
                 dispatch_algorithm: str = "static"):
        self.num_experts, self.num_ranks = num_experts, num_ranks
        self.gpus_per_node, self.dispatch_algorithm = gpus_per_node, dispatch_algorithm
        self.alive = np.ones(num_ranks, dtype=bool)
        self.version = 0
        self._tables: PlacementTables | None = None
        self.update(physical_to_logical)

    @property
    def physical_to_logical(self) -> np.ndarray:
        """[layers, physical] int64 (read-only view)."""
        return self._p2l

    @property
    def tables(self) -> PlacementTables:
        """Traffic lookup tables of the current placement (validated when built)."""
        if self._tables is None:
            self._tables = build_tables(self._p2l, self.num_experts, self.num_ranks,
                                        self.gpus_per_node, self.dispatch_algorithm)
        return self._tables

    @property
    def all_alive(self) -> bool:
        return bool(self.alive.all())

    def update(self, placement) -> None:
        """Install a new placement (validated now, so a bad one fails where it is made)."""
        p2l = np.array(getattr(placement, "physical_to_logical", placement), dtype=np.int64)
        p2l.setflags(write=False)
        self._p2l = p2l
        self._tables = None
        self.tables  # noqa: B018 - validate eagerly
        self.version += 1

    def set_alive(self, rank: int, alive: bool) -> None:
        """Mark a rank failed (False) or recovered (True); a dead rank takes no tokens."""
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"rank ({rank}) must be in [0, {self.num_ranks})")
        self.alive[rank] = alive
        self.version += 1
