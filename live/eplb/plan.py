"""Which expert weights a rebalance moves, from where to where: one `ExpertMove` per slot whose
logical expert changes.

The source rule is the simulator's (`epsim.eplb.plan_transfers`), so bytes per rank measured
live and modelled agree: a slot is filled by a local copy when its rank already held the
expert, else from a rank that held it — same node first, then the one that has sent least in
this layer, then the lowest rank. An expert no active rank holds any more (its rank failed) is
reloaded from a weight source, when one is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from live.errors import LiveError

RELOAD = -1  # ExpertMove.src_rank of a slot filled from the weight source (checkpoint / cache)


@dataclass(frozen=True)
class ExpertMove:
    """One slot rewritten.

    Attributes:
        layer: model layer.
        dst_slot: physical slot written (on rank `dst_slot // slots_per_rank`).
        expert: logical expert the slot holds afterwards.
        src_rank: rank whose old slot is read, or RELOAD.
        src_slot: physical slot read in the old placement (-1 for RELOAD).
    """

    layer: int
    dst_slot: int
    expert: int
    src_rank: int
    src_slot: int


@dataclass(frozen=True, eq=False)
class MovePlan:
    """Every move of one rebalance, sorted by (layer, dst_slot): every rank derives the same
    plan from the same two placements, so both ends of each transfer post it in the same order.

    Attributes:
        moves: the moves.
        num_layers, ep_size, slots_per_rank: shape of the placements.
        expert_bytes: bytes of one expert's weights (all its tensors).
    """

    moves: tuple[ExpertMove, ...]
    num_layers: int
    ep_size: int
    slots_per_rank: int
    expert_bytes: float

    def dst_rank(self, move: ExpertMove) -> int:
        return move.dst_slot // self.slots_per_rank

    def for_layers(self, layers: Iterable[int]) -> list[ExpertMove]:
        wanted = set(layers)
        return [m for m in self.moves if m.layer in wanted]

    def is_transfer(self, move: ExpertMove) -> bool:
        """True when the move crosses ranks (a point-to-point transfer)."""
        return move.src_rank not in (RELOAD, self.dst_rank(move))

    # -- tallies ---------------------------------------------------------------------------
    @property
    def changed_slots(self) -> np.ndarray:
        """[layers] int64 slots rewritten."""
        return np.bincount([m.layer for m in self.moves], minlength=self.num_layers).astype(np.int64)

    @property
    def num_local_copies(self) -> int:
        return sum(m.src_rank == self.dst_rank(m) for m in self.moves)

    @property
    def num_reloads(self) -> int:
        return sum(m.src_rank == RELOAD for m in self.moves)

    def bytes_by_pair(self) -> np.ndarray:
        """[ranks, ranks] float64 bytes sent from rank i to rank j over links (i != j)."""
        out = np.zeros((self.ep_size, self.ep_size))
        for move in self.moves:
            if self.is_transfer(move):
                out[move.src_rank, self.dst_rank(move)] += self.expert_bytes
        return out

    def transfers_per_rank(self) -> np.ndarray:
        """[ranks] int64 transfers each rank takes part in (either end), as the cost model counts."""
        out = np.zeros(self.ep_size, dtype=np.int64)
        for move in self.moves:
            if self.is_transfer(move):
                out[move.src_rank] += 1
                out[self.dst_rank(move)] += 1
        return out

    def reload_bytes_per_rank(self) -> np.ndarray:
        """[ranks] float64 bytes each rank reloads from the weight source."""
        out = np.zeros(self.ep_size)
        for move in self.moves:
            if move.src_rank == RELOAD:
                out[self.dst_rank(move)] += self.expert_bytes
        return out

    def summary(self) -> dict:
        """JSON-ready tallies (bytes in bytes, per rank in rank order)."""
        pair = self.bytes_by_pair()
        return {"changed_slots": int(self.changed_slots.sum()),
                "changed_slots_per_layer": self.changed_slots.tolist(),
                "local_copies": self.num_local_copies, "reloads": self.num_reloads,
                "link_bytes": float(pair.sum()),
                "moved_bytes": float(len(self.moves) * self.expert_bytes),
                "send_bytes_per_rank": pair.sum(axis=1).tolist(),
                "recv_bytes_per_rank": pair.sum(axis=0).tolist(),
                "bytes_by_pair": pair.tolist(),
                "transfers_per_rank": self.transfers_per_rank().tolist(),
                "reload_bytes_per_rank": self.reload_bytes_per_rank().tolist(),
                "expert_bytes": self.expert_bytes}


def plan_moves(old_physical_to_logical, new_physical_to_logical, slots_per_rank: int,
               expert_bytes: float, gpus_per_node: int = 8, active_ranks=None,
               allow_reload: bool = False, layers: Iterable[int] | None = None) -> MovePlan:
    """The moves from one slot map to another.

    Args:
        old_physical_to_logical: [layers, physical] int, what each slot holds now; -1 = a slot
            that cannot be read (its content is lost).
        new_physical_to_logical: [layers, physical] int, what each slot must hold.
        slots_per_rank: slots per EP rank (slot s on rank s // slots_per_rank).
        expert_bytes: bytes of one expert (for the tallies).
        gpus_per_node: ranks per node, for the same-node preference.
        active_ranks: [ranks] bool; slots of masked ranks are neither read nor written.
        allow_reload: fill experts no active rank holds from the weight source; else raise.
        layers: plan only these layers (those this model holds); None = all.
    Raises:
        LiveError: shapes that differ, or an expert with no readable copy and no reload.
    """
    old = np.asarray(old_physical_to_logical, dtype=np.int64)
    new = np.asarray(new_physical_to_logical, dtype=np.int64)
    if old.shape != new.shape or old.ndim != 2:
        raise LiveError(f"old and new placements (shapes {list(old.shape)}, {list(new.shape)}) must "
                        f"both be [layers, physical] of the same shape")
    num_layers, num_physical = new.shape
    if slots_per_rank <= 0 or num_physical % slots_per_rank:
        raise LiveError(f"slots_per_rank ({slots_per_rank}) must divide the physical slots "
                        f"({num_physical})")
    ep_size = num_physical // slots_per_rank
    active = np.ones(ep_size, dtype=bool) if active_ranks is None else np.asarray(active_ranks, bool)
    rank_of = np.arange(num_physical) // slots_per_rank
    node_of = np.arange(ep_size) // max(1, min(gpus_per_node, ep_size))
    readable = active[rank_of]                                         # [physical]
    moves: list[ExpertMove] = []
    for layer in range(num_layers) if layers is None else sorted(set(layers)):
        holders: dict[int, dict[int, int]] = {}                        # expert -> {rank: lowest slot}
        for slot in np.nonzero(readable & (old[layer] >= 0))[0][::-1]:
            holders.setdefault(int(old[layer, slot]), {})[int(rank_of[slot])] = int(slot)
        sent = np.zeros(ep_size)
        for slot in np.nonzero(readable & (old[layer] != new[layer]))[0]:
            dst, expert = int(rank_of[slot]), int(new[layer, slot])
            sources = holders.get(expert, {})
            if dst in sources:
                src = dst
            elif sources:
                near = [r for r in sources if node_of[r] == node_of[dst]]
                src = min(near or sources, key=lambda r: (sent[r], r))
                sent[src] += expert_bytes
            elif allow_reload:
                moves.append(ExpertMove(layer, int(slot), expert, RELOAD, -1))
                continue
            else:
                raise LiveError(f"logical expert {expert} of layer {layer} has no readable copy on "
                                f"the active ranks {np.nonzero(active)[0].tolist()}; pass a weight "
                                f"source to reload it")
            moves.append(ExpertMove(layer, int(slot), expert, src, sources[src]))
    return MovePlan(tuple(moves), num_layers, ep_size, slots_per_rank, float(expert_bytes))
