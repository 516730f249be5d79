"""The one transfer rule of a rebalance: which expert weights move, from where to where.

`plan_moves(old, new)` gives one `ExpertMove` per slot whose logical expert changes; the
rebalance-cost model (`epsim.eplb.cost`) tallies its bytes per link and rank, and `live/`'s
weight updater posts exactly these transfers, so modelled and measured bytes agree. The rule:
a slot is filled by a local copy when its rank already held the expert, else from a rank that
held it — same node first, then the one that has sent least in this layer, then the lowest
rank — reading the lowest slot that rank held it in. Slots of failed ranks are neither read nor
written; an expert no alive rank holds any more is reloaded from a weight source when allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import numpy as np

from epsim.errors import PlacementError

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
        layer, dst_slot, expert, src_rank, src_slot: [moves] int64, the `ExpertMove` fields
            as columns (the tallies read these; `moves` builds the objects on first use).
        num_layers, num_ranks, ranks_per_node, slots_per_rank: shape of the placements.
        expert_bytes: bytes of one expert's weights (all its tensors).
    """

    layer: np.ndarray
    dst_slot: np.ndarray
    expert: np.ndarray
    src_rank: np.ndarray
    src_slot: np.ndarray
    num_layers: int
    num_ranks: int
    ranks_per_node: int
    slots_per_rank: int
    expert_bytes: float

    @cached_property
    def moves(self) -> tuple[ExpertMove, ...]:
        """The moves as `ExpertMove`s, in (layer, dst_slot) order."""
        return tuple(ExpertMove(*row) for row in zip(
            self.layer.tolist(), self.dst_slot.tolist(), self.expert.tolist(),
            self.src_rank.tolist(), self.src_slot.tolist()))

    def dst_rank(self, move: ExpertMove) -> int:
        return move.dst_slot // self.slots_per_rank

    def for_layers(self, layers: Iterable[int]) -> list[ExpertMove]:
        wanted = set(layers)
        return [m for m in self.moves if m.layer in wanted]

    # -- columns -------------------------------------------------------------------------------
    @cached_property
    def _columns(self) -> dict[str, np.ndarray]:
        """[moves] int64 arrays: layer, src (rank or RELOAD), dst (rank)."""
        return {"layer": self.layer, "src": self.src_rank, "dst": self.dst_slot // self.slots_per_rank}

    def _transfer(self) -> np.ndarray:
        """[moves] bool, moves that cross ranks (point-to-point transfers)."""
        c = self._columns
        return (c["src"] != RELOAD) & (c["src"] != c["dst"])

    # -- tallies ---------------------------------------------------------------------------
    @property
    def changed_slots(self) -> np.ndarray:
        """[layers] int64 slots rewritten."""
        return np.bincount(self._columns["layer"], minlength=self.num_layers).astype(np.int64)

    @property
    def local_copies(self) -> np.ndarray:
        """[layers] int64 slots filled from the same rank (no link)."""
        c = self._columns
        return np.bincount(c["layer"][c["src"] == c["dst"]], minlength=self.num_layers).astype(np.int64)

    @property
    def num_local_copies(self) -> int:
        return int(self.local_copies.sum())

    @property
    def num_reloads(self) -> int:
        return int((self._columns["src"] == RELOAD).sum())

    @property
    def moved_bytes(self) -> float:
        """Changed slots x expert bytes: what the rebalance rewrites, links or not."""
        return float(self.layer.shape[0]) * self.expert_bytes

    def link_tallies(self) -> dict[str, np.ndarray]:
        """Per layer and rank, what crosses each link kind (the rebalance-cost model's input).

        Returns:
            {"send_nvlink_bytes", "recv_nvlink_bytes", "send_rdma_bytes", "recv_rdma_bytes":
            [layers, ranks] float64; "nvlink_transfers", "rdma_transfers": [layers, ranks]
            int64, transfers a rank takes part in (either end)}. A transfer inside a node is
            NVLink, across nodes RDMA.
        """
        c, shape = self._columns, (self.num_layers, self.num_ranks)
        out = {}
        moving = self._transfer()
        same_node = c["src"] // self.ranks_per_node == c["dst"] // self.ranks_per_node
        size = shape[0] * shape[1]
        for link, on_link in (("nvlink", moving & same_node), ("rdma", moving & ~same_node)):
            row = c["layer"][on_link] * self.num_ranks
            src, dst = row + c["src"][on_link], row + c["dst"][on_link]     # flat (layer, rank)
            # bincount adds its weights in order from 0, as np.add.at does: the same sums
            each = np.full(src.shape[0], float(self.expert_bytes))
            send = np.bincount(src, weights=each, minlength=size).reshape(shape)
            recv = np.bincount(dst, weights=each, minlength=size).reshape(shape)
            count = (np.bincount(src, minlength=size)
                     + np.bincount(dst, minlength=size)).astype(np.int64).reshape(shape)
            out.update({f"send_{link}_bytes": send, f"recv_{link}_bytes": recv,
                        f"{link}_transfers": count})
        return out

    def bytes_by_pair(self) -> np.ndarray:
        """[ranks, ranks] float64 bytes sent from rank i to rank j over links (i != j)."""
        c, moving = self._columns, self._transfer()
        pair = c["src"][moving] * self.num_ranks + c["dst"][moving]
        return np.bincount(pair, weights=np.full(pair.shape[0], float(self.expert_bytes)),
                           minlength=self.num_ranks ** 2).reshape(self.num_ranks, self.num_ranks)

    def transfers_per_rank(self) -> np.ndarray:
        """[ranks] int64 transfers each rank takes part in (either end), as the cost model counts."""
        c, moving = self._columns, self._transfer()
        return (np.bincount(c["src"][moving], minlength=self.num_ranks)
                + np.bincount(c["dst"][moving], minlength=self.num_ranks)).astype(np.int64)

    def reload_bytes_per_rank(self) -> np.ndarray:
        """[ranks] float64 bytes each rank reloads from the weight source."""
        c = self._columns
        reload = c["src"] == RELOAD
        return np.bincount(c["dst"][reload], minlength=self.num_ranks) * self.expert_bytes

    def summary(self) -> dict:
        """JSON-ready tallies (bytes in bytes, per rank in rank order)."""
        pair = self.bytes_by_pair()
        return {"changed_slots": int(self.changed_slots.sum()),
                "changed_slots_per_layer": self.changed_slots.tolist(),
                "local_copies": self.num_local_copies, "reloads": self.num_reloads,
                "link_bytes": float(pair.sum()),
                "moved_bytes": self.moved_bytes,
                "send_bytes_per_rank": pair.sum(axis=1).tolist(),
                "recv_bytes_per_rank": pair.sum(axis=0).tolist(),
                "bytes_by_pair": pair.tolist(),
                "transfers_per_rank": self.transfers_per_rank().tolist(),
                "reload_bytes_per_rank": self.reload_bytes_per_rank().tolist(),
                "expert_bytes": self.expert_bytes}


def plan_moves(old, new, alive: np.ndarray | None = None, allow_reload: bool = False, *,
               expert_bytes: float = 1.0, layers: Iterable[int] | None = None) -> MovePlan:
    """The moves that turn placement `old` into `new` (module docstring for the rule).

    Args:
        old, new: `epsim.eplb.Placement`s of the same shape and topology.
        alive: [ranks] bool, ranks that can send and receive; default: alive in both.
        allow_reload: fill experts no alive rank holds from the weight source; else raise.
        expert_bytes: bytes of one expert (for the tallies), > 0.
        layers: plan only these layers (e.g. those a pipeline stage holds); None = all.
    Raises:
        PlacementError: placements of different shape or topology, expert_bytes <= 0, or an
            expert with no readable copy and no reload.
    """
    if not expert_bytes > 0:
        raise PlacementError(f"expert_bytes ({expert_bytes}) must be > 0")
    if (old.physical_to_logical.shape != new.physical_to_logical.shape
            or old.num_ranks != new.num_ranks or old.num_nodes != new.num_nodes):
        raise PlacementError(
            f"old and new placements (shape {list(old.physical_to_logical.shape)} on "
            f"{old.num_ranks} ranks/{old.num_nodes} nodes vs {list(new.physical_to_logical.shape)} "
            f"on {new.num_ranks}/{new.num_nodes}) must have the same shape and topology")
    if alive is None:
        alive = old.alive_mask & new.alive_mask
    alive = np.asarray(alive, dtype=bool)
    if alive.shape != (new.num_ranks,):
        raise PlacementError(f"alive (shape {list(alive.shape)}) must be [ranks] = [{new.num_ranks}]")
    rank_of, node_of = new.rank_of_slot(), new.node_of_rank()
    layer_ids = (np.arange(new.num_layers) if layers is None
                 else np.array(sorted(set(int(x) for x in layers)), dtype=np.int64))
    old_p2l = old.physical_to_logical[layer_ids]                          # [layers, physical]
    new_p2l = new.physical_to_logical[layer_ids]
    num_ranks, num_layers = new.num_ranks, layer_ids.shape[0]
    num_experts = int(max(old.num_logical, new.num_logical))
    readable = alive[rank_of]                                              # [physical]
    # which ranks hold each (layer, expert) among readable slots, as a bool table (a quarter of
    # the pages an int table of slots takes: on this path every page first touched costs)
    slots = np.flatnonzero(readable)
    key = ((np.arange(num_layers)[:, None] * num_experts + old_p2l[:, slots]) * num_ranks
           + rank_of[slots]).ravel()                                        # [layers * readable]
    held = np.zeros(num_layers * num_experts * num_ranks, dtype=bool)
    held[key] = True
    held = held.reshape(num_layers, num_experts, num_ranks)               # [layers, experts, ranks]
    # the slots that change, in (layer, slot) order
    row, slot = np.nonzero(readable & (old_p2l != new_p2l))
    dst, expert = rank_of[slot], new_p2l[row, slot]
    # each move's holders as bits (bit r % 64 of word r // 64: rank r), so the per-move tests
    # below are word operations instead of passes over [moves, ranks]
    bits = _as_words(held)[row, expert]                                    # [moves, words]
    has_copy = bits.any(axis=1)
    local = ((bits[np.arange(row.shape[0]), dst // 64] >> (dst % 64).astype(np.uint64))
             & np.uint64(1)).astype(bool)
    if not allow_reload and not has_copy.all():
        i = int(np.argmin(has_copy))
        raise PlacementError(f"logical expert {int(expert[i])} of layer {int(layer_ids[row[i]])} has "
                             f"no readable copy on the alive ranks {np.flatnonzero(alive).tolist()}; "
                             "pass a weight source to reload it")
    # the greedy choice of a sender depends on what each rank has sent before in its layer
    src = np.where(local, dst, RELOAD).astype(np.int64)
    pick = np.flatnonzero(~local & has_copy)
    if pick.shape[0]:
        lay_of = row[pick]                                                   # ascending
        k_of = np.arange(pick.shape[0]) - np.searchsorted(lay_of, lay_of)   # k-th in its layer
        # who may send does not depend on what was sent: every move's candidates at once; a
        # move with one candidate sends from it whatever was sent before; only the others
        # (most moves have one holder) walk the layers in lockstep, the j-th of every layer at
        # once, counting what the single ones sent earlier in the layer by a sorted key
        hold = bits[pick]                                                    # [moves, words]
        in_node = _as_words(node_of[None, :] == np.arange(new.num_nodes)[:, None])  # [nodes, words]
        near = hold & in_node[node_of[dst[pick]]]
        word = np.where(near.any(axis=1)[:, None], near, hold)
        # one candidate: one word nonzero, holding one bit (x & (x - 1) clears the lowest)
        only = ((word != 0).sum(axis=1) == 1) & ((word & (word - np.uint64(1))) == 0).all(axis=1)
        single = word[only]
        in_word = single.argmax(axis=1)                                      # its nonzero word
        top = np.frexp(single[np.arange(single.shape[0]), in_word].astype(np.float64))[1] - 1
        src[pick[only]] = in_word * 64 + top                                 # the bit's rank
        multi = np.flatnonzero(~only)
        if multi.shape[0]:
            candidate_multi = np.unpackbits(word[multi].astype("<u8").view(np.uint8), axis=1,
                                            bitorder="little")[:, :num_ranks].astype(bool)
            width = int(k_of.max()) + 1
            single_key = np.sort((lay_of[only] * num_ranks + src[pick[only]]) * width + k_of[only])
            lay_m = lay_of[multi]
            # least sent first, then the lowest rank: score sent * ranks + rank, below
            # pick * ranks for a rank that can send (it sent fewer than the layer's moves);
            # one that cannot scores `never`, above any that can, so only the candidates'
            # earlier single sends are counted
            never = num_ranks * (pick.shape[0] + 1)
            at, rank = np.nonzero(candidate_multi)                          # [candidates]
            key0 = (lay_m[at] * num_ranks + rank) * width
            sent_before = (np.searchsorted(single_key, key0 + k_of[multi][at])
                           - np.searchsorted(single_key, key0))
            score0 = np.full(candidate_multi.shape, never, dtype=np.int64)  # [multi, ranks]
            score0[at, rank] = sent_before * num_ranks + rank
            j_of = np.arange(multi.shape[0]) - np.searchsorted(lay_m, lay_m)
            order = np.argsort(j_of, kind="stable")                         # by j, then layer
            bounds = np.flatnonzero(np.diff(j_of[order])) + 1
            sent = np.zeros((num_layers, num_ranks), dtype=np.int64)        # by multi moves
            for start, stop in zip([0, *bounds.tolist()], [*bounds.tolist(), order.shape[0]]):
                group = order[start:stop]
                lay = lay_m[group]
                chosen = (sent[lay] * num_ranks + score0[group]).argmin(axis=1)
                src[pick[multi[group]]] = chosen
                sent[lay, chosen] += 1
    # the sender's lowest old slot holding the expert (slots ascend within a rank)
    spr = new.slots_per_rank
    sender = np.maximum(src, 0)
    match = old_p2l.reshape(num_layers, num_ranks, spr)[row, sender] == expert[:, None]
    src_slot = np.where(src == RELOAD, -1, sender * spr + match.argmax(axis=1))
    return MovePlan(layer_ids[row].astype(np.int64), slot.astype(np.int64), expert.astype(np.int64),
                    src, src_slot.astype(np.int64), new.num_layers, new.num_ranks,
                    new.ranks_per_node, new.slots_per_rank, float(expert_bytes))


def _as_words(mask: np.ndarray) -> np.ndarray:
    """[..., n] bool -> [..., ceil(n / 64)] uint64, bit i % 64 of word i // 64 set where
    `mask[..., i]`."""
    packed = np.packbits(mask, axis=-1, bitorder="little")                 # [..., ceil(n / 8)]
    words = np.zeros(mask.shape[:-1] + (-(-packed.shape[-1] // 8) * 8,), dtype=np.uint8)
    words[..., :packed.shape[-1]] = packed
    return words.view("<u8")
