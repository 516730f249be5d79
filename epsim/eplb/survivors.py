"""Placements after EP ranks fail (elastic EP): keep every expert on the surviving slots.

Used by the simulator's failure process (`epsim.sim.elastic`); `live/eplb/elastic.py` applies
the same rule on GPUs.
"""

from __future__ import annotations

import numpy as np

from epsim.errors import PlacementError


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
