"""Placement algorithms by name: the `DeploymentSpec.eplb_algorithm` literals.

Every entry is called as `fn(weight, num_replicas, num_groups, num_nodes, num_ranks,
previous=None) -> Placement` (DeepSeek's reference calls the ranks `num_gpus`); algorithms that
ignore the previous placement accept it anyway, so the EPLB manager can call any of them the
same way.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from epsim.eplb.deepseek import deepseek_placement
from epsim.eplb.placement import Placement
from epsim.eplb.sticky import sticky_placement
from epsim.errors import PlacementError

PlacementFn = Callable[..., Placement]


def _deepseek(policy: str) -> PlacementFn:
    def place(weight, num_replicas, num_groups=1, num_nodes=1, num_gpus=1, previous=None):
        return deepseek_placement(weight, num_replicas, num_groups, num_nodes, num_gpus, policy=policy)
    place.__doc__ = f"DeepSeek EPLB, {policy} policy (ignores the previous placement)."
    return place


ALGORITHMS: dict[str, PlacementFn] = {
    "deepseek": _deepseek("auto"),
    "deepseek_hierarchical": _deepseek("hierarchical"),
    "deepseek_global": _deepseek("global"),
    "sticky": sticky_placement,
}


def compute_placement(algorithm: str, weight: np.ndarray, num_replicas: int, num_groups: int = 1,
                      num_nodes: int = 1, num_ranks: int = 1,
                      previous: Placement | None = None) -> Placement:
    """Run the named algorithm on `weight` [layers, logical] and return a validated Placement.

    Raises:
        PlacementError: an unknown algorithm name, or bad inputs (the algorithm's message).
    """
    fn = ALGORITHMS.get(algorithm)
    if fn is None:
        raise PlacementError(f"algorithm ({algorithm!r}) must be one of {sorted(ALGORITHMS)}")
    return fn(weight, num_replicas, num_groups, num_nodes, num_ranks, previous=previous).validate()
