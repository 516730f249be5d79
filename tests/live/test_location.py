"""live.location: the placement forms a user may pass, and the tensors a block dispatches with
(the maps themselves are `epsim.eplb`'s, tested there)."""

import numpy as np
import pytest
import torch

from epsim.eplb import Placement
from live.errors import LiveError
from live.location import ExpertLocation, as_placement, rank_slots_to_physical

# 8 experts, 12 slots on 4 ranks (3 each); rank 3 holds only replicas of experts held elsewhere
P2L = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 7, 4, 1],
                [7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4]])


def test_identity_holds_consecutive_experts(tiny):
    placement = as_placement(None, tiny.num_layers, tiny.num_experts, tiny.num_ranks)
    assert placement.slots_per_rank == 2
    np.testing.assert_array_equal(placement.local_slots(1), [[2, 3], [2, 3]])
    loc = ExpertLocation.build(placement, layer=0, rank=1)
    assert loc.local_logical.tolist() == [2, 3] and (loc.replica_count == 1).all()
    # without redundancy the replica choice is the expert's one slot from every source rank
    assert loc.slot_of_expert.tolist() == list(range(tiny.num_experts))


def test_static_choice_prefers_own_replica_else_spreads_sources():
    # 4 experts + 4 redundant over 4 ranks (2 slots each); expert 0 on ranks 0, 1 and 3
    p2l = np.array([[0, 1, 0, 2, 3, 1, 0, 2]])
    placement = as_placement(p2l, 1, 4, 4)
    choice = np.stack([ExpertLocation.build(placement, 0, r).slot_of_expert.numpy()
                       for r in range(4)])                         # [ranks, experts]
    assert choice[0, 0] == 0 and choice[1, 0] == 2 and choice[3, 0] == 6    # own replica
    assert choice[2, 0] == [0, 2, 6][2 % 3]                      # rank 2 holds none: r % count
    assert choice[0, 1] == [1, 5][0] and choice[2, 1] == 5      # expert 1 lives on ranks 0 and 2
    assert (p2l[0][choice] == np.arange(4)[None, :]).all()


def test_tensors_of_a_masked_placement_hold_alive_replicas_only():
    placement = as_placement(P2L, 2, 8, 4, alive=[1, 1, 1, 0])
    loc = ExpertLocation.build(placement, 0, 0, torch.device("cpu"))
    assert loc.replica_count[1].item() == 1 and loc.replicas[1, 0].item() == 1
    assert (loc.slot_of_expert // 3 != 3).all()
    stranded = P2L.copy()
    stranded[0, 5], stranded[0, 11] = 0, 5
    with pytest.raises(LiveError, match=r"logical expert 5 of layer 0 has no replica on a live "
                                        r"rank.*live.eplb.elastic.mask_ranks"):
        ExpertLocation.build(as_placement(stranded, 2, 8, 4, alive=[1, 1, 1, 0]), 0, 0)


def test_reads_an_epsim_placement_and_checks_its_ranks():
    p2l = np.array([[0, 1, 2, 3, 0, 1], [3, 2, 1, 0, 3, 2]])
    other = Placement.from_physical_to_logical(p2l, num_logical=4, num_ranks=2)
    assert as_placement(other, num_layers=2, num_experts=4, num_ranks=2) is other
    with pytest.raises(LiveError, match=r"placement.num_ranks \(2\) must equal the EP ranks \(3\)"):
        as_placement(other, num_layers=2, num_experts=4, num_ranks=3)


@pytest.mark.parametrize("p2l, experts, ranks, message", [
    (np.tile(np.arange(6), (2, 1)), 6, 4,
     r"physical experts \(6 = 6 logical \+ 0 redundant\) must be divisible by the EP ranks \(4\)"),
    (np.array([[0, 1, 2, 9]]), 4, 2, r"physical_to_logical\[0, 3\] \(9\) must be in \[0, 4\)"),
    (np.array([[0, 1, 1, 0]]), 4, 2,
     r"logical_count\[0, 2\] \(0\) must be >= 1; every logical expert needs a replica"),
    (np.array([0, 1, 2, 3]), 4, 2, r"physical_to_logical \(shape \[4\]\) must be a \[layers, physical\]"),
    (np.array([[0.0, 1.0]]), 2, 1, r"physical_to_logical \(dtype float64\) must hold integer"),
])
def test_bad_placement_names_the_problem(p2l, experts, ranks, message):
    with pytest.raises(LiveError, match=message):
        as_placement(p2l, p2l.shape[0] if p2l.ndim == 2 else 1, experts, ranks)


def test_placement_rows_must_match_model_layers():
    with pytest.raises(LiveError, match=r"physical_to_logical has 3 rows; it must have one per "
                                        r"model layer \(num_layers=2\)"):
        as_placement(np.tile(np.arange(4), (3, 1)), num_layers=2, num_experts=4, num_ranks=2)


def test_per_rank_form_and_its_errors():
    per_rank = {r: [P2L[layer, 3 * r:3 * r + 3].tolist() for layer in range(2)] for r in range(4)}
    assert np.array_equal(rank_slots_to_physical(per_rank, 2, 4), P2L)
    assert np.array_equal(as_placement(per_rank, 2, 8, 4).physical_to_logical, P2L)
    unequal = {**per_rank, 2: [row[:2] for row in per_rank[2]]}
    with pytest.raises(LiveError, match=r"rank 2 holds 2 slots in layer 0; every rank must hold "
                                        r"the same number \(rank 0 holds 3\)"):
        rank_slots_to_physical(unequal, 2, 4)
    with pytest.raises(LiveError, match=r"rank \(4\) must be in \[0, 4\)"):
        rank_slots_to_physical({**per_rank, 4: per_rank[0]}, 2, 4)
    missing = {r: v for r, v in per_rank.items() if r != 1}
    with pytest.raises(LiveError, match=r"rank 1 \(missing\) must be in the placement"):
        rank_slots_to_physical(missing, 2, 4)
