"""Frozen dataclasses built fast: an `__init__` that fills the instance's `__dict__` directly.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (its own
`__setattr__` refuses), ~0.2 us a field: the simulator's per-step records (`BatchCounts`,
`MoECost`, `StepCost`, `Traffic`, `StepGaps`, ...) are built some 180 k times in two typical
silicon rows, 1-4 us each. `fast_init` replaces that `__init__` with one of the same signature
that stores the same values in the instance's `__dict__` (where `object.__setattr__` puts
them): the same objects, still frozen, built in a fraction of the time.
"""

from __future__ import annotations

import dataclasses

_RESERVED = {"self", "_values"}


def fast_init(cls: type) -> type:
    """Class decorator over `@dataclass(frozen=True)`: the same `__init__` signature (fields in
    order, their defaults), filling `__dict__` directly.

    Raises:
        TypeError: `cls` is not a frozen dataclass, or it has what the fast `__init__` does not
            do (`__post_init__`, `__slots__`, a field with `init=False`, a default factory, a
            keyword-only field, a field named `self` or `_values`).
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"fast_init ({cls.__name__}) must decorate a frozen dataclass")
    fields = dataclasses.fields(cls)
    if (hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__
            or any(not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING
                   or f.name in _RESERVED for f in fields)):
        raise TypeError(f"fast_init ({cls.__name__}) takes plain fields only: no __post_init__, "
                        f"__slots__, init=False, default factory, keyword-only field or a field "
                        f"named {sorted(_RESERVED)}")
    namespace: dict = {}
    args = []
    for f in fields:
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
    body = "".join(f"    _values[{f.name!r}] = {f.name}\n" for f in fields)
    source = f"def __init__(self, {', '.join(args)}):\n    _values = self.__dict__\n{body}"
    exec(source, namespace)                    # noqa: S102 -- our own fields' names only
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init
    return cls
