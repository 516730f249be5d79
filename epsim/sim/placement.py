"""PlacementState: the expert placement and live ranks the step loop reads each step.

The engine starts it from the static contiguous placement (redundant slots, if any, repeat
experts 0, 1, ... as SGLang's trivial placement does). Extension processes (EPLB, elastic EP)
change it between steps: `update` installs a new `physical_to_logical` (an array or anything
with a `.physical_to_logical` attribute, such as `epsim.eplb.Placement`), whole or only some
layers (a chunk of a rebalance); `set_alive` masks a failed rank, optionally installing the
placement the survivors serve at the same time. Each change bumps `version`; the traffic
tables are validated when the change is made.
"""

from __future__ import annotations

import numpy as np

from epsim.cost.tables import PlacementTables, build_tables
from epsim.eplb.placement import Placement


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
    def placement(self) -> Placement:
        """The current placement as an `epsim.eplb.Placement` (all ranks, dead ones included)."""
        return self.tables.placement

    @property
    def tables(self) -> PlacementTables:
        """Traffic lookup tables of the current placement and alive mask."""
        if self._tables is None:
            self._tables = self._build(self._p2l)
        return self._tables

    @property
    def all_alive(self) -> bool:
        return bool(self.alive.all())

    @property
    def num_alive(self) -> int:
        return int(self.alive.sum())

    def _build(self, p2l: np.ndarray, per_source: bool | None = None) -> PlacementTables:
        return build_tables(p2l, self.num_experts, self.num_ranks, self.gpus_per_node,
                            self.dispatch_algorithm, per_source=per_source,
                            alive=None if self.all_alive else self.alive)

    def update(self, placement, layers=None, tables: PlacementTables | None = None) -> None:
        """Install a new placement (validated now, so a bad one fails where it is made).

        Args:
            placement: [layers, physical] ints or an object with `.physical_to_logical`.
            layers: install only these rows (indices or a slice); the rest stay. Tables of the
                other layers are kept, so moving a rebalance chunk by chunk stays cheap.
            tables: `build_tables` of the whole new placement under the current alive mask,
                when the caller has them already (not checked against `placement`).
        """
        if tables is not None and layers is None:
            self._p2l, self._tables = tables.physical_to_logical, tables
            self.version += 1
            return
        p2l = np.array(getattr(placement, "physical_to_logical", placement), dtype=np.int64)
        old = self._tables
        if layers is not None:
            rows = np.arange(self._p2l.shape[0])[layers]
            mixed = self._p2l.copy()
            mixed[rows] = p2l[rows]
            p2l = mixed
        p2l.setflags(write=False)
        self._tables = None if layers is None or old is None else self._splice(old, p2l, rows)
        self._p2l = p2l
        self.tables  # noqa: B018 - validate eagerly
        self.version += 1

    def _splice(self, old: PlacementTables, p2l: np.ndarray, rows: np.ndarray) -> PlacementTables | None:
        """Tables of `p2l` from `old` with only `rows` rebuilt (None: rebuild everything)."""
        full = Placement.from_physical_to_logical(p2l, self.num_experts, self.num_ranks,
                                                  old.num_nodes)
        replicated = bool((full.logical_count > 1).any())
        per_source = self.dispatch_algorithm == "static" and replicated
        if per_source != (old.source_slot is not None):
            return None
        part = self._build(p2l[rows], per_source=False)                  # validates the rows
        share = old.slot_share.copy()
        share[rows] = part.slot_share
        source = None
        if per_source:       # the spread rule uses the true layer ids, so not `part`'s map
            source = old.source_slot.copy()
            source[:, rows] = full.static_dispatch_map(part.alive, layers=rows)
        identity = self.all_alive and not replicated and bool(
            (p2l == np.arange(p2l.shape[1])[None, :]).all())
        return PlacementTables(full, self.dispatch_algorithm, share, identity, source, part.alive)

    def set_alive(self, rank: int, alive: bool, placement=None) -> None:
        """Mark a rank failed (False) or recovered (True); a dead rank takes no tokens.

        Args:
            placement: install this placement in the same change (e.g. the survivors' slots
                once the failed rank's only replicas are re-placed), validated with the new mask.
        Raises:
            ValueError: a rank out of range.
            SpecError: a logical expert left without a slot on a live rank.
        """
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"rank ({rank}) must be in [0, {self.num_ranks})")
        previous = self.alive.copy()
        self.alive[rank] = alive
        p2l = self._p2l if placement is None else np.array(
            getattr(placement, "physical_to_logical", placement), dtype=np.int64)
        try:
            tables = self._build(p2l)
        except Exception:
            self.alive = previous
            raise
        p2l.setflags(write=False)
        self._p2l, self._tables = p2l, tables
        self.version += 1
