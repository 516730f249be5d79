"""Invariants of every registered algorithm on random load matrices (hypothesis)."""

from __future__ import annotations

from typing import get_args

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epsim.eplb import ALGORITHMS, Placement, compute_placement
from epsim.spec.deployment import EPLBAlgorithm

# (logical experts, groups, nodes, GPUs, redundant slots): small shapes of every policy
SHAPES = [(8, 2, 1, 4, 0), (8, 4, 2, 4, 4), (12, 4, 2, 8, 4), (12, 3, 2, 4, 8), (16, 4, 4, 8, 16),
          (16, 1, 2, 4, 8), (6, 1, 1, 3, 3), (32, 8, 2, 8, 8)]


@st.composite
def cases(draw):
    num_logical, num_groups, num_nodes, num_gpus, num_redundant = draw(st.sampled_from(SHAPES))
    num_layers = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["int", "float", "sparse"]))
    shape = (num_layers, num_logical)
    if kind == "int":  # small integers: many ties
        values = st.integers(0, 5)
    elif kind == "float":
        values = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
    else:              # mostly zero: a few hot experts, idle layers possible
        values = st.sampled_from([0.0, 0.0, 0.0, 1.0, 250.0])
    flat = draw(st.lists(values, min_size=num_layers * num_logical, max_size=num_layers * num_logical))
    weight = np.asarray(flat, dtype=np.float64).reshape(shape)
    return weight, num_logical + num_redundant, num_groups, num_nodes, num_gpus


def _check_invariants(placement: Placement, weight: np.ndarray, num_replicas: int, num_gpus: int):
    placement.validate()
    num_layers, num_logical = weight.shape
    p2l, l2p, counts = placement.as_tuple()
    assert p2l.shape == (num_layers, num_replicas)
    assert (counts >= 1).all()                                          # every expert placed
    assert num_replicas % num_gpus == 0 and placement.slots_per_rank * num_gpus == num_replicas
    for layer in range(num_layers):
        np.testing.assert_array_equal(np.bincount(p2l[layer], minlength=num_logical), counts[layer])
        for expert in range(num_logical):
            slots = l2p[layer, expert][: counts[layer, expert]]
            assert (l2p[layer, expert][counts[layer, expert]:] == -1).all()
            assert (p2l[layer, slots] == expert).all()
    for selection in ("static", "random"):
        np.testing.assert_allclose(placement.rank_loads(weight, selection).sum(axis=1), weight.sum(axis=1),
                                   rtol=1e-9, atol=1e-9)


def test_registry_names_are_the_spec_literals():
    assert set(ALGORITHMS) == set(get_args(EPLBAlgorithm))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), algorithm=st.sampled_from(["deepseek", "deepseek_global", "sticky"]))
def test_invariants_and_determinism(case, algorithm):
    weight, num_replicas, num_groups, num_nodes, num_gpus = case
    first = compute_placement(algorithm, weight, num_replicas, num_groups, num_nodes, num_gpus)
    _check_invariants(first, weight, num_replicas, num_gpus)
    again = compute_placement(algorithm, weight.copy(), num_replicas, num_groups, num_nodes, num_gpus)
    for a, b in zip(first.as_tuple(), again.as_tuple()):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), seed=st.integers(0, 2**16))
def test_sticky_is_never_less_balanced_than_deepseek_global(case, seed):
    weight, num_replicas, num_groups, num_nodes, num_gpus = case
    # previous placement: sticky's own on perturbed loads
    rng = np.random.default_rng(seed)
    earlier = weight * rng.uniform(0.5, 1.5, weight.shape)
    previous = compute_placement("sticky", earlier, num_replicas, num_groups, num_nodes, num_gpus)
    reference = compute_placement("deepseek_global", weight, num_replicas, num_groups, num_nodes, num_gpus)
    for prev in (None, previous):
        sticky = compute_placement("sticky", weight, num_replicas, num_groups, num_nodes, num_gpus, previous=prev)
        _check_invariants(sticky, weight, num_replicas, num_gpus)
        assert (sticky.rank_loads(weight).max(axis=1)
                <= reference.rank_loads(weight).max(axis=1) * (1 + 1e-9) + 1e-9).all()
    # unchanged loads and a previous placement from them: nothing moves
    same = compute_placement("sticky", weight, num_replicas, num_groups, num_nodes, num_gpus, previous=reference)
    again = compute_placement("sticky", weight, num_replicas, num_groups, num_nodes, num_gpus, previous=same)
    assert again.changed_slots(same).sum() == 0
