"""All-to-all backends by name (the classes of `epsim.vocab.BACKENDS`, which holds what each can
do; `epsim.vocab.is_deepep_class(name)` is the one predicate the block uses to pick its forward
path).

| name | forward | copies sent | runs on |
|---|---|---|---|
| `none` | normal: all-gather tokens, local experts, all-reduce | every token to every rank | gloo, NCCL |
| `torch` | deepep: dispatch / experts / combine | one per (token, rank) | gloo, NCCL |
| `mooncake` | deepep | one per (token, expert) | CUDA (Mooncake EP) |
| `deepep` | deepep | normal: per (token, rank); low_latency: per pair | CUDA (deep_ep) |
"""

from __future__ import annotations

import torch

from epsim import vocab
from live.backends.base import A2ABackend, BackendSpec, Dispatched, DispatchStats
from live.backends.deepep import DeepEPBackend
from live.backends.mooncake import MooncakeBackend
from live.backends.none import AllReduceBackend, GatheredTokens
from live.backends.torch_a2a import TorchA2ABackend
from live.errors import LiveError

_CLASSES = {cls.name: cls for cls in (AllReduceBackend, TorchA2ABackend, MooncakeBackend,
                                      DeepEPBackend)}
BACKENDS: dict[str, type[A2ABackend]] = {name: _CLASSES[name] for name in vocab.A2A_BACKENDS}


def backend_class(name: str) -> type[A2ABackend]:
    """The backend class registered under `name` (SGLang's `moe_a2a_backend` values)."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise LiveError(f"moe_a2a_backend ({name!r}) must be one of "
                        f"{', '.join(BACKENDS)}") from None


def make_backend(name: str, spec: BackendSpec, group=None) -> A2ABackend:
    """Check and build a backend.

    Shape limits are checked first (they need no GPU), then availability (imports, devices).

    Raises:
        LiveError: unknown name, an FP8 dispatch the backend does not cast, or shapes the
            backend cannot take.
        BackendUnavailableError: the library or the GPU it needs is missing.
    """
    cls = backend_class(name)
    if spec.dispatch_dtype == "fp8" and not vocab.backend(name).fp8_dispatch:
        raise LiveError(f"dispatch_dtype ('fp8') must be 'bf16' for backend {name!r}; FP8 "
                        f"dispatch: {', '.join(vocab.backends_with('fp8_dispatch'))}")
    cls.check_spec(spec)
    cls.check_available(torch.device(spec.device))
    return cls(spec, group)


__all__ = ["A2ABackend", "AllReduceBackend", "BACKENDS", "BackendSpec", "DeepEPBackend",
           "Dispatched", "DispatchStats", "GatheredTokens", "MooncakeBackend",
           "TorchA2ABackend", "backend_class", "make_backend"]
