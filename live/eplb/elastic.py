"""Elastic EP: keep serving when EP ranks are lost.

Two ways, by backend:

- `mask_ranks` (`mooncake`): the group stays; the survivors mark the lost ranks inactive in the
  Mooncake buffer's `active_ranks` (its kernels neither send to nor wait for them) and in the
  dispatch maps. Every expert that had a replica on a survivor is served by it; an expert that
  lived only on a lost rank is re-placed onto a survivor slot holding a surplus replica and
  reloaded from the weight source. All of this needs the survivors' slots to hold every expert
  (`survivors x slots_per_rank >= experts`), which on one node with redundant experts they can.
- `shrink_group` (`torch`, `none`: their collectives need every rank of the group): the
  survivors form a smaller process group and the model serves on it with the same per-rank
  slots, re-placed the same way.

Only the survivors call these; the lost ranks take no part. The re-placement is the
simulator's (`epsim.eplb.refill_survivors`, `fill_lost`), so live and simulated elastic EP agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist

from epsim.eplb import Placement, refill_survivors
from epsim.errors import EpsimError
from live.eplb.updater import ExpertWeightUpdater, RebalanceResult
from live.errors import BackendUnavailableError, LiveError
from live.location import check_ranks


@dataclass(frozen=True)
class ElasticResult:
    """What losing ranks did to the placement.

    Attributes:
        active_ranks: EP ranks serving afterwards (in the original numbering).
        lost_experts: {layer: logical experts that lived only on lost ranks} (reloaded).
        served_by_replicas: True when no expert was lost (no weight moved).
        moves: the updater's result (reloads, copies), or None when nothing moved.
    """

    active_ranks: list[int]
    lost_experts: dict[int, list[int]]
    served_by_replicas: bool
    moves: RebalanceResult | None


def _refill(placement: Placement) -> tuple[Placement, dict[int, list[int]]]:
    """`epsim.eplb.refill_survivors` with its error as a LiveError."""
    try:
        return refill_survivors(placement)
    except EpsimError as exc:
        raise LiveError(str(exc)) from None


def _survivors(model, inactive: Sequence[int]) -> tuple[Placement, np.ndarray]:
    """(current placement, the alive mask once `inactive` are masked), validated."""
    current = model.placement
    ranks = check_ranks(list(inactive), current.num_ranks, name="inactive rank")
    rank = model.backend.rank
    if rank in ranks:
        raise LiveError(f"inactive rank ({rank}) is this rank; only the survivors call this")
    active = current.alive_mask
    active[ranks] = False
    num_slots = int(active.sum()) * current.slots_per_rank
    if num_slots < current.num_logical:
        raise LiveError(f"the surviving ranks {np.nonzero(active)[0].tolist()} hold {num_slots} "
                        f"slots; they must hold every one of the {current.num_logical} experts "
                        f"(add redundant experts)")
    return current, active


def _need_source(lost: dict[int, list[int]], weight_source) -> None:
    """Refuse, before anything changes, to lose experts that cannot be reloaded."""
    if lost and weight_source is None:
        layer, experts = next(iter(lost.items()))
        raise LiveError(f"weight_source (None) must be given: logical experts {experts} of layer "
                        f"{layer} lived only on the lost ranks and must be reloaded")


def mask_ranks(model, inactive: Sequence[int],
               weight_source: Mapping[str, torch.Tensor] | None = None, control_group=None,
               layers_per_chunk: int = 1) -> ElasticResult:
    """Stop dispatching to `inactive` ranks; serve their experts from replicas or reload them.

    Args:
        model: a `Qwen3MoeModel` on the survivors (each survivor calls this).
        inactive: EP ranks lost.
        weight_source: fused weights (`live.weights.fused_names`) to reload lost experts.
        control_group: the survivors' group for the votes (None: a single survivor); build it
            with `dist.new_group(survivors, backend="gloo", use_local_synchronization=True)`.
    Raises:
        LiveError: a rank out of range or this rank itself, too few surviving slots, lost
            experts without a weight source; BackendUnavailableError: a Mooncake buffer on its
            Python fallback, whose collectives need every rank.
    """
    current, active = _survivors(model, inactive)
    backend = model.backend
    if getattr(getattr(backend, "buffer", None), "_use_fallback", False):
        raise BackendUnavailableError("mooncake runs its Python fallback here (collectives over the "
                                      "whole group), which cannot leave a rank out; mask needs its "
                                      "NVLink/IBGDA kernels")
    target, lost = _refill(current.with_alive(active))
    _need_source(lost, weight_source)
    # `torch` and `none` run collectives over the whole group: there a masked rank must go on
    # calling forward (with no tokens); a rank that is gone needs shrink_group
    if backend.capabilities.masking:
        backend.set_active_ranks(active)
    moves = None
    model.update_placement(target)
    if lost:
        updater = ExpertWeightUpdater(model, layers_per_chunk, weight_source, control_group)
        moves = updater.restore(current, target)
    return ElasticResult(np.nonzero(active)[0].tolist(), lost, not lost, moves)


def shrink_group(model, group, inactive: Sequence[int],
                 weight_source: Mapping[str, torch.Tensor] | None = None,
                 layers_per_chunk: int = 1) -> ElasticResult:
    """Serve on `group`, the survivors' process group, with the same slots per rank.

    Args:
        group: the survivors, in rank order (`dist.new_group(survivors, ...)`; with NCCL and a
            device bound at init, torch builds it by splitting the parent communicator, which
            every parent rank must join, so a rank that is gone needs a fresh launch there).
        inactive: EP ranks lost (original numbering).
    Raises:
        LiveError: ranks or group that do not match, too few surviving slots, lost experts
            without a weight source.
    """
    current, active = _survivors(model, inactive)
    survivors = np.nonzero(active)[0].tolist()
    size = dist.get_world_size(group)
    if size != len(survivors) or dist.get_rank(group) != survivors.index(model.backend.rank):
        raise LiveError(f"group (size {size}, this rank {dist.get_rank(group)}) must hold the "
                        f"survivors {survivors} in order")
    contents = current.with_alive(active).survivors()        # the survivors' slots, renumbered
    target, lost = _refill(contents)
    _need_source(lost, weight_source)
    model.set_group(group, target)
    moves = None
    if lost:
        updater = ExpertWeightUpdater(model, layers_per_chunk, weight_source)
        moves = updater.restore(contents, target)
    return ElasticResult(survivors, lost, not lost, moves)
