"""Placements when EP ranks have failed (elastic EP): compute over the survivors' slots only.

The one rule for the simulator (`epsim.sim.eplb_process`, `epsim.sim.elastic`) and `live/`
(`live.eplb.manager`, `live.eplb.elastic`): take the alive ranks' slots (`Placement.survivors`,
one node: survivors no longer fill nodes equally), place there, write the result back over those
slots (`Placement.expand`); a failed rank's slots keep what they hold.
"""

from __future__ import annotations

import numpy as np

from epsim.eplb.placement import Placement
from epsim.eplb.registry import compute_placement
from epsim.errors import PlacementError


def place_over_survivors(algorithm: str, weight: np.ndarray, current: Placement,
                         num_groups: int = 1) -> Placement:
    """Run placement `algorithm` on `weight` [layers, logical] over `current`'s alive ranks.

    With every rank alive this is `compute_placement` on the whole cluster (its nodes, the
    current placement as `previous`); with failed ranks, over the survivors' slots as one node.

    Returns:
        A validated Placement with `current`'s topology and alive mask.
    Raises:
        PlacementError: an unknown algorithm or inputs it rejects.
    """
    if current.all_alive:
        return compute_placement(algorithm, weight, current.num_physical, num_groups,
                                 current.num_nodes, current.num_ranks, previous=current)
    previous = current.survivors()
    new = compute_placement(algorithm, weight, previous.num_physical, num_groups, 1,
                            previous.num_ranks, previous=previous)
    return current.expand(new)


def refill_survivors(current: Placement) -> tuple[Placement, dict[int, list[int]]]:
    """Give every expert that lived only on failed ranks a survivor slot (`fill_lost`).

    Returns:
        (the placement with `current`'s topology and mask, {layer: lost experts}).
    Raises:
        PlacementError: the survivors' slots cannot hold every expert.
    """
    filled, lost = fill_lost(current.survivors().physical_to_logical, current.num_logical)
    return current.expand(filled), lost


def fill_lost(physical_to_logical: np.ndarray, num_experts: int) -> tuple[np.ndarray, dict[int, list[int]]]:
    """Give every expert missing from a slot map a slot, taking slots of surplus replicas.

    Each lost expert (ascending) takes the last slot of the expert with the most replicas at
    that point (ties: the lowest expert id), so every expert keeps a replica and nothing else
    moves.

    Args:
        physical_to_logical: [layers, slots] int, the survivors' slots.
    Returns:
        ([layers, slots] int64 with every expert present, {layer: lost experts}).
    Raises:
        PlacementError: fewer slots than experts.
    """
    p2l = np.array(physical_to_logical, dtype=np.int64)
    num_layers, num_slots = p2l.shape
    if num_slots < num_experts:
        raise PlacementError(f"the surviving slots ({num_slots}) must hold every one of the "
                             f"{num_experts} experts; add redundant experts or keep more ranks")
    counts = np.zeros((num_layers, num_experts), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(num_layers), num_slots), p2l.ravel()), 1)
    lost_by_layer = {}
    for layer in np.flatnonzero((counts == 0).any(axis=1)):
        row, count = p2l[layer], counts[layer]               # views: edited in place
        lost = np.flatnonzero(count == 0).tolist()
        for expert in lost:
            donor = int(np.argmax(count))                   # most replicas, lowest id on ties
            row[np.flatnonzero(row == donor)[-1]] = expert
            count[donor] -= 1
            count[expert] += 1
        lost_by_layer[int(layer)] = lost
    return p2l, lost_by_layer
