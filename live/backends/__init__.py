"""All-to-all backends by name, and the one predicate the block uses to pick its forward path.

| name | forward | copies sent | runs on |
|---|---|---|---|
| `none` | normal: all-gather tokens, local experts, all-reduce | every token to every rank | gloo, NCCL |
| `torch` | deepep: dispatch / experts / combine | one per (token, rank) | gloo, NCCL |
| `mooncake` | deepep | one per (token, expert) | CUDA (Mooncake EP) |
| `deepep` | deepep | normal: per (token, rank); low_latency: per pair | CUDA (deep_ep) |
"""

from __future__ import annotations

import torch

from live.backends.base import A2ABackend, BackendSpec, Dispatched, DispatchStats
from live.backends.deepep import DeepEPBackend
from live.backends.mooncake import MooncakeBackend
from live.backends.none import AllReduceBackend, GatheredTokens
from live.backends.torch_a2a import TorchA2ABackend
from live.errors import LiveError

BACKENDS: dict[str, type[A2ABackend]] = {
    cls.name: cls for cls in (AllReduceBackend, TorchA2ABackend, MooncakeBackend, DeepEPBackend)
}


def backend_class(name: str) -> type[A2ABackend]:
    """The backend class registered under `name` (SGLang's `moe_a2a_backend` values)."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise LiveError(f"moe_a2a_backend ({name!r}) must be one of "
                        f"{', '.join(BACKENDS)}") from None


def is_deepep_class_backend(backend: str | A2ABackend) -> bool:
    """True when the block runs dispatch / experts / combine (`forward_deepep`) with this
    backend; False for the all-gather / all-reduce path (`forward_normal`)."""
    cls = backend_class(backend) if isinstance(backend, str) else type(backend)
    return cls.deepep_class


def make_backend(name: str, spec: BackendSpec, group=None) -> A2ABackend:
    """Check and build a backend.

    Shape limits are checked first (they need no GPU), then availability (imports, devices).

    Raises:
        LiveError: unknown name, or shapes the backend cannot take.
        BackendUnavailableError: the library or the GPU it needs is missing.
    """
    cls = backend_class(name)
    cls.check_spec(spec)
    cls.check_available(torch.device(spec.device))
    return cls(spec, group)


__all__ = ["A2ABackend", "AllReduceBackend", "BACKENDS", "BackendSpec", "DeepEPBackend",
           "Dispatched", "DispatchStats", "GatheredTokens", "MooncakeBackend",
           "TorchA2ABackend", "backend_class", "is_deepep_class_backend", "make_backend"]
