"""`epsim.fast_init`: frozen dataclasses built by filling `__dict__` are the dataclass's own."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from epsim.cost.attention import BatchCounts
from epsim.cost.experts import ExpertGemm
from epsim.cost.flash import KernelWork
from epsim.cost.moe import MoECost
from epsim.cost.step import MoEStack, StepBlock, StepCost
from epsim.cost.traffic import Traffic
from epsim.fast_init import fast_init
from epsim.sim.engine import StepInfo
from epsim.sim.token_gaps import StepGaps

FAST = (BatchCounts, ExpertGemm, KernelWork, MoECost, MoEStack, StepBlock, StepCost, Traffic,
        StepInfo, StepGaps)


def _plain(cls: type) -> type:
    """`cls` as `@dataclass` alone builds it (the generated `__init__`)."""
    params = cls.__dataclass_params__
    return dataclasses.dataclass(frozen=True, eq=params.eq)(
        type(cls.__name__, (), {"__annotations__": {f.name: f.type for f in dataclasses.fields(cls)},
                                **{f.name: f.default for f in dataclasses.fields(cls)
                                   if f.default is not dataclasses.MISSING}}))


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__name__)
def test_fast_init_builds_what_the_dataclass_builds(cls):
    """Each class's fast `__init__` keeps the generated one's signature (names, order,
    defaults) and gives the same fields, positionally or by name, defaults included; the
    instance stays frozen."""
    plain = _plain(cls)
    assert inspect.signature(cls.__init__) == inspect.signature(plain.__init__)
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is dataclasses.MISSING]
    values = [np.arange(3.0) + i for i in range(len(required))]
    for fast, slow in ((cls(*values), plain(*values)),
                       (cls(**{f.name: v for f, v in zip(required, values)}),
                        plain(**{f.name: v for f, v in zip(required, values)}))):
        assert fast.__dict__.keys() == {f.name for f in fields}
        for f in fields:
            assert getattr(fast, f.name) is getattr(slow, f.name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(fast, fields[0].name, 1.0)
    assert dataclasses.replace(cls(*values), **{required[0].name: 7}).__dict__[required[0].name] == 7


def test_fast_init_eq_hash_and_repr_are_the_dataclass_ones():
    one, two = StepGaps(2, 0.5, 1.0), StepGaps(count=2, mean_s=0.5, max_s=1.0)
    assert one == two and hash(one) == hash(two)
    assert repr(one) == "StepGaps(count=2, mean_s=0.5, max_s=1.0, by_tokens=None)"


def test_fast_init_refuses_what_it_does_not_do():
    with pytest.raises(TypeError, match=r"fast_init \(Open\) must decorate a frozen dataclass"):
        fast_init(dataclasses.dataclass(type("Open", (), {"__annotations__": {"a": int}})))

    @dataclasses.dataclass(frozen=True)
    class Later:
        a: int

        def __post_init__(self):
            pass
    with pytest.raises(TypeError, match=r"fast_init \(Later\) takes plain fields only"):
        fast_init(Later)

    @dataclasses.dataclass(frozen=True)
    class Made:
        a: list = dataclasses.field(default_factory=list)
    with pytest.raises(TypeError, match=r"fast_init \(Made\) takes plain fields only"):
        fast_init(Made)
