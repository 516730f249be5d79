"""LazyValue: computed once on first read, reads as the mapping it holds."""

from collections.abc import Mapping

import pytest

from live.lazy import LazyValue


def test_computes_once_on_first_read_and_resets():
    calls = []
    lazy = LazyValue(lambda: calls.append(1) or {3: "a", 5: "b"})
    assert not lazy.is_computed and calls == []
    assert lazy.value == {3: "a", 5: "b"}
    assert lazy.value is lazy.value and calls == [1]
    lazy.reset()
    assert not lazy.is_computed
    assert lazy.value == {3: "a", 5: "b"}
    assert calls == [1, 1]


def test_wrapper_itself_reads_as_the_mapping():
    # the failure seen elsewhere: the wrapper was handed to EPLB code that called .keys()
    lazy = LazyValue(lambda: {3: "a", 5: "b"})
    assert isinstance(lazy, Mapping)
    assert list(lazy.keys()) == [3, 5]
    assert lazy[5] == "b" and 3 in lazy and len(lazy) == 2
    assert dict(lazy.items()) == {3: "a", 5: "b"}


def test_non_mapping_value_says_so():
    lazy = LazyValue(lambda: [1, 2])
    assert lazy.value == [1, 2]
    with pytest.raises(TypeError, match="LazyValue holds a list, not a mapping"):
        list(lazy.keys())
