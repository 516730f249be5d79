"""DeepSeek EPLB: the reference's published example and outputs, and its building blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from epsim.eplb import compute_placement, deepseek_placement, rebalance_experts
from epsim.eplb.deepseek import balanced_packing, replicate_experts
from epsim.errors import PlacementError

# github.com/deepseek-ai/EPLB README: 2 layers, 12 experts, 16 replicas, 4 groups, 2 nodes, 8 GPUs
README_WEIGHT = np.array([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                          [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]])
README_PHY2LOG = np.array([[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                           [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]])
# log2phy and logcnt of the same call, printed by the reference eplb.py (torch 2.13, CPU)
README_LOG2PHY = np.array([
    [[12, -1], [15, 13], [11, -1], [6, -1], [7, 5], [0, 2], [1, -1], [3, -1], [4, -1], [9, -1],
     [8, 10], [14, -1]],
    [[13, -1], [15, 11], [8, -1], [14, -1], [9, -1], [10, 12], [2, 4], [0, -1], [6, 3], [7, -1],
     [1, -1], [5, -1]]])
README_LOGCNT = np.array([[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1],
                          [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]])


def test_reference_readme_example_exactly():
    phy2log, log2phy, logcnt = rebalance_experts(README_WEIGHT, 16, 4, 2, 8)
    np.testing.assert_array_equal(phy2log, README_PHY2LOG)
    np.testing.assert_array_equal(log2phy, README_LOG2PHY)
    np.testing.assert_array_equal(logcnt, README_LOGCNT)
    assert phy2log.dtype == log2phy.dtype == logcnt.dtype == np.int64


@pytest.mark.parametrize("args, phy2log, logcnt", [
    # 3 groups over 2 nodes -> the global policy; outputs of the reference eplb.py
    ((16, 3, 2, 8),
     [[10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1], [1, 10, 2, 4, 5, 11, 5, 0, 6, 7, 6, 3, 8, 8, 9, 7]],
     [[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1], [1, 1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1]]),
    ((24, 1, 1, 4),
     [[9, 10, 10, 1, 2, 8, 5, 4, 0, 1, 8, 3, 5, 4, 0, 11, 6, 7, 5, 10, 10, 1, 11, 3],
      [3, 1, 1, 2, 9, 11, 6, 8, 7, 2, 9, 0, 6, 8, 7, 5, 5, 4, 6, 8, 7, 5, 5, 10]],
     [[2, 3, 1, 2, 2, 3, 1, 1, 2, 1, 4, 2], [1, 2, 2, 1, 1, 4, 3, 3, 3, 2, 1, 1]]),
])
def test_matches_reference_outputs_of_the_global_policy(args, phy2log, logcnt):
    got_phy2log, log2phy, got_logcnt = rebalance_experts(README_WEIGHT, *args)
    np.testing.assert_array_equal(got_phy2log, phy2log)
    np.testing.assert_array_equal(got_logcnt, logcnt)
    # log2phy lists each expert's slots; the reference orders equal-load replicas by torch's
    # unstable sort, so compare the sets
    for layer, expert in itertools.product(range(2), range(12)):
        slots = log2phy[layer, expert][log2phy[layer, expert] >= 0]
        assert sorted(slots) == sorted(np.nonzero(got_phy2log[layer] == expert)[0])


def test_auto_policy_picks_hierarchical_iff_groups_divide_over_nodes():
    hierarchical = compute_placement("deepseek_hierarchical", README_WEIGHT, 16, 4, 2, 8)
    auto = compute_placement("deepseek", README_WEIGHT, 16, 4, 2, 8)
    np.testing.assert_array_equal(auto.physical_to_logical, hierarchical.physical_to_logical)
    global_ = compute_placement("deepseek_global", README_WEIGHT, 16, 3, 2, 8)
    np.testing.assert_array_equal(compute_placement("deepseek", README_WEIGHT, 16, 3, 2, 8).physical_to_logical,
                                  global_.physical_to_logical)
    # global ignores the groups: same answer whatever num_groups is
    np.testing.assert_array_equal(compute_placement("deepseek_global", README_WEIGHT, 16, 4, 2, 8)
                                  .physical_to_logical, global_.physical_to_logical)
    assert not np.array_equal(global_.physical_to_logical, hierarchical.physical_to_logical)


def test_hierarchical_keeps_each_group_inside_one_node():
    rng = np.random.default_rng(3)
    weight = rng.integers(0, 1000, (3, 32))
    placement = deepseek_placement(weight, 48, num_groups=8, num_nodes=4, num_gpus=8, policy="hierarchical")
    node_of_slot = placement.rank_of_slot() // placement.ranks_per_node
    for layer in range(3):
        group = placement.physical_to_logical[layer] // 4                      # 8 groups of 4
        for g in range(8):
            assert len(set(node_of_slot[group == g])) == 1


def test_hierarchical_policy_rejects_groups_not_dividing_over_nodes():
    with pytest.raises(PlacementError, match=r"num_groups \(3\) must be a multiple of num_nodes \(2\)"):
        compute_placement("deepseek_hierarchical", README_WEIGHT, 16, 3, 2, 8)


def test_balanced_packing_fills_every_pack_equally_heaviest_first():
    weight = np.array([[10.0, 9.0, 8.0, 7.0, 1.0, 1.0]], dtype=np.float32)
    pack, rank = balanced_packing(weight, 2)
    # greedy: 10->p0, 9->p1, 8->p1 (17), 7->p0 (17), 1->p0, 1->p1
    np.testing.assert_array_equal(pack, [[0, 1, 1, 0, 0, 1]])
    np.testing.assert_array_equal(rank, [[0, 0, 1, 1, 2, 2]])
    assert np.bincount(pack[0]).tolist() == [3, 3]


def test_replicate_experts_minimizes_the_largest_load_per_replica():
    rng = np.random.default_rng(0)
    for _ in range(20):
        weight = rng.integers(1, 100, (1, 5)).astype(np.float32)
        _, _, counts = replicate_experts(weight, 9)
        best = min(max(weight[0] / np.array(c)) for c in itertools.product(range(1, 6), repeat=5)
                   if sum(c) == 9)
        assert max(weight[0] / counts[0]) == pytest.approx(best)


def test_deterministic_and_float32_ties_break_by_index():
    weight = np.ones((2, 16))
    first = rebalance_experts(weight, 32, 4, 2, 8)
    second = rebalance_experts(weight.tolist(), 32, 4, 2, 8)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    # equal loads: every expert gets exactly two replicas
    assert (first[2] == 2).all()


def _packing_one_by_one(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """The greedy rule item by item, in plain Python (what `balanced_packing` vectorises)."""
    per_pack = weight.shape[1] // num_packs
    pack_index = np.full(weight.shape, -1)
    rank_in_pack = np.full(weight.shape, -1)
    for r, row in enumerate(weight):
        loads, counts = [0.0] * num_packs, [0] * num_packs
        for item in sorted(range(len(row)), key=lambda i: -row[i]):      # stable: ties by index
            pack = min((p for p in range(num_packs) if counts[p] < per_pack),
                       key=lambda p: (loads[p], p))
            pack_index[r, item], rank_in_pack[r, item] = pack, counts[pack]
            loads[pack] = float(np.float32(loads[pack]) + row[item])       # float32, as numpy adds
            counts[pack] += 1
    return pack_index, rank_in_pack


def test_balanced_packing_is_the_greedy_rule_item_by_item(rng):
    """Ties included (weights on a coarse grid), many rows at once."""
    for num_items, num_packs in ((12, 4), (32, 8), (64, 2)):
        weight = rng.integers(0, 6, (7, num_items)).astype(np.float32)
        pack, rank = balanced_packing(weight, num_packs)
        want_pack, want_rank = _packing_one_by_one(weight, num_packs)
        np.testing.assert_array_equal(pack, want_pack)
        np.testing.assert_array_equal(rank, want_rank)
