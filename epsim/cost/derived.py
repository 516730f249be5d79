"""A value derived from a frozen record once, on first read, then read as a plain attribute.

`functools.cached_property` on Python 3.11 takes one lock shared by every instance of the class
and looks the instance's dict up twice on every first read; the engine builds a `BatchCounts`,
`MoECost` or `Traffic` per step and reads each derived value once or twice, so that first read is
most of what such a property costs (1.3 million of them in 16 silicon rows). `derived` stores the
value in the instance's dict like `cached_property` (later reads never reach it), without the lock
(the engine is single-threaded: a race would compute the same value twice, never another one).
"""

from __future__ import annotations


class derived:  # noqa: N801 (a decorator, named as `cached_property` is)
    """`@derived` on a method: its value, computed on the first read and kept on the instance
    (which must have a `__dict__`: a frozen dataclass without slots)."""

    def __init__(self, func):
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.func(instance)
        return value
