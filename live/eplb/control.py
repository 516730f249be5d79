"""The control plane of a rebalance: small collectives (votes, per-rank numbers, one object from
rank 0) on a control group, which may be smaller than the EP group (the survivors of a masked
rank) and may run on gloo while the weights move over NCCL. Alone (no group, or a group of one)
every call is local.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from live.errors import LiveError


class Control:
    """Collectives of the EPLB protocol on `group` (None = this rank alone)."""

    def __init__(self, group=None):
        self.group = group
        self.size = 1 if group is None else dist.get_world_size(group)
        self.rank = 0 if group is None else dist.get_rank(group)
        self.device = torch.device("cpu")
        if self.size > 1 and dist.get_backend(group) == "nccl":
            self.device = torch.device("cuda", torch.cuda.current_device())

    @property
    def alone(self) -> bool:
        return self.size == 1

    def agree(self, ok: bool, checksum: int = 0) -> tuple[bool, bool]:
        """(every rank ok, every rank passed the same checksum), one all-reduce.

        Args:
            checksum: a non-negative int < 2**62 (e.g. a hash of the placement).
        """
        if self.alone:
            return ok, True
        values = torch.tensor([int(ok), checksum, -checksum], dtype=torch.int64, device=self.device)
        dist.all_reduce(values, op=dist.ReduceOp.MIN, group=self.group)
        low_ok, low, neg_high = values.tolist()
        return bool(low_ok), low == -neg_high

    def gather_floats(self, values) -> np.ndarray:
        """[ranks, n] float64, every rank's `values` (n floats, the same n everywhere)."""
        mine = np.asarray(values, dtype=np.float64).reshape(-1)
        if self.alone:
            return mine[None, :]
        table = torch.zeros((self.size, mine.size), dtype=torch.float64, device=self.device)
        table[self.rank] = torch.as_tensor(mine, device=self.device)
        dist.all_reduce(table, group=self.group)
        return table.cpu().numpy()

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's picklable `obj`, by control rank (for error messages: the rare path)."""
        if self.alone:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Control rank 0's `obj` on every rank (the placement all ranks apply)."""
        if self.alone:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self.group, 0), group=self.group)
        return box[0]

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce sum over the control ranks, on the control device; returns the sum."""
        if self.alone:
            return tensor
        moved = tensor.to(self.device)
        dist.all_reduce(moved, group=self.group)
        return moved


def control_for(model, control_group=None) -> Control:
    """The control plane of `model`'s EPLB: `control_group` if given; else the EP group, or
    this rank alone when it is the only active one of a masked placement.

    Raises:
        LiveError: ranks are masked, more than one survives and no control group was given
            (the EP group's collectives would wait for the masked ranks).
    """
    if control_group is not None:
        return Control(control_group)
    active = model.placement.alive_mask
    if not active.all():
        if int(active.sum()) == 1:
            return Control(None)
        raise LiveError(f"control_group (None) must be the survivors' process group while ranks "
                        f"{np.nonzero(~active)[0].tolist()} are masked")
    return Control(model.backend.group)
