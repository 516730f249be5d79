"""ExpertPlacement: maps, the static replica choice, and clear errors for bad placements."""

import numpy as np
import pytest

from live.errors import LiveError
from live.placement import ExpertPlacement


def test_identity_holds_consecutive_experts(tiny):
    placement = ExpertPlacement.identity(tiny.num_layers, tiny.num_experts, tiny.num_ranks)
    assert placement.slots_per_rank == 2
    np.testing.assert_array_equal(placement.local_logical(1), [[2, 3], [2, 3]])
    assert (placement.logical_count == 1).all()
    # without redundancy the replica choice is the expert's one slot from every source rank
    np.testing.assert_array_equal(placement.dispatch_map()[0],
                                  np.tile(np.arange(tiny.num_experts), (tiny.num_ranks, 1)))


def test_static_choice_prefers_own_replica_else_spreads_sources():
    # 4 experts + 4 redundant over 4 ranks (2 slots each); expert 0 on ranks 0, 1 and 3
    p2l = np.array([[0, 1, 0, 2, 3, 1, 0, 2]])
    placement = ExpertPlacement(p2l, num_experts=4, ep_size=4)
    np.testing.assert_array_equal(placement.logical_to_physical[0, 0], [0, 2, 6])
    np.testing.assert_array_equal(placement.logical_count[0], [3, 2, 2, 1])
    choice = placement.dispatch_map()[0]                         # [ranks, experts]
    assert choice[0, 0] == 0 and choice[1, 0] == 2 and choice[3, 0] == 6    # own replica
    assert choice[2, 0] == [0, 2, 6][2 % 3]                      # rank 2 holds none: r % count
    assert choice[0, 1] == [1, 5][0] and choice[2, 1] == 5      # expert 1 lives on ranks 0 and 2
    assert choice[1, 1] == [1, 5][1 % 2] and choice[3, 1] == [1, 5][3 % 2]
    # every choice is a slot holding that expert
    assert (p2l[0][choice] == np.arange(4)[None, :]).all()


def test_from_any_reads_an_epsim_placement():
    eplb = pytest.importorskip("epsim.eplb.placement", reason="epsim.eplb is not in this tree")
    p2l = np.array([[0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 3, 2]])
    other = eplb.Placement.from_physical_to_logical(p2l, num_logical=4, num_gpus=2)
    placement = ExpertPlacement.from_any(other, num_layers=2, num_experts=4, ep_size=2)
    np.testing.assert_array_equal(placement.physical_to_logical, p2l)
    with pytest.raises(LiveError, match=r"placement.num_gpus \(2\) must equal ep_size \(3\)"):
        ExpertPlacement.from_any(other, num_layers=2, num_experts=4, ep_size=3)


@pytest.mark.parametrize("p2l, experts, ep_size, message", [
    (np.tile(np.arange(6), (2, 1)), 6, 4,
     r"physical experts \(6 = 6 logical \+ 0 redundant\) must be divisible by ep_size \(4\)"),
    (np.array([[0, 1, 2, 9]]), 4, 2, r"physical_to_logical\[0, 3\] \(9\) must be in \[0, 4\)"),
    (np.array([[0, 1, 1, 0]]), 4, 2,
     r"logical_count\[0, 2\] \(0\) must be >= 1; every logical expert needs a replica"),
    (np.array([0, 1, 2, 3]), 4, 2, r"physical_to_logical \(shape \[4\]\) must be a \[layers, physical\]"),
    (np.array([[0.0, 1.0]]), 2, 1, r"physical_to_logical \(dtype float64\) must hold integer"),
])
def test_bad_placement_names_the_problem(p2l, experts, ep_size, message):
    with pytest.raises(LiveError, match=message):
        ExpertPlacement(p2l, experts, ep_size)


def test_placement_rows_must_match_model_layers():
    with pytest.raises(LiveError, match=r"physical_to_logical has 3 rows; it must have one per "
                                        r"model layer \(num_layers=2\)"):
        ExpertPlacement.from_any(np.tile(np.arange(4), (3, 1)), num_layers=2, num_experts=4,
                                 ep_size=2)
