"""Checks shared by every placement algorithm: the load matrix and the cluster shape."""

from __future__ import annotations

import numpy as np

from epsim.errors import PlacementError


def check_weight(weight, name: str = "weight") -> np.ndarray:
    """The load matrix as float64 `[layers, logical]`, or a one-line error naming `name`.

    Raises:
        PlacementError: not 2-D, empty, NaN/inf, or negative entries.
    """
    try:
        weight = np.asarray(weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise PlacementError(f"{name} must be a rectangular [layers, experts] matrix of numbers") from None
    if weight.ndim != 2 or weight.shape[0] == 0 or weight.shape[1] == 0:
        raise PlacementError(f"{name} (shape {list(weight.shape)}) must be a non-empty "
                             f"[layers, experts] matrix")
    bad = np.argwhere(~np.isfinite(weight))
    if len(bad):
        layer, expert = bad[0]
        raise PlacementError(f"{name}[{layer}, {expert}] ({weight[layer, expert]}) must be finite")
    bad = np.argwhere(weight < 0)
    if len(bad):
        layer, expert = bad[0]
        raise PlacementError(f"{name}[{layer}, {expert}] ({weight[layer, expert]:g}) must be >= 0; "
                             f"loads are routed-token counts")
    return weight


def check_shape(num_logical: int, num_replicas: int, num_groups: int, num_nodes: int,
                num_gpus: int) -> None:
    """Raise PlacementError unless the counts describe a placeable cluster.

    Rules: all counts > 0; `num_gpus % num_nodes == 0`; `num_replicas % num_gpus == 0`;
    `num_replicas >= num_logical`; `num_logical % num_groups == 0`.
    """
    for name, value in (("num_replicas", num_replicas), ("num_groups", num_groups),
                        ("num_nodes", num_nodes), ("num_gpus", num_gpus)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
            raise PlacementError(f"{name} ({value!r}) must be a positive integer")
    if num_gpus % num_nodes:
        raise PlacementError(f"num_nodes ({num_nodes}) must divide num_gpus ({num_gpus})")
    if num_replicas % num_gpus:
        raise PlacementError(f"num_replicas ({num_replicas}) must be a multiple of num_gpus "
                             f"({num_gpus}) so every GPU holds equal slots")
    if num_replicas < num_logical:
        raise PlacementError(f"num_replicas ({num_replicas}) must be >= the logical experts "
                             f"({num_logical}); every expert needs a slot")
    if num_logical % num_groups:
        raise PlacementError(f"num_groups ({num_groups}) must divide the logical experts "
                             f"({num_logical})")
