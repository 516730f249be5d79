"""Expert location maps, active-rank masks, the move plan and the re-placement of lost experts:
pure numpy, no process group."""

import numpy as np
import pytest

from epsim.eplb import Placement, plan_transfers
from live.eplb import (RELOAD, ExpertLocation, as_location, fill_lost, plan_moves,
                       rank_slots_to_physical)
from live.errors import LiveError

# 8 experts, 12 slots on 4 ranks (3 each); rank 3 holds only replicas of experts held elsewhere
P2L = np.array([[0, 1, 2, 3, 4, 5, 6, 7, 0, 7, 4, 1],
                [7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4]])


def test_maps_follow_the_slots():
    loc = ExpertLocation(P2L, 8, 4)
    assert loc.physical_to_logical.tolist() == P2L.tolist()
    assert loc.replicas_of(0, 0) == [0, 8] and loc.replicas_of(0, 2) == [2]
    l2p = loc.logical_to_all_physical
    assert l2p.shape == (2, 8, 2) and loc.logical_count[1].tolist() == [1, 1, 1, 1, 2, 2, 2, 2]
    for layer in range(2):
        for expert in range(8):
            slots = loc.replicas_of(layer, expert)
            assert all(P2L[layer, s] == expert for s in slots)


def test_static_dispatch_prefers_the_source_rank_and_skips_masked_ranks():
    loc = ExpertLocation(P2L, 8, 4)
    full = loc.dispatch_map()                                    # [layers, ranks, experts]
    assert full[0, 2, 0] == 8 and full[0, 0, 0] == 0             # each rank its own replica of 0
    masked = loc.with_active_ranks([1, 1, 1, 0])
    dispatch = masked.dispatch_map()
    assert dispatch.shape == (2, 4, 8)
    rank_of = np.arange(12) // 3
    assert (rank_of[dispatch[:, :3]] != 3).all()                 # nothing goes to rank 3
    for layer in range(2):
        for source in range(3):
            assert (P2L[layer, dispatch[layer, source]] == np.arange(8)).all()
    # random selection draws among active replicas only: expert 1's replica on rank 3 is gone
    assert masked.replicas_of(0, 1) == [1] and masked.logical_count[0, 1] == 1
    assert (masked.logical_to_physical[masked.logical_to_physical >= 0] < 9).all()


def test_mask_that_strands_an_expert_is_refused():
    stranded = P2L.copy()
    stranded[0, 5] = 0                        # expert 5 moves from rank 1 to rank 3 alone
    stranded[0, 11] = 5
    with pytest.raises(LiveError, match=r"logical expert 5 of layer 0 has no replica on the "
                                         r"active ranks \[0, 1, 2\]"):
        ExpertLocation(stranded, 8, 4, active_ranks=[1, 1, 1, 0])


@pytest.mark.parametrize("mask, match", [([1, 1, 1], r"active_ranks \(\[1, 1, 1\]\) must be 4 "
                                                      r"flags"),
                                         ([0, 0, 0, 0], r"must keep at least one rank"),
                                         ([1, 2, 1, 1], r"must be 4 flags \(0/1\)")])
def test_bad_masks(mask, match):
    with pytest.raises(LiveError, match=match):
        ExpertLocation(P2L, 8, 4, active_ranks=mask)


def test_with_rows_equals_a_fresh_location():
    a = ExpertLocation(P2L, 8, 4, active_ranks=[1, 1, 1, 0])
    other = P2L.copy()
    other[0, :3] = [2, 1, 0]
    b = a.with_physical_to_logical(other)
    mixed = a.with_rows(b, [0])
    fresh = ExpertLocation(other, 8, 4, active_ranks=[1, 1, 1, 0])
    assert np.array_equal(mixed.physical_to_logical, fresh.physical_to_logical)
    assert np.array_equal(mixed.dispatch_map(), fresh.dispatch_map())
    assert np.array_equal(mixed.logical_count, fresh.logical_count)
    width = fresh.logical_to_physical.shape[2]
    assert np.array_equal(mixed.logical_to_physical[:, :, :width], fresh.logical_to_physical)
    mixed.placement.validate()


def test_compact_and_expand_are_inverse():
    loc = ExpertLocation(P2L, 8, 4)
    active = [1, 0, 1, 1]
    compact = loc.compact(active)
    assert compact.shape == (2, 9)
    assert np.array_equal(loc.expand(compact, active), P2L)
    with pytest.raises(LiveError, match=r"survivor placement \(shape \[2, 8\]\) must be"):
        loc.expand(compact[:, :8], active)


def test_per_rank_form_and_its_errors():
    per_rank = {r: [P2L[layer, 3 * r:3 * r + 3].tolist() for layer in range(2)] for r in range(4)}
    assert np.array_equal(rank_slots_to_physical(per_rank, 2, 4), P2L)
    unequal = {**per_rank, 2: [row[:2] for row in per_rank[2]]}
    with pytest.raises(LiveError, match=r"rank 2 holds 2 slots in layer 0; every rank must hold "
                                        r"the same number \(rank 0 holds 3\)"):
        rank_slots_to_physical(unequal, 2, 4)
    with pytest.raises(LiveError, match=r"rank \(4\) must be in \[0, 4\)"):
        rank_slots_to_physical({**per_rank, 4: per_rank[0]}, 2, 4)
    missing = {r: v for r, v in per_rank.items() if r != 1}
    with pytest.raises(LiveError, match=r"rank 1 \(missing\) must be in the placement"):
        rank_slots_to_physical(missing, 2, 4)


def test_as_location_checks_gpu_count_and_dropped_experts():
    placement = Placement.from_physical_to_logical(P2L, 8, 2)
    with pytest.raises(LiveError, match=r"placement.num_gpus \(2\) must equal ep_size \(4\)"):
        as_location(placement, 2, 8, 4)
    dropped = P2L.copy()
    dropped[1][dropped[1] == 3] = 2
    with pytest.raises(LiveError, match=r"logical_count\[1, 3\] \(0\) must be >= 1"):
        as_location(dropped, 2, 8, 4)
    assert as_location(Placement.from_physical_to_logical(P2L, 8, 4), 2, 8, 4).ep_size == 4


def test_plan_prefers_local_copies_then_the_same_node():
    old = np.array([[0, 1, 2, 3, 4, 5, 6, 7]])          # 4 ranks x 2 slots, 2 ranks per node
    new = np.array([[1, 0, 2, 3, 4, 5, 2, 7]])          # swap on rank 0; expert 2 onto rank 3
    plan = plan_moves(old, new, 2, expert_bytes=10.0, gpus_per_node=2)
    moves = {m.dst_slot: m for m in plan.moves}
    assert moves[0].src_rank == 0 and moves[0].src_slot == 1       # local copies
    assert moves[1].src_rank == 0 and moves[1].src_slot == 0
    assert moves[6].src_rank == 1 and moves[6].src_slot == 2       # rank 1 holds 2 (other node)
    assert plan.num_local_copies == 2 and plan.bytes_by_pair()[1, 3] == 10.0
    assert plan.transfers_per_rank().tolist() == [0, 1, 0, 1]


def test_plan_bytes_per_rank_match_the_simulators_model(rng):
    """The live plan routes transfers by `epsim.eplb.plan_transfers`' rule: same bytes sent and
    received per rank and layer, on one node and across two."""
    for gpus_per_node in (4, 2):
        for _ in range(20):
            old, new = (np.stack([rng.permutation(np.r_[np.arange(8), rng.choice(8, 4)])
                                  for _ in range(3)]) for _ in range(2))
            plan = plan_moves(old, new, 3, 7.0, gpus_per_node=gpus_per_node)
            nodes = 4 // gpus_per_node
            model = plan_transfers(Placement.from_physical_to_logical(old, 8, 4, nodes),
                                   Placement.from_physical_to_logical(new, 8, 4, nodes), 7.0)
            send = np.zeros((3, 4))
            recv = np.zeros((3, 4))
            for move in plan.moves:
                if plan.is_transfer(move):
                    send[move.layer, move.src_rank] += 7.0
                    recv[move.layer, move.dst_slot // 3] += 7.0
            assert np.array_equal(send, model.send_nvlink_bytes + model.send_rdma_bytes)
            assert np.array_equal(recv, model.recv_nvlink_bytes + model.recv_rdma_bytes)
            assert np.array_equal(plan.changed_slots, model.changed_slots)
            assert plan.num_local_copies == model.local_copies.sum()


def test_plan_reloads_only_what_no_active_rank_holds():
    old = np.array([[0, 1, 2, 3, 4, 5, 6, 7]])
    new = np.array([[0, 6, 2, 7, 4, 5, 6, 7]])              # 6 and 7 onto ranks 0, 1
    with pytest.raises(LiveError, match=r"logical expert 6 of layer 0 has no readable copy on the "
                                        r"active ranks \[0, 1, 2\]; pass a weight source"):
        plan_moves(old, new, 2, 1.0, active_ranks=[1, 1, 1, 0])
    plan = plan_moves(old, new, 2, 1.0, active_ranks=[1, 1, 1, 0], allow_reload=True)
    assert [(m.dst_slot, m.src_rank) for m in plan.moves] == [(1, RELOAD), (3, RELOAD)]
    assert plan.reload_bytes_per_rank().tolist() == [1.0, 1.0, 0.0, 0.0]
    assert plan_moves(old, old, 2, 1.0).moves == ()


def test_fill_lost_takes_surplus_replicas_only():
    survivors = np.array([[0, 1, 2, 0, 1, 3, 2, 6, 7],        # 4 and 5 lost; 0, 1, 2 doubled
                          [0, 1, 2, 3, 4, 5, 6, 7, 7]])       # nothing lost
    filled, lost = fill_lost(survivors, 8)
    assert lost == {0: [4, 5]}
    assert np.array_equal(filled[1], survivors[1])
    assert sorted(filled[0].tolist()) == sorted([0, 1, 2, 3, 4, 5, 6, 7, 2])
    assert (filled[0] != survivors[0]).sum() == 2             # nothing else moved
    with pytest.raises(LiveError, match=r"the surviving slots \(6\) must hold every one of the 8 "
                                        r"experts"):
        fill_lost(survivors[:, :6], 8)
