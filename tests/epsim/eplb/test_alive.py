"""A placement's alive mask (elastic EP): live replicas, the static dispatch map over alive ranks,
rows mixed from another placement, the survivors' view and re-placing over it."""

import numpy as np
import pytest

from epsim.eplb import Placement, fill_lost, place_over_survivors, refill_survivors
from epsim.errors import PlacementError

# 8 experts, 12 slots on 4 ranks (3 each); rank 3 holds only replicas of experts held elsewhere
P2L = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 7, 4, 1],
                [7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4]])
MASK = [True, True, True, False]


def _placement(alive=None, p2l=P2L, num_nodes=1) -> Placement:
    return Placement.from_physical_to_logical(p2l, 8, 4, num_nodes, alive=alive).validate()


def test_live_replicas_leave_the_failed_rank_out():
    full, masked = _placement(), _placement(MASK)
    assert full.all_alive and full.alive is None and full.num_alive == 4
    assert not masked.all_alive and masked.num_alive == 3
    assert masked.logical_count[0, 1] == 2 and masked.live_counts()[0, 1] == 1     # rank 3's gone
    l2p = masked.live_logical_to_physical()
    assert l2p.shape == (2, 8, 2) and l2p[0, 1].tolist() == [1, -1] and l2p[0, 0].tolist() == [0, 8]
    assert (l2p[l2p >= 0] < 9).all()
    np.testing.assert_array_equal(full.live_logical_to_physical(), full.logical_to_physical)


def test_static_map_prefers_the_source_rank_and_skips_failed_ranks():
    full = _placement().static_dispatch_map()                     # [ranks, layers, experts]
    assert full[2, 0, 0] == 8 and full[0, 0, 0] == 0              # each rank its own replica of 0
    masked = _placement(MASK).static_dispatch_map()
    rank_of = np.arange(12) // 3
    assert (rank_of[masked] != 3).all()                           # nothing goes to rank 3
    for layer in range(2):
        for source in range(4):
            assert (P2L[layer, masked[source, layer]] == np.arange(8)).all()


def test_a_mask_that_strands_an_expert_is_refused_where_it_is_used():
    stranded = P2L.copy()
    stranded[0, 5], stranded[0, 11] = 0, 5                        # expert 5 only on rank 3
    placement = _placement(MASK, stranded)
    with pytest.raises(PlacementError, match=r"logical expert 5 of layer 0 has no replica on a "
                                             r"live rank"):
        placement.check_live()
    with pytest.raises(PlacementError, match=r"logical expert 5 of layer 0 has no replica"):
        placement.static_dispatch_map()


@pytest.mark.parametrize("mask, match", [([1, 1, 1], r"alive \(shape \[3\]\) must be \[ranks\] = \[4\]"),
                                         ([0, 0, 0, 0], r"alive \(no rank\) must keep at least one")])
def test_bad_masks(mask, match):
    with pytest.raises(PlacementError, match=match):
        _placement().with_alive(mask)


@pytest.mark.parametrize("mask", [None, MASK])
def test_with_rows_equals_a_fresh_placement(mask):
    a = _placement(mask)
    other = P2L.copy()
    other[0, :3] = [2, 1, 0]
    b = a.with_physical_to_logical(other)
    a.static_dispatch_map(), b.static_dispatch_map()              # cached, then mixed by rows
    mixed, fresh = a.with_rows(b, [0]), _placement(mask, other)
    np.testing.assert_array_equal(mixed.physical_to_logical, fresh.physical_to_logical)
    np.testing.assert_array_equal(mixed.static_dispatch_map(), fresh.static_dispatch_map())
    np.testing.assert_array_equal(mixed.live_counts(), fresh.live_counts())
    width = fresh.logical_to_physical.shape[2]
    np.testing.assert_array_equal(mixed.logical_to_physical[:, :, :width], fresh.logical_to_physical)
    mixed.validate()


def test_survivors_and_expand_are_inverse():
    masked = _placement([1, 0, 1, 1])
    survivors = masked.survivors()
    assert survivors.num_ranks == 3 and survivors.num_nodes == 1 and survivors.num_physical == 9
    np.testing.assert_array_equal(masked.expand(survivors).physical_to_logical, P2L)
    with pytest.raises(PlacementError, match=r"survivor placement \(shape \[2, 8\]\) must be"):
        masked.expand(survivors.physical_to_logical[:, :8])


def test_placing_over_survivors_keeps_the_failed_ranks_slots(rng):
    masked = _placement([1, 0, 1, 1])
    weight = rng.gamma(0.5, 100, (2, 8))
    new = place_over_survivors("deepseek", weight, masked)
    np.testing.assert_array_equal(new.physical_to_logical[:, 3:6], P2L[:, 3:6])
    np.testing.assert_array_equal(new.alive_mask, masked.alive_mask)
    new.check_live()
    everyone = place_over_survivors("deepseek", weight, _placement())
    assert everyone.all_alive and everyone.num_nodes == 1


def test_fill_lost_takes_surplus_replicas_only():
    survivors = np.array([[0, 1, 2, 0, 1, 3, 2, 6, 7],        # 4 and 5 lost; 0, 1, 2 doubled
                          [0, 1, 2, 3, 4, 5, 6, 7, 7]])       # nothing lost
    filled, lost = fill_lost(survivors, 8)
    assert lost == {0: [4, 5]}
    assert np.array_equal(filled[1], survivors[1])
    assert sorted(filled[0].tolist()) == sorted([0, 1, 2, 3, 4, 5, 6, 7, 2])
    assert (filled[0] != survivors[0]).sum() == 2             # nothing else moved
    with pytest.raises(PlacementError, match=r"the surviving slots \(6\) must hold every one of "
                                             r"the 8 experts"):
        fill_lost(survivors[:, :6], 8)
    stranded = P2L.copy()
    stranded[0, 5], stranded[0, 11] = 0, 5                    # expert 5 only on rank 3
    refilled, lost = refill_survivors(_placement(MASK, stranded))
    assert lost == {0: [5]} and refilled.check_live() is refilled
