"""Lazy re-exports: a package's public names, each imported from its module on first use.

A package whose `__init__` imported every module it re-exports would make importing any one
of its modules import them all: `epsim --help` would load the simulator, and a module the zoo
needs would import the zoo back. `epsim`, `epsim.spec` and `epsim.plan` re-export this way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` (PEP 562) for `package` that imports `exports[name]` (a module's
    dotted name) when `name` is first read.

    Raises:
        AttributeError: `name` is not one of `exports`.
    """
    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)
    return __getattr__
