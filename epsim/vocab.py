"""The shared vocabulary of epsim and `live/`: all-to-all backends and what each can do, replica
selections, dispatch dtypes and DeepEP kernel modes. Stdlib only, so specs, records, cost models
and `live/` all import it; one test checks the spec literals, the cost models and the live
backend registry against it (`tests/epsim/test_vocab.py`).

Use it as:

    from epsim import vocab
    vocab.is_deepep_class("torch")              # True: dispatch / experts / combine
    vocab.backend("mooncake").masking           # True: can leave failed ranks out in place
    vocab.backend("deepep").fp8_dispatch        # True: casts the dispatch to FP8 itself
    vocab.A2A_BACKENDS                          # ("none", "torch", "deepep", "mooncake")

A new backend is one `Backend` row here, one class in `live/backends/` and one cost model entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    """One all-to-all backend (SGLang's `moe_a2a_backend` value) and its capabilities.

    Attributes:
        name: the `moe_a2a_backend` value.
        deepep_class: the block runs dispatch / experts / combine with it (`forward_deepep`);
            False: all-gather / local experts / all-reduce (`forward_normal`).
        fp8_dispatch: the backend casts the dispatched hidden states to FP8 itself.
        low_latency: it has low-latency kernels whose buffer is laid out per (hidden, max tokens
            per rank) (DeepEP's `low_latency_mode`, Mooncake EP).
        masking: it can leave failed ranks out of its collectives in place (Mooncake EP's
            `active_ranks`); the others need every rank of the group or a smaller group.
        copies: what one dispatched copy is — "pair" (token, expert), "rank" (token, rank),
            "node" (token, node, DeepEP normal) or "" (no all-to-all); DeepEP's low-latency
            mode sends per pair (`copies_for`).
    """

    name: str
    deepep_class: bool
    fp8_dispatch: bool
    low_latency: bool
    masking: bool
    copies: str


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("none", deepep_class=False, fp8_dispatch=False, low_latency=False, masking=False,
            copies=""),
    Backend("torch", deepep_class=True, fp8_dispatch=False, low_latency=False, masking=False,
            copies="rank"),
    Backend("deepep", deepep_class=True, fp8_dispatch=True, low_latency=True, masking=False,
            copies="node"),
    Backend("mooncake", deepep_class=True, fp8_dispatch=True, low_latency=True, masking=True,
            copies="pair"),
)}
A2A_BACKENDS: tuple[str, ...] = tuple(BACKENDS)

# How a token picks among an expert's replicas (SGLang's `ep_dispatch_algorithm`); `live/`
# runs the first two (`LIVE_REPLICA_SELECTIONS`).
REPLICA_SELECTIONS: tuple[str, ...] = ("static", "random", "round_robin")
LIVE_REPLICA_SELECTIONS: tuple[str, ...] = ("static", "random")

# What the dispatch carries (the combine returns BF16 either way); `nvfp4`: DeepEP's low-latency
# dispatch with `use_nvfp4=True` (SGLang's SGLANG_MOE_NVFP4_DISPATCH beside an NVFP4 MoE runner).
DISPATCH_DTYPES: tuple[str, ...] = ("bf16", "fp8", "nvfp4")
# the dtypes the live backends move (DeepEP low-latency's NVFP4 dispatch is priced, not benched)
LIVE_DISPATCH_DTYPES: tuple[str, ...] = ("bf16", "fp8")

# DeepEP's kernel families; a deployment may also say "auto" (normal prefill, LL decode).
DEEPEP_MODES: tuple[str, ...] = ("normal", "low_latency")
DEEPEP_MODE_CHOICES: tuple[str, ...] = ("auto", *DEEPEP_MODES)


def backend(name: str) -> Backend:
    """The capabilities of backend `name`.

    Raises:
        ValueError: an unknown name (`moe_a2a_backend (...) must be one of [...]`).
    """
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"moe_a2a_backend ({name!r}) must be one of {list(A2A_BACKENDS)}") from None


def is_deepep_class(name: str) -> bool:
    """True when the block runs dispatch / experts / combine with backend `name` (every backend
    but `none`); the single predicate the live block and the records use."""
    return backend(name).deepep_class


def copies_for(name: str, mode: str = "") -> str:
    """How backend `name` in DeepEP kernel `mode` counts dispatched copies: "pair", "rank",
    "node" or "" (no all-to-all). DeepEP's low-latency kernels send one copy per pair."""
    if name == "deepep" and mode == "low_latency":
        return "pair"
    return backend(name).copies


def backends_with(capability: str) -> tuple[str, ...]:
    """Backend names that have `capability` (a `Backend` boolean field), in registry order."""
    return tuple(name for name, b in BACKENDS.items() if getattr(b, capability))
