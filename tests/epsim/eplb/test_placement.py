"""Placement: maps, loads per GPU under each replica selection, validation messages."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.eplb import Placement
from epsim.vocab import REPLICA_SELECTIONS as SELECTIONS
from epsim.errors import PlacementError


def test_contiguous_places_expert_blocks_in_order(tiny):
    placement = Placement.contiguous(tiny.num_layers, tiny.num_experts, tiny.num_ranks).validate()
    assert placement.slots_per_rank == 2 and placement.num_redundant == 0
    np.testing.assert_array_equal(placement.rank_of_slot(), [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(placement.logical_to_physical[:, :, 0],
                                  np.tile(np.arange(8), (2, 1)))
    weight = np.arange(16, dtype=float).reshape(2, 8)
    np.testing.assert_allclose(placement.rank_loads(weight), [[1, 5, 9, 13], [17, 21, 25, 29]])
    np.testing.assert_allclose(placement.balancedness(weight), [7 / 13, 23 / 29])


def test_replica_order_follows_slot_order_by_default():
    placement = Placement.from_physical_to_logical([[1, 0, 1, 2, 1, 0]], 3, num_ranks=3)
    np.testing.assert_array_equal(placement.logical_to_physical[0], [[1, 5, -1], [0, 2, 4], [3, -1, -1]])
    np.testing.assert_array_equal(placement.logical_count, [[2, 3, 1]])


@pytest.mark.parametrize("selection", SELECTIONS)
def test_gpu_loads_conserve_tokens(selection, rng):
    p2l = np.stack([rng.permutation(np.r_[np.arange(8), rng.integers(0, 8, 4)]) for _ in range(3)])
    placement = Placement.from_physical_to_logical(p2l, 8, num_ranks=4, num_nodes=2).validate()
    weight = rng.integers(0, 500, (3, 8)).astype(float)
    fractions = placement.replica_fractions(selection)
    summed = np.zeros((3, 8))
    np.add.at(summed, (np.arange(3)[:, None].repeat(12, 1), p2l), fractions)
    np.testing.assert_allclose(summed, 1.0)
    np.testing.assert_allclose(placement.rank_loads(weight, selection).sum(axis=1), weight.sum(axis=1))


def test_random_splits_evenly_and_static_prefers_the_nearest_replica():
    # expert 0 has replicas on GPU 0 (node 0) and GPU 2 (node 1); 4 GPUs, 2 per node
    p2l = [[0, 1, 2, 3, 0, 4, 5, 6]]
    placement = Placement.from_physical_to_logical(p2l, 7, num_ranks=4, num_nodes=2)
    weight = np.array([[400.0, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_allclose(placement.rank_loads(weight, "random"), [[200, 0, 200, 0]])
    np.testing.assert_allclose(placement.rank_loads(weight, "round_robin"), [[200, 0, 200, 0]])
    # static: GPUs 0 and 1 use the node-0 replica, GPUs 2 and 3 the node-1 one
    np.testing.assert_allclose(placement.rank_loads(weight, "static"), [[200, 0, 200, 0]])
    # both replicas in node 0 (GPUs 0 and 1): GPU 0 and 1 use their own; node 1's GPUs split
    placement = Placement.from_physical_to_logical([[0, 1, 0, 2, 3, 4, 5, 6]], 7, num_ranks=4, num_nodes=2)
    np.testing.assert_allclose(placement.rank_loads(weight, "static"), [[200, 200, 0, 0]])
    # three replicas on GPUs 0, 1 (node 0) and 2 (node 1): GPU 3 uses its node's replica on GPU 2
    placement = Placement.from_physical_to_logical([[0, 1, 0, 2, 0, 3, 4, 5]], 6, num_ranks=4, num_nodes=2)
    weight = np.array([[400.0, 0, 0, 0, 0, 0]])
    np.testing.assert_allclose(placement.rank_loads(weight, "static"), [[100, 100, 200, 0]])
    np.testing.assert_allclose(placement.rank_loads(weight, "random"), [[400 / 3, 400 / 3, 400 / 3, 0]])


def test_dict_round_trip_and_changed_slots():
    placement = Placement.from_physical_to_logical([[0, 1, 2, 3, 0, 1]], 4, num_ranks=3)
    again = Placement.from_dict(placement.to_dict())
    np.testing.assert_array_equal(again.physical_to_logical, placement.physical_to_logical)
    assert (again.num_ranks, again.num_nodes) == (3, 1)
    moved = Placement.from_physical_to_logical([[0, 1, 2, 3, 1, 0]], 4, num_ranks=3)
    assert moved.changed_slots(placement).tolist() == [2]
    with pytest.raises(PlacementError, match=r"previous placement \(shape \[1, 4\]\) must have"):
        moved.changed_slots(Placement.contiguous(1, 4, 2))


def test_arrays_are_read_only():
    placement = Placement.contiguous(1, 4, 2)
    with pytest.raises(ValueError):
        placement.physical_to_logical[0, 0] = 3


@pytest.mark.parametrize("build, message", [
    (lambda: Placement.from_physical_to_logical([[0, 1, 1, 1]], 3, num_ranks=2),
     r"logical_count\[0, 2\] \(0\) must be >= 1"),
    (lambda: Placement.from_physical_to_logical([[0, 1, 2]], 3, num_ranks=2),
     r"num_ranks \(2\) must be > 0 and divide the physical slots \(3\)"),
    (lambda: Placement.from_physical_to_logical([[0, 1, 2, 3]], 4, num_ranks=4, num_nodes=3),
     r"num_nodes \(3\) must be > 0 and divide num_ranks \(4\)"),
    (lambda: Placement.from_physical_to_logical([[0, 5]], 2, num_ranks=1),
     r"physical_to_logical\[0, 1\] \(5\) must be in \[0, 2\)"),
    (lambda: Placement(np.array([[0, 1]]), np.array([[[0], [1]]]), np.array([[1, 2]]), 1),
     r"logical_count\[0, 1\] \(2\) must equal the slots holding it \(1\)"),
    (lambda: Placement(np.array([[0, 1]]), np.array([[[1], [0]]]), np.array([[1, 1]]), 1),
     r"logical_to_physical must point at slots whose physical_to_logical is that expert"),
])
def test_validate_names_the_broken_invariant(build, message):
    with pytest.raises(PlacementError, match=message):
        build().validate()


def test_bad_weight_and_selection_are_rejected():
    placement = Placement.contiguous(2, 4, 2)
    with pytest.raises(PlacementError, match=r"weight \(shape \[2, 3\]\) must be \[layers, logical\] = \[2, 4\]"):
        placement.rank_loads(np.ones((2, 3)))
    with pytest.raises(PlacementError, match=r"selection \('nearest'\) must be one of"):
        placement.rank_loads(np.ones((2, 4)), "nearest")


def test_from_dict_rejects_malformed_input():
    with pytest.raises(PlacementError, match=r"prev.json: phy2log \(missing\)"):
        Placement.from_dict({"maps": []}, where="prev.json")
    with pytest.raises(PlacementError, match=r"num_gpus \('2'\) must be a positive integer"):
        Placement.from_dict({"phy2log": [[0, 1]], "num_gpus": "2"})
    with pytest.raises(PlacementError, match=r"phy2log must be a rectangular"):
        Placement.from_dict({"phy2log": [[0, 1], [0]], "num_gpus": 1})
