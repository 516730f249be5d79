"""Move expert weights between EP ranks so the model serves a new placement.

Layer chunk by layer chunk (`layers_per_chunk`, SGLang's `eplb_rebalance_layers_per_chunk`),
every rank: (1) prepares — takes its own copy of weights still shared with a weight cache and
checks the weight source — and votes; (2) stages the chunk's new slot contents in ONE spare
buffer: point-to-point transfers (`torch.distributed.batch_isend_irecv`, NVLink on GPUs), local
copies and reloads from the weight source, all reading the old slots; and votes again; (3)
commits: copies the spare buffer into the slots and points the chunk's blocks at the new
placement. Each layer is therefore always consistent (weights and dispatch maps together); if a
vote fails, the chunks already committed are moved back the same way and the old placement
serves. Weights are read and written through `model.routed_experts_weights_of_layer`.
"""

from __future__ import annotations

import hashlib
import time
from typing import Callable, Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist

from epsim.eplb import RELOAD, ExpertMove, MovePlan, Placement, plan_moves
from epsim.errors import EpsimError
from live.eplb.control import Control, control_for
from live.eplb.result import RebalanceResult
from live.errors import LiveError
from live.location import as_placement
from live.weights import fused_names

FAULT_STAGES = ("prepare", "staged")
FaultHook = Callable[[int, str], None]


class RebalanceAborted(LiveError):
    """A rank failed during a rebalance; the committed chunks were moved back and the old
    placement serves."""


class ExpertWeightUpdater:
    """Applies new placements to one rank's model (every rank of the group calls `apply`).

    Args:
        model: a `live.model.Qwen3MoeModel`.
        layers_per_chunk: layers moved together (their transfers in flight at once).
        weight_source: fused weights by `live.weights.fused_names` (a weight cache, host or
            device) to reload experts no active rank holds; None = never reload.
        control_group: group of the votes (default: the EP group); the survivors when a rank
            is masked.
        fault: test hook called as `fault(chunk, stage)` at each FAULT_STAGES point; an
            exception there aborts the rebalance on every rank.
    """

    def __init__(self, model, layers_per_chunk: int = 1,
                 weight_source: Mapping[str, torch.Tensor] | None = None, control_group=None,
                 fault: FaultHook | None = None):
        if not isinstance(layers_per_chunk, int) or layers_per_chunk <= 0:
            raise LiveError(f"layers_per_chunk ({layers_per_chunk!r}) must be a positive integer")
        self.model = model
        self.layers_per_chunk = layers_per_chunk
        self.weight_source = (None if weight_source is None else
                              {name.removeprefix("model."): t for name, t in weight_source.items()})
        self.control_group = control_group
        self.fault = fault
        self._spare: torch.Tensor | None = None          # [entries, expert bytes] uint8
        self._served_us = 0.0

    @property
    def control(self) -> Control:
        """The control plane now (the model may have been masked or moved to a new group)."""
        return control_for(self.model, self.control_group)

    # -- public ----------------------------------------------------------------------------
    def check(self, placement) -> Placement:
        """The new placement as the model must serve it, validated (no weights touched).

        Args:
            placement: any form `live.location.as_placement` reads; forms without a mask take
                the model's.
        Raises:
            LiveError: a dropped logical expert, unequal slots per rank, a rank out of range, a
                rank count, slot count or mask that does not match the model.
        """
        old = self.model.placement
        cfg = self.model.config
        try:
            new = as_placement(placement, cfg.num_layers, cfg.num_experts, old.num_ranks,
                               old.num_nodes, old.alive)
        except LiveError as exc:
            raise LiveError(f"new placement: {exc}") from None
        if new.num_physical != old.num_physical:
            raise LiveError(f"new placement has {new.num_physical} physical slots "
                            f"({new.slots_per_rank} per rank); the model holds "
                            f"{old.slots_per_rank} per rank ({old.num_physical} in all)")
        if not np.array_equal(new.alive_mask, old.alive_mask):
            raise LiveError(f"new placement's alive ranks ({new.alive_mask.astype(int).tolist()}) "
                            f"must be the model's ({old.alive_mask.astype(int).tolist()}); "
                            f"masking is live.eplb.elastic's job")
        return new

    def apply(self, placement, between_chunks: Callable[[int], None] | None = None,
              allow_reload: bool | None = None) -> RebalanceResult:
        """Move weights so the model serves `placement`; every rank calls it with the same one.

        Args:
            placement: any form `check` takes.
            between_chunks: called after each committed chunk (spread mode: serve a step between
                chunks; every layer is consistent at that point).
            allow_reload: fill experts no active rank holds from the weight source (default:
                when one was given).
        Raises:
            LiveError: bad input (before any collective or move); RebalanceAborted: a rank failed,
                the old placement serves again.
        """
        start = time.perf_counter()
        old = self.model.placement
        new = self.check(placement)
        return self._apply(start, old, new, old, between_chunks, allow_reload)

    def restore(self, contents: Placement, target: Placement,
                allow_reload: bool | None = None) -> RebalanceResult:
        """Make the slots hold `target` given what they hold now, while the model does not serve
        (elastic EP: after a rank is lost, before serving resumes). The model already carries
        `target`'s maps; no chunk is rolled back (the old placement cannot serve any more).

        Args:
            contents: what each slot holds now; slots on ranks `target` leaves out are lost.
        Raises:
            LiveError: an expert with no copy and no weight source, or a rank failed mid-move.
        """
        start = time.perf_counter()
        return self._apply(start, contents, target, None, None, allow_reload)

    def _apply(self, start: float, contents: Placement, new: Placement, old: Placement | None,
               between_chunks, allow_reload: bool | None) -> RebalanceResult:
        self._served_us = 0.0               # time spent serving between chunks, not moving
        reload = self.weight_source is not None if allow_reload is None else allow_reload
        alive = contents.alive_mask & new.alive_mask
        plan = self._plan(contents, new, alive, reload, self.model.layer_ids)
        chunks = self._chunks()
        checksum = _checksum(contents.physical_to_logical, new.physical_to_logical, alive)
        # every rank must derive the same plan, or their transfers would not pair up
        mismatch = self._vote(-1, "start", None, checksum, lambda: None)
        if mismatch is not None:
            raise LiveError(f"rebalance refused before any move: {mismatch}")
        timings, done, failure = self._move(plan, chunks, old, new, checksum, between_chunks,
                                            self.fault)
        if failure is not None:
            if old is None:
                raise LiveError(f"restoring the placement failed: {failure}; layers {done} hold "
                                f"it, the others do not")
            self._roll_back(old, new, done, failure)
        # the blocks switched chunk by chunk (or the caller set them, for `restore`)
        self.model.update_placement(new, layers=[])
        total_us = (time.perf_counter() - start) * 1e6 - self._served_us
        per_rank = self.control.gather_floats([total_us])[:, 0].tolist()
        return RebalanceResult(plan.summary(), *timings,
                               total_us=total_us, per_rank_total_us=per_rank,
                               layers_per_chunk=self.layers_per_chunk,
                               spare_buffer_bytes=self.spare_buffer_bytes,
                               extra={"served_between_chunks_us": self._served_us})

    def _plan(self, old: Placement, new: Placement, alive: np.ndarray, reload: bool,
              layers) -> MovePlan:
        """`epsim.eplb.plan_moves`: the simulator's transfer rule, so live and modelled bytes
        agree."""
        try:
            return plan_moves(old, new, alive, reload, expert_bytes=self.expert_bytes(),
                              layers=layers)
        except EpsimError as exc:
            raise LiveError(str(exc)) from None

    def expert_bytes(self) -> int:
        """Bytes of one expert slot, all its tensors (descriptor of the first held layer)."""
        tensors = self.model.routed_experts_weights_of_layer[self.model.layer_ids[0]]
        return int(sum(t[0].nbytes for t in tensors))

    @property
    def spare_buffer_bytes(self) -> int:
        return 0 if self._spare is None else int(self._spare.nbytes)

    # -- the chunk protocol ------------------------------------------------------------------
    def _chunks(self) -> list[list[int]]:
        layers = self.model.layer_ids
        step = self.layers_per_chunk
        return [layers[i:i + step] for i in range(0, len(layers), step)]

    def _move(self, plan: MovePlan, chunks, start: Placement | None, target: Placement,
              checksum: int, between_chunks, fault: FaultHook | None):
        """Run the chunks; stop at the first failed vote. With a `start` location each committed
        chunk's blocks switch to `target`'s maps at once; without, the caller sets the maps.

        Returns:
            ((chunk layers, chunk_us, transfer_us, commit_us) of the chunks that moved
            something, layers committed, failure message or None).
        """
        rank = self.model.backend.rank
        current = start
        self._reserve(plan, chunks, rank)
        moved, chunk_us, transfer_us, commit_us, done = [], [], [], [], []
        timings = (moved, chunk_us, transfer_us, commit_us)
        for index, layers in enumerate(chunks):
            t0 = time.perf_counter()
            moves = plan.for_layers(layers)
            if not moves:                   # the plan is global: every rank skips it alike
                continue
            failure = self._vote(index, "prepare", fault, checksum,
                                 lambda: self._prepare(layers, moves))
            if failure is None:
                failure = self._vote(index, "staged", fault, checksum,
                                     lambda: self._stage(plan, moves, rank))
            if failure is not None:
                return timings, done, failure
            t1 = time.perf_counter()
            self._commit(plan, moves, rank)
            if current is not None:
                current = current.with_rows(target, layers)
                self.model.update_placement(current, layers=layers)
            self._sync()
            t2 = time.perf_counter()
            moved.append(list(layers))
            chunk_us.append((t2 - t0) * 1e6)
            transfer_us.append((t1 - t0) * 1e6)
            commit_us.append((t2 - t1) * 1e6)
            done += layers
            if between_chunks is not None:
                between_chunks(index)
                self._served_us += (time.perf_counter() - t2) * 1e6
        return timings, done, None

    def _vote(self, chunk: int, stage: str, fault: FaultHook | None, checksum: int,
              work: Callable[[], None]) -> str | None:
        """Run `work` (and the fault hook), then agree with the other ranks; a failure message
        naming the rank, or None when every rank succeeded with the same placement."""
        error = None
        try:
            work()
            if fault is not None:
                fault(chunk, stage)
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it and roll back
            error = f"{type(exc).__name__}: {exc}"
        control = self.control
        ok, same = control.agree(error is None, checksum)
        if ok and same:
            return None
        if not same:
            return "the ranks were given different placements (or masks)"
        errors = control.gather_objects(error)
        rank, message = next((r, e) for r, e in enumerate(errors) if e is not None)
        return f"control rank {rank} at chunk {chunk} ({stage}): {message}"

    def _roll_back(self, old: Placement, new: Placement, done: list[int], failure: str) -> None:
        """Move the committed layers back to `old` and raise RebalanceAborted."""
        if done:
            current = old.with_rows(new, done)
            plan = self._plan(current, old, old.alive_mask, False, done)
            chunks = [c for c in self._chunks() if set(c) & set(done)]
            checksum = _checksum(current.physical_to_logical, old.physical_to_logical,
                                 old.alive_mask)
            _, _, again = self._move(plan, chunks, current, old, checksum, None, None)
            if again is not None:
                raise LiveError(f"rebalance failed ({failure}) and moving layers {done} back failed "
                                f"too ({again}); every layer still serves consistently, layers "
                                f"{done} on the new placement")
        self.model.update_placement(old)
        moved = f"layers {done} moved back; " if done else ""
        raise RebalanceAborted(f"rebalance aborted: {failure}; {moved}the old placement serves")

    # -- the three steps -------------------------------------------------------------------
    def _prepare(self, layers: Sequence[int], moves: list[ExpertMove]) -> None:
        """Own the chunk's weights (not the cache's), check the weight source for reloads."""
        self.model.own_expert_weights(layers)
        rank = self.model.backend.rank
        for move in moves:
            if move.src_rank == RELOAD and move.dst_slot // self._slots() == rank:
                self._source_tensors(move.layer, move.expert)

    def _stage(self, plan: MovePlan, moves: list[ExpertMove], rank: int) -> None:
        """Fill the spare buffer with the chunk's new slot contents on this rank."""
        descriptor = self.model.routed_experts_weights_of_layer
        slots = self._slots()
        group = self.model.backend.group
        ops = []
        entry = 0
        local: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
        with torch.no_grad():
            for move in moves:                 # one global order: both ends post alike
                dst = plan.dst_rank(move)
                if move.src_rank == rank and dst != rank:
                    for tensor in descriptor[move.layer]:
                        ops.append(dist.P2POp(dist.isend, tensor[move.src_slot % slots],
                                              _peer(group, dst), group))
                if dst != rank:
                    continue
                views = self._entry_views(entry, descriptor[move.layer])
                entry += 1
                if move.src_rank == RELOAD:
                    local.append((views, self._source_tensors(move.layer, move.expert)))
                elif move.src_rank == rank:
                    local.append((views, [t[move.src_slot % slots] for t in descriptor[move.layer]]))
                else:
                    ops += [dist.P2POp(dist.irecv, view, _peer(group, move.src_rank), group)
                            for view in views]
            works = dist.batch_isend_irecv(ops) if ops else []
            for views, sources in local:      # overlaps the transfers in flight
                for view, source in zip(views, sources):
                    view.copy_(source)
            for work in works:
                work.wait()
        self._sync()

    def _commit(self, plan: MovePlan, moves: list[ExpertMove], rank: int) -> None:
        """Copy the staged contents into their slots (the only write to live weights)."""
        descriptor = self.model.routed_experts_weights_of_layer
        slots = self._slots()
        entry = 0
        with torch.no_grad():
            for move in moves:
                if plan.dst_rank(move) != rank:
                    continue
                for tensor, view in zip(descriptor[move.layer],
                                        self._entry_views(entry, descriptor[move.layer])):
                    tensor[move.dst_slot % slots].copy_(view)
                entry += 1

    # -- buffers and sources -----------------------------------------------------------------
    def _slots(self) -> int:
        return self.model.placement.slots_per_rank

    def _reserve(self, plan: MovePlan, chunks, rank: int) -> None:
        """Size the one spare buffer for the busiest chunk on this rank (kept between
        rebalances, grown when a later plan needs more)."""
        need = max((sum(plan.dst_rank(m) == rank for m in plan.for_layers(c)) for c in chunks),
                   default=0)
        width = self.expert_bytes()
        if self._spare is not None and self._spare.shape[0] >= need and self._spare.shape[1] == width:
            return
        self._spare = None
        if need:
            device = self.model.routed_experts_weights_of_layer[self.model.layer_ids[0]][0].device
            self._spare = torch.empty((need, width), dtype=torch.uint8, device=device)

    def _entry_views(self, entry: int, like: list[torch.Tensor]) -> list[torch.Tensor]:
        """Views of spare row `entry` shaped like one slot of each tensor in `like`."""
        row, offset, out = self._spare[entry], 0, []
        for tensor in like:
            size = tensor[0].nbytes
            out.append(row[offset:offset + size].view(tensor.dtype).view(tensor.shape[1:]))
            offset += size
        return out

    def _source_tensors(self, layer: int, expert: int) -> list[torch.Tensor]:
        """One expert's [gate_up_proj, down_proj] from the weight source.

        Raises:
            LiveError: no source, or a missing or misshapen tensor.
        """
        if self.weight_source is None:
            raise LiveError(f"logical expert {expert} of layer {layer} must be reloaded, but no "
                            f"weight_source was given")
        like = self.model.routed_experts_weights_of_layer[layer]
        out = []
        for name, slot in zip(fused_names(layer)[1:], like):
            tensor = self.weight_source.get(name)
            if tensor is None or tuple(tensor.shape[1:]) != tuple(slot.shape[1:]) \
                    or not 0 <= expert < tensor.shape[0]:
                shape = None if tensor is None else list(tensor.shape)
                raise LiveError(f"weight_source[{name!r}] (shape {shape}) must hold expert "
                                f"{expert} as [experts, {', '.join(map(str, slot.shape[1:]))}]")
            out.append(tensor[expert])
        return out

    def _sync(self) -> None:
        if self._spare is not None and self._spare.device.type == "cuda":
            torch.cuda.synchronize(self._spare.device)


def _peer(group, rank: int) -> int:
    """The global rank of EP rank `rank` (P2P ops name peers by global rank)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def _checksum(*arrays: np.ndarray) -> int:
    """A non-negative 62-bit hash of the arrays, to check every rank applies the same move."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    return int.from_bytes(digest.digest()[:8], "little") >> 2
