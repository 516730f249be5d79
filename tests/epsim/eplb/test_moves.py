"""The one transfer rule of a rebalance (`epsim.eplb.plan_moves`): local copies first, then the
same node, then the least-loaded sender; reloads only for what no alive rank holds."""

import numpy as np
import pytest

from epsim.eplb import RELOAD, Placement, plan_moves
from epsim.errors import PlacementError


def _placement(rows, num_nodes=2, alive=None):
    rows = np.asarray(rows)
    return Placement.from_physical_to_logical(rows, 8, 4, num_nodes, alive=alive)


def test_plan_prefers_local_copies_then_the_same_node():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]])          # 4 ranks x 2 slots, 2 ranks per node
    new = _placement([[1, 0, 2, 3, 4, 5, 2, 7]])          # swap on rank 0; expert 2 onto rank 3
    plan = plan_moves(old, new, expert_bytes=10.0)
    moves = {m.dst_slot: m for m in plan.moves}
    assert moves[0].src_rank == 0 and moves[0].src_slot == 1       # local copies
    assert moves[1].src_rank == 0 and moves[1].src_slot == 0
    assert moves[6].src_rank == 1 and moves[6].src_slot == 2       # rank 1 holds 2 (other node)
    assert plan.num_local_copies == 2 and plan.bytes_by_pair()[1, 3] == 10.0
    assert plan.transfers_per_rank().tolist() == [0, 1, 0, 1]
    links = plan.link_tallies()
    assert links["send_rdma_bytes"][0].tolist() == [0, 10.0, 0, 0] and links["send_nvlink_bytes"].sum() == 0


def test_tallies_agree_with_the_moves(rng):
    for num_nodes in (1, 2):
        for _ in range(10):
            old, new = (_placement(np.stack([rng.permutation(np.r_[np.arange(8), rng.choice(8, 4)])
                                             for _ in range(3)]), num_nodes) for _ in range(2))
            plan = plan_moves(old, new, expert_bytes=7.0)
            links = plan.link_tallies()
            send = links["send_nvlink_bytes"] + links["send_rdma_bytes"]       # [layers, ranks]
            np.testing.assert_array_equal(send.sum(axis=0), plan.bytes_by_pair().sum(axis=1))
            np.testing.assert_array_equal((links["nvlink_transfers"] + links["rdma_transfers"]).sum(axis=0),
                                          plan.transfers_per_rank())
            np.testing.assert_array_equal(plan.changed_slots, new.changed_slots(old))
            if num_nodes == 1:
                assert links["send_rdma_bytes"].sum() == 0


def test_plan_reloads_only_what_no_alive_rank_holds():
    alive = [True, True, True, False]
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]], alive=alive)
    new = _placement([[0, 6, 2, 7, 4, 5, 6, 7]], alive=alive)   # 6 and 7 onto ranks 0, 1
    with pytest.raises(PlacementError, match=r"logical expert 6 of layer 0 has no readable copy on "
                                             r"the alive ranks \[0, 1, 2\]; pass a weight source"):
        plan_moves(old, new)
    plan = plan_moves(old, new, allow_reload=True)
    assert [(m.dst_slot, m.src_rank) for m in plan.moves] == [(1, RELOAD), (3, RELOAD)]
    assert plan.reload_bytes_per_rank().tolist() == [1.0, 1.0, 0.0, 0.0]
    assert plan_moves(old, old).moves == ()
    assert plan.summary()["reloads"] == 2 and plan.summary()["link_bytes"] == 0


def test_only_some_layers():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]] * 2)
    new = _placement([[1, 0, 2, 3, 4, 5, 6, 7]] * 2)
    assert {m.layer for m in plan_moves(old, new, layers=[1]).moves} == {1}


def _rule_one_slot_at_a_time(old, new, alive, allow_reload):
    """The transfer rule written out slot by slot (the module docstring), as the oracle the
    vectorised `plan_moves` must reproduce exactly: [(layer, dst_slot, expert, src_rank, src_slot)]."""
    rank_of, node_of = new.rank_of_slot(), new.node_of_rank()
    readable = alive[rank_of]
    out = []
    for layer in range(new.num_layers):
        holders = {}                                                   # expert -> {rank: lowest slot}
        for slot in np.flatnonzero(readable)[::-1]:
            holders.setdefault(int(old.physical_to_logical[layer, slot]), {})[int(rank_of[slot])] = int(slot)
        sent = np.zeros(new.num_ranks)
        changed = readable & (old.physical_to_logical[layer] != new.physical_to_logical[layer])
        for slot in np.flatnonzero(changed):
            dst, expert = int(rank_of[slot]), int(new.physical_to_logical[layer, slot])
            sources = holders.get(expert, {})
            if dst in sources:
                src = dst
            elif sources:
                near = [r for r in sources if node_of[r] == node_of[dst]]
                src = min(near or sources, key=lambda r: (sent[r], r))
                sent[src] += 1
            else:
                assert allow_reload
                out.append((layer, int(slot), expert, RELOAD, -1))
                continue
            out.append((layer, int(slot), expert, src, sources[src]))
    return out


@pytest.mark.parametrize("num_ranks, slots_per_rank, num_experts, num_nodes",
                         [(8, 3, 16, 1), (8, 3, 16, 2), (8, 3, 16, 4),
                          (64, 2, 96, 8),      # holders in one 64-bit word, its top bit used
                          (72, 2, 100, 9)])    # holders in two words
def test_vectorised_plan_matches_the_rule_slot_by_slot(rng, num_ranks, slots_per_rank,
                                                       num_experts, num_nodes):
    num_layers = 6
    for trial in range(15):
        alive = np.ones(num_ranks, dtype=bool)
        if trial % 3 == 2:
            alive[rng.choice(num_ranks, 2, replace=False)] = False
        rows = [np.stack([rng.permutation(np.r_[np.arange(num_experts),
                                                rng.choice(num_experts, num_ranks * slots_per_rank - num_experts)])
                          for _ in range(num_layers)]) for _ in range(2)]
        old, new = (Placement.from_physical_to_logical(r, num_experts, num_ranks, num_nodes) for r in rows)
        plan = plan_moves(old, new, alive, allow_reload=True)
        want = _rule_one_slot_at_a_time(old, new, alive, True)
        got = [(m.layer, m.dst_slot, m.expert, m.src_rank, m.src_slot) for m in plan.moves]
        assert got == want
