"""One dispatch/combine interface for every all-to-all backend, and what dispatch reports.

A DeepEP-class backend moves token copies to the ranks holding their experts (`dispatch`),
hands the block rows grouped by local expert slot, and returns the expert outputs to the
token's rank where they are weighted and summed (`combine`). The `none` backend instead
all-gathers tokens and all-reduces partial outputs (`gather` / `reduce`).
"""

from __future__ import annotations

import gc
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch
import torch.distributed as dist

from epsim import vocab
from live.errors import BackendUnavailableError, LiveError


@dataclass(frozen=True)
class BackendSpec:
    """What a backend needs to size its buffers and check its limits.

    Attributes:
        hidden_size: H of the tokens moved.
        num_physical_experts: physical slots over all ranks (logical + redundant).
        top_k: experts per token.
        max_tokens_per_rank: most tokens any rank dispatches in one call (buffer sizing).
        dtype: hidden dtype (bf16 on GPU; the CPU backends also take fp32).
        device: where tokens live.
        dispatch_dtype: "bf16" or "fp8" (fp8 only where the backend casts on the fly).
        mode: DeepEP kernel family, "normal" or "low_latency"; the `torch` backend's layout,
            "normal" (exact splits) or "static" (no host sync); others ignore it.
    """

    hidden_size: int
    num_physical_experts: int
    top_k: int
    max_tokens_per_rank: int = 256
    dtype: torch.dtype = torch.bfloat16
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dispatch_dtype: str = "bf16"
    mode: str = "normal"

    def __post_init__(self):
        if self.dispatch_dtype not in vocab.LIVE_DISPATCH_DTYPES:
            raise LiveError(f"dispatch_dtype ({self.dispatch_dtype!r}) must be one of "
                            f"{list(vocab.LIVE_DISPATCH_DTYPES)}")
        if self.max_tokens_per_rank <= 0:
            raise LiveError(f"max_tokens_per_rank ({self.max_tokens_per_rank}) must be >= 1")


@dataclass
class DispatchStats:
    """Counts of one dispatch on this rank (tensors; `to_host()` turns them into lists).

    Attributes:
        recv_tokens_from_rank: [ranks] int64, token copies this rank received from each source
            rank (dedup backends: one per token and rank; per-pair backends: one per pair).
        send_tokens_to_rank: [ranks] int64, token copies this rank sent to each destination.
        local_expert_tokens: [local_slots] int64, (token, expert) pairs per local slot.
    """

    recv_tokens_from_rank: torch.Tensor
    send_tokens_to_rank: torch.Tensor
    local_expert_tokens: torch.Tensor

    def to_host(self) -> dict:
        return {"recv_tokens_from_rank": self.recv_tokens_from_rank.tolist(),
                "send_tokens_to_rank": self.send_tokens_to_rank.tolist(),
                "local_expert_tokens": self.local_expert_tokens.tolist()}


class Dispatched:
    """The result of one dispatch on this rank: backend state plus lazily computed counts.

    Attributes:
        handle: backend-private state (received tokens, layout, the native handle).
        stats: DispatchStats, computed on first read from the handle (so counting costs
            nothing inside a timed forward).
    """

    def __init__(self, handle: Any, count: Callable[[Any], DispatchStats]):
        self.handle = handle
        self._count = count
        self._stats: DispatchStats | None = None

    @property
    def stats(self) -> DispatchStats:
        if self._stats is None:
            self._stats = self._count(self.handle)
        return self._stats


class A2ABackend:
    """A named all-to-all backend over one EP process group (a base whose hooks have defaults,
    so not an ABC: nothing is left abstract).

    Subclasses set `name` (an `epsim.vocab.BACKENDS` entry, which holds what the backend can do:
    `capabilities`) and `requires_cuda`, implement `check_spec` (shape limits, runs anywhere) and `check_available`
    (imports and devices), and the data path.
    """

    name: ClassVar[str] = ""
    requires_cuda: ClassVar[bool] = False

    @property
    def capabilities(self) -> vocab.Backend:
        """What this backend can do: its row of `epsim.vocab.BACKENDS`, the one table of them."""
        return vocab.backend(self.name)

    def __init__(self, spec: BackendSpec, group=None):
        self.spec = spec
        self.group = group
        if group is None:
            self.rank, self.ep_size = 0, 1
        else:
            self.rank, self.ep_size = dist.get_rank(group), dist.get_world_size(group)
        if spec.num_physical_experts % self.ep_size:
            raise LiveError(f"num_physical_experts ({spec.num_physical_experts}) must be divisible "
                            f"by ep_size ({self.ep_size})")
        self.num_local_slots = spec.num_physical_experts // self.ep_size

    @classmethod
    def check_spec(cls, spec: BackendSpec) -> None:
        """Raise LiveError when the backend cannot take these shapes (no GPU needed)."""

    @classmethod
    def check_available(cls, device: torch.device) -> None:
        """Raise BackendUnavailableError when the backend cannot run on `device` here."""
        if cls.requires_cuda and (device.type != "cuda" or not torch.cuda.is_available()):
            raise BackendUnavailableError(
                f"moe_a2a_backend ({cls.name!r}) needs a CUDA GPU; device is {device.type!r} and "
                f"torch.cuda.is_available() is {torch.cuda.is_available()}; use 'torch' or "
                f"'none' on CPU")

    @classmethod
    def require_module(cls, module: str, hint: str) -> None:
        """Raise BackendUnavailableError naming `module` and `hint` when it does not import."""
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise BackendUnavailableError(f"moe_a2a_backend ({cls.name!r}) needs `{module}`, which "
                                          f"failed to import ({exc}); {hint}") from None

    # DeepEP-class data path: dispatch -> expert_rows -> (experts) -> expert_payload -> combine
    def dispatch(self, x: torch.Tensor, topk_slots: torch.Tensor,
                 topk_weights: torch.Tensor) -> Dispatched:
        """Send token copies to the ranks that hold their chosen physical slots (communication
        only; the layout for the experts is `expert_rows`).

        Args:
            x: [tokens, H] this rank's tokens.
            topk_slots: [tokens, top_k] int64 physical slot per choice (-1: no choice).
            topk_weights: [tokens, top_k] float32 routing weights.
        """
        raise NotImplementedError(f"backend {self.name!r} has no dispatch")

    def expert_rows(self, dispatched: Dispatched) -> tuple[torch.Tensor, torch.Tensor]:
        """Received copies as rows grouped by local slot, for grouped GEMM.

        Returns:
            (rows [n, H] with slot 0's rows first, counts [local_slots] int64). Rows past
            `counts.sum()` are padding where a backend keeps shapes static (no host sync).
        """
        raise NotImplementedError(f"backend {self.name!r} has no expert_rows")

    def expert_payload(self, expert_y: torch.Tensor, dispatched: Dispatched) -> Any:
        """Expert outputs (rows aligned with `expert_rows`) in the layout `combine` sends."""
        raise NotImplementedError(f"backend {self.name!r} has no expert_payload")

    def combine(self, payload: Any, dispatched: Dispatched) -> torch.Tensor:
        """Return outputs to their tokens' ranks, weighted and summed: [tokens, H] in the order
        `dispatch` got them."""
        raise NotImplementedError(f"backend {self.name!r} has no combine")


def token_ranks(topk_slots: torch.Tensor, num_local_slots: int, num_ranks: int) -> torch.Tensor:
    """[tokens, ranks] bool: the ranks holding at least one of each token's chosen slots (a
    dedup backend sends the token once to each; slot -1 floor-divides to rank -1: none)."""
    ranks = torch.arange(num_ranks, device=topk_slots.device)
    return ((topk_slots // num_local_slots).unsqueeze(-1) == ranks).any(dim=1)


def pack_choices(slots: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[rows, 2*top_k] int64: slot ids, then the fp32 weights' bit patterns, so one collective
    moves both."""
    bits = weights.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    return torch.cat([slots, bits], dim=1)


def unpack_choices(meta: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of `pack_choices`: (slots [rows, top_k] int64, weights [rows, top_k] float32)."""
    weights = meta[:, top_k:].to(torch.int32).contiguous().view(torch.float32)
    return meta[:, :top_k], weights


def dedup_expert_rows(handle, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`expert_rows` for backends that receive each token once per rank (torch, DeepEP normal):
    expand `handle.recv_slot` to (row, k) pairs grouped by slot; keeps them on `handle.pairs`."""
    handle.pairs = pairs_by_slot(handle.recv_slot, num_slots)
    pair_row, _, counts = handle.pairs
    return handle.recv_x[pair_row], counts


def dedup_expert_payload(expert_y: torch.Tensor, handle) -> torch.Tensor:
    """`expert_payload` for the same backends: [received, H], each received token's weighted
    sum over its local pairs (DeepEP's normal combine then sums over ranks)."""
    pair_row, pair_k, _ = handle.pairs
    per_row = reduce_pairs(expert_y, pair_row, handle.recv_weight[pair_row, pair_k],
                           handle.recv_x.shape[0])
    return per_row.to(expert_y.dtype)


def pairs_by_slot(local_slot: torch.Tensor, num_slots: int, all_local: bool = False):
    """Order (row, k) pairs of received tokens by local slot.

    Args:
        local_slot: [rows, top_k] int64, local slot of each choice or -1 (not on this rank).
        all_local: the caller knows no entry is -1 (one rank holds every slot): the pairs are
            then every (row, k) in row-major order, found without `nonzero`'s host sync (same
            result).
    Returns:
        (pair_row [pairs] int64, pair_k [pairs] int64, counts [num_slots] int64): rows grouped
        by slot in slot order; within a slot in row order.
    """
    if all_local:
        slot = local_slot.reshape(-1)
        order = torch.argsort(slot, stable=True)
        top_k = local_slot.shape[1]
        return order // top_k, order % top_k, slot_counts(slot, num_slots)
    row, k = torch.nonzero(local_slot >= 0, as_tuple=True)
    slot = local_slot[row, k]
    order = torch.argsort(slot, stable=True)
    return row[order], k[order], slot_counts(slot, num_slots)


def slot_counts(slots: torch.Tensor, num_slots: int) -> torch.Tensor:
    """[num_slots] int64 occurrences of each slot id in `slots` (-1 ignored); no host sync
    (bincount would wait for the largest id)."""
    flat = slots.reshape(-1)
    valid = (flat >= 0).to(torch.int64)
    counts = torch.zeros(num_slots, dtype=torch.int64, device=flat.device)
    return counts.scatter_add_(0, flat.clamp(min=0), valid)


def reduce_pairs(expert_y: torch.Tensor, pair_row: torch.Tensor, pair_weight: torch.Tensor,
                 num_rows: int) -> torch.Tensor:
    """Weight each pair's output and sum the pairs of a row (fp32 accumulation).

    The product is taken in the hidden dtype, as transformers' experts do; the sum in fp32.

    Returns:
        [num_rows, H] fp32.
    """
    weighted = expert_y * pair_weight.to(expert_y.dtype).unsqueeze(-1)
    out = torch.zeros((num_rows, expert_y.shape[1]), dtype=torch.float32, device=expert_y.device)
    out.index_add_(0, pair_row, weighted.float())
    return out


_BUFFERS: dict[tuple, tuple[int, Any]] = {}


def shared_buffer(key: tuple, num_bytes: int, make: Callable[[], Any]) -> Any:
    """One communication buffer per (library, group, mode) and process, as SGLang keeps it.

    Reused while it is at least `num_bytes`; otherwise dropped and rebuilt (the old one is
    freed first: these buffers pin large device memory and peer mappings).
    """
    held = _BUFFERS.get(key)
    if held is not None and held[0] >= num_bytes:
        return held[1]
    if held is not None:
        del _BUFFERS[key]
        del held
        gc.collect()
    buffer = make()
    _BUFFERS[key] = (num_bytes, buffer)
    return buffer
