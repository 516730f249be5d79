"""Rebalance cost: routing of weight moves (`plan_moves`), per-link time with the slowest rank,
chunks."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.eplb import (Placement, plan_moves, rebalance_cost, rebalance_params,
                        sticky_placement)
from epsim.errors import PlacementError
from epsim.profile import Component, Profile
from epsim.spec.hardware import ClusterSpec

MB = 1e6
# round numbers so the expected times are easy to check by hand
PARAMS = {"base_us": 100.0, "per_layer_us": 10.0, "nvlink_gbps": 100.0, "rdma_gbps": 10.0,
          "nvlink_latency_us": 5.0, "rdma_latency_us": 20.0, "deepseek_us_per_slot": 1.0}


def _placement(rows, num_ranks=4, num_nodes=2, num_logical=None):
    rows = np.asarray(rows)
    return Placement.from_physical_to_logical(rows, num_logical or int(rows.max()) + 1, num_ranks, num_nodes)


def test_no_change_costs_only_the_fixed_parts():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]] * 3)
    cost = rebalance_cost(old, old, 10 * MB, PARAMS, algorithm="deepseek")
    assert cost.changed_slots == 0 and cost.moved_bytes == 0
    assert cost.algorithm_us == 1.0 * 3 * 8
    np.testing.assert_allclose(cost.chunk_us, [30.0])                       # 3 layers x 10 µs
    assert cost.stall_us == pytest.approx(24 + 100 + 30)


def test_swap_inside_a_node_goes_over_nvlink():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]])
    new = _placement([[2, 1, 0, 3, 4, 5, 6, 7]])          # GPUs 0 and 1 (node 0) swap experts
    plan = plan_moves(old, new, expert_bytes=10 * MB)
    assert plan.changed_slots.tolist() == [2] and plan.moved_bytes == 20 * MB
    links = plan.link_tallies()
    np.testing.assert_allclose(links["send_nvlink_bytes"], [[10 * MB, 10 * MB, 0, 0]])
    np.testing.assert_allclose(links["recv_nvlink_bytes"], [[10 * MB, 10 * MB, 0, 0]])
    assert links["send_rdma_bytes"].sum() == 0
    np.testing.assert_array_equal(links["nvlink_transfers"], [[2, 2, 0, 0]])
    cost = rebalance_cost(old, new, 10 * MB, PARAMS, algorithm=None)
    # each of GPUs 0, 1: 10 MB / (100 GB/s = 1e5 bytes/µs) = 100 µs + 2 transfers x 5 µs
    np.testing.assert_allclose(cost.chunk_us, [10 + 100 + 10])


def test_swap_across_nodes_goes_over_rdma():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]])
    new = _placement([[4, 1, 2, 3, 0, 5, 6, 7]])          # GPU 0 (node 0) <-> GPU 2 (node 1)
    cost = rebalance_cost(old, new, 10 * MB, PARAMS, algorithm=None)
    assert cost.rdma_bytes == 20 * MB and cost.nvlink_bytes == 0
    # 10 MB / (10 GB/s = 1e4 bytes/µs) = 1000 µs + 2 transfers x 20 µs
    np.testing.assert_allclose(cost.chunk_us, [10 + 1000 + 40])


def test_a_replica_already_on_the_gpu_is_a_local_copy_and_same_node_source_wins():
    old = _placement([[0, 1, 2, 3, 4, 5, 0, 6]], num_logical=7)    # expert 0 on GPUs 0 and 3
    new = _placement([[1, 0, 2, 3, 4, 5, 0, 6]], num_logical=7)    # GPU 0 swaps its own slots
    plan = plan_moves(old, new, expert_bytes=MB)
    assert plan.local_copies.tolist() == [2] and plan.link_tallies()["send_nvlink_bytes"].sum() == 0
    new = _placement([[0, 1, 0, 3, 4, 5, 0, 6]], num_logical=7)    # GPU 1 wants expert 0
    plan = plan_moves(old, new, expert_bytes=MB)
    np.testing.assert_allclose(plan.link_tallies()["send_nvlink_bytes"], [[MB, 0, 0, 0]])   # from GPU 0, same node
    new = _placement([[0, 1, 2, 3, 0, 5, 0, 6]], num_logical=7)    # GPU 2 (node 1) wants it
    plan = plan_moves(old, new, expert_bytes=MB)
    np.testing.assert_allclose(plan.link_tallies()["send_nvlink_bytes"], [[0, 0, 0, MB]])   # from GPU 3, same node


def test_chunks_split_layers_and_the_slowest_rank_sets_each_chunk():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]] * 4)
    rows = old.physical_to_logical.copy()
    rows[0] = [2, 3, 0, 1, 4, 5, 6, 7]            # GPUs 0 <-> 1 swap both experts (20 MB each way)
    rows[1] = [0, 1, 2, 3, 6, 5, 4, 7]            # GPUs 2 <-> 3 swap one (10 MB); layers 2-3 stay
    new = _placement(rows)
    cost = rebalance_cost(old, new, 10 * MB, PARAMS, algorithm=None, layers_per_chunk=2,
                          stop_the_world=False)
    assert cost.num_chunks == 2 and cost.layers_per_chunk == 2
    # chunk 0: GPUs 0, 1 take 20 MB / 1e5 bytes/µs + 4 x 5 µs = 220 µs, GPUs 2, 3 only 110 µs;
    # the slowest rank sets the chunk's time, the others' do not add
    np.testing.assert_allclose(cost.chunk_us, [2 * 10 + 220, 2 * 10])
    assert cost.chunk_slowest_rank.tolist() == [0, 0]
    np.testing.assert_allclose(cost.step_us, [100 + 240, 20])                # base on step 0
    assert cost.step_us.sum() == pytest.approx(cost.stall_us) and cost.stall_us == pytest.approx(360)
    assert cost.spare_buffer_bytes == 2 * 2 * 10 * MB                        # 2 layers x 2 slots
    whole = rebalance_cost(old, new, 10 * MB, PARAMS, algorithm=None)
    assert whole.num_chunks == 1 and whole.spare_buffer_bytes == 4 * 2 * 10 * MB
    assert whole.stall_us == pytest.approx(100 + 4 * 10 + 220)


def test_sticky_rebalance_moves_fewer_bytes_than_a_fresh_one(rng):
    weight = rng.gamma(0.5, 1000, (4, 32))
    later = weight * rng.uniform(0.8, 1.25, weight.shape)
    old = sticky_placement(weight, 40, 1, 2, 8)
    fresh = sticky_placement(later, 40, 1, 2, 8)
    kept = sticky_placement(later, 40, 1, 2, 8, previous=old)
    params = rebalance_params()
    assert (rebalance_cost(old, kept, 1e8, params, "sticky").moved_bytes
            < rebalance_cost(old, fresh, 1e8, params, "sticky").moved_bytes)


def test_params_come_from_the_cluster_then_the_profile():
    params = rebalance_params()
    assert params["nvlink_gbps"] == 450 and params["rdma_gbps"] == 50     # H200 datasheet
    assert rebalance_params(cluster=ClusterSpec(rdma_gbps=25))["rdma_gbps"] == 25
    profile = Profile(hardware="H200", components={
        "any/rebalance": Component(params={"base_us": 1234.0, "nvlink_gbps": 300.0})})
    params = rebalance_params(profile)
    assert params["base_us"] == 1234.0 and params["nvlink_gbps"] == 300.0
    assert params["per_layer_us"] == 20.0                                   # default kept


def test_bad_inputs_are_rejected():
    old = _placement([[0, 1, 2, 3, 4, 5, 6, 7]])
    with pytest.raises(PlacementError, match=r"expert_bytes \(0\) must be > 0"):
        plan_moves(old, old, expert_bytes=0)
    with pytest.raises(PlacementError, match=r"must have the same shape and topology"):
        plan_moves(old, _placement([[0, 1, 2, 3, 4, 5, 6, 7]], num_nodes=1))
    with pytest.raises(PlacementError, match=r"layers_per_chunk \(0\) must be a positive integer"):
        rebalance_cost(old, old, MB, PARAMS, layers_per_chunk=0)
    with pytest.raises(PlacementError, match=r"rdma_gbps \(0\) must be > 0"):
        rebalance_cost(old, old, MB, {**PARAMS, "rdma_gbps": 0})
    with pytest.raises(PlacementError, match=r"algorithm \('greedy'\) must be one of"):
        rebalance_cost(old, old, MB, rebalance_params(), algorithm="greedy")
