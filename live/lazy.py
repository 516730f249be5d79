"""LazyValue: a value computed on first access that also reads as a mapping.

EPLB code reads `model.routed_experts_weights_of_layer` as a dict (`.keys()`, `[layer_id]`).
A LazyValue handed out without unwrapping once broke that elsewhere ("'LazyValue' object has
no attribute 'keys'"), so this one delegates the whole read-only mapping protocol to its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Iterator


class LazyValue(Mapping):
    """Computes `make()` on the first read and caches it; `reset()` forgets it.

    `.value` is the computed object. When that object is a mapping, the LazyValue itself reads
    as the same mapping (`keys`, `[key]`, `in`, iteration, `len`, `items`), so a consumer that
    receives the wrapper instead of `.value` still works.
    """

    def __init__(self, make: Callable[[], Any]):
        self._make = make
        self._value: Any = None
        self._ready = False

    @property
    def value(self) -> Any:
        if not self._ready:
            self._value = self._make()
            self._ready = True
        return self._value

    @property
    def is_computed(self) -> bool:
        return self._ready

    def reset(self) -> None:
        """Drop the cached value; the next read recomputes it (after weights were replaced)."""
        self._value, self._ready = None, False

    # -- read-only mapping protocol, delegated -------------------------------------------
    def _mapping(self) -> Mapping:
        value = self.value
        if not isinstance(value, Mapping):
            raise TypeError(f"LazyValue holds a {type(value).__name__}, not a mapping")
        return value

    def __getitem__(self, key: Any) -> Any:
        return self._mapping()[key]

    def __iter__(self) -> Iterator:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())

    def __repr__(self) -> str:
        state = repr(self._value) if self._ready else "<not computed>"
        return f"LazyValue({state})"
