"""Traffic counting: hand-computed copies, conservation, replica selection, per-source vs shared."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.eplb import Placement
from epsim.cost.tables import build_tables, contiguous_placement
from epsim.cost.groups import rank_sum
from epsim.cost.traffic import count_traffic
from epsim.errors import PlacementError, SpecError


def _random_case(rng, num_layers, num_experts, num_ranks, top_k):
    tokens = rng.integers(1, 20, num_ranks).astype(float)
    loads = rng.random((num_layers, num_experts)) + 0.05
    loads *= tokens.sum() * top_k / loads.sum(axis=1, keepdims=True)
    return loads, tokens


def test_pair_mode_hand_computed_one_node():
    # 1 layer, 4 experts on 2 ranks (experts 0,1 on rank 0; 2,3 on rank 1), top-2, 10 tokens
    loads = np.array([[6.0, 2.0, 8.0, 4.0]])             # 20 pairs = 10 tokens x 2
    tokens = np.array([4.0, 6.0])
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 4, 2), 4, 2, 8))
    tr = count_traffic(loads, tokens, tables, "pair")
    # a token picks rank 0's experts with rate (6+2)/10 = 0.8 copies, rank 1's with 1.2
    np.testing.assert_allclose(tr.pairs, [[8.0, 12.0]])
    np.testing.assert_allclose(tr.nvl_recv, [[0.8 * 6, 1.2 * 4]])      # from the other rank
    np.testing.assert_allclose(tr.nvl_send, [[4 * 1.2, 6 * 0.8]])
    np.testing.assert_allclose(tr.self_copies, [[0.8 * 4, 1.2 * 6]])
    assert not tr.rdma_recv.any() and not tr.rdma_send.any()


def test_rank_dedup_hit_probability_hand_computed():
    loads = np.array([[6.0, 2.0, 8.0, 4.0]])
    tokens = np.array([4.0, 6.0])
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 4, 2), 4, 2, 8))
    tr = count_traffic(loads, tokens, tables, "rank")
    hit0 = 1 - (1 - 0.6) * (1 - 0.2)                     # pi = load / tokens
    hit1 = 1 - (1 - 0.8) * (1 - 0.4)
    np.testing.assert_allclose(tr.nvl_recv, [[hit0 * 6, hit1 * 4]])
    np.testing.assert_allclose(tr.nvl_send, [[4 * hit1, 6 * hit0]])
    # dedup never sends more copies than one per (token, expert)
    assert (tr.nvl_recv <= count_traffic(loads, tokens, tables, "pair").nvl_recv + 1e-12).all()


def test_node_dedup_hand_computed_two_nodes():
    # 4 ranks, 2 per node; one expert per rank; 2 tokens on each rank, top-1
    loads = np.array([[4.0, 2.0, 1.0, 1.0]])              # 8 tokens x 1
    tokens = np.full(4, 2.0)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 4, 4), 4, 4, 2))
    tr = count_traffic(loads, tokens, tables, "node")
    pi = loads[0] / 8.0
    node_hit = [1 - (1 - pi[0]) * (1 - pi[1]), 1 - (1 - pi[2]) * (1 - pi[3])]
    # RDMA: once per destination node, to the rank with the sender's local index
    np.testing.assert_allclose(tr.rdma_recv, [[2 * node_hit[0], 2 * node_hit[0],
                                               2 * node_hit[1], 2 * node_hit[1]]])
    np.testing.assert_allclose(tr.rdma_send, [[2 * node_hit[1], 2 * node_hit[1],
                                               2 * node_hit[0], 2 * node_hit[0]]])
    # NVLink: every token of a source with another local index reaches r over NVLink
    np.testing.assert_allclose(tr.nvl_recv[0], pi * 4.0)
    # torch (rank dedup) sends straight to each remote rank instead
    torch_tr = count_traffic(loads, tokens, tables, "rank")
    np.testing.assert_allclose(torch_tr.rdma_recv[0], pi * 4.0)


@pytest.mark.parametrize("dedup", ["pair", "rank", "node"])
@pytest.mark.parametrize("shape", [(2, 16, 8, 4), (3, 64, 32, 8), (2, 32, 4, 8)])
def test_conservation_and_shared_equals_per_source(rng, dedup, shape):
    num_layers, num_experts, num_ranks, gpus_per_node = shape
    top_k = 4
    loads, tokens = _random_case(rng, num_layers, num_experts, num_ranks, top_k)
    placement = Placement.on_cluster(contiguous_placement(num_layers, num_experts, num_ranks),
                                     num_experts, num_ranks, gpus_per_node)
    shared = count_traffic(loads, tokens, build_tables(placement), dedup)
    per_src = count_traffic(loads, tokens, build_tables(placement, per_source=True), dedup)
    for field in ("pairs", "active_experts", "nvl_send", "nvl_recv", "rdma_send", "rdma_recv",
                  "self_copies"):
        np.testing.assert_allclose(getattr(shared, field), getattr(per_src, field), rtol=1e-10,
                                   atol=1e-9, err_msg=field)
    # dispatched pairs = combined pairs = tokens x top_k, every layer
    np.testing.assert_allclose(shared.pairs.sum(axis=1), tokens.sum() * top_k)
    # every copy sent is received, per link
    np.testing.assert_allclose(shared.nvl_send.sum(axis=1), shared.nvl_recv.sum(axis=1))
    np.testing.assert_allclose(shared.rdma_send.sum(axis=1), shared.rdma_recv.sum(axis=1))
    if dedup == "pair":   # one copy per (token, expert): copies + self copies = pairs
        if gpus_per_node >= num_ranks:
            np.testing.assert_allclose(shared.nvl_recv.sum(axis=1) + shared.self_copies.sum(axis=1),
                                       tokens.sum() * top_k)


def test_load_doubling_doubles_counts(rng):
    loads, tokens = _random_case(rng, 2, 32, 8, 4)
    tables = build_tables(Placement.on_cluster(contiguous_placement(2, 32, 8), 32, 8, 4))
    for dedup in ("pair", "rank", "node"):
        one = count_traffic(loads, tokens, tables, dedup)
        two = count_traffic(2 * loads, 2 * tokens, tables, dedup)
        for field in ("pairs", "nvl_send", "nvl_recv", "rdma_send", "rdma_recv"):
            np.testing.assert_allclose(getattr(two, field), 2 * getattr(one, field), err_msg=field)


def test_redundant_replicas_split_even_for_random_selection(rng):
    # 8 experts, 8 redundant slots on 4 ranks: every expert has two replicas
    p2l = contiguous_placement(1, 8, 4, num_redundant=8)
    loads, tokens = _random_case(rng, 1, 8, 4, 2)
    tables = build_tables(Placement.on_cluster(p2l, 8, 4, 4), "random")
    assert tables.source_slot is None
    tr = count_traffic(loads, tokens, tables, "pair")
    slot_loads = loads[0][p2l[0]] / 2.0                    # each replica gets half
    np.testing.assert_allclose(tr.pairs[0], rank_sum(slot_loads, 4))


def test_static_selection_prefers_the_local_replica(rng):
    # replicas of every expert on every rank: static sends nothing over links
    num_ranks, num_experts = 4, 4
    p2l = np.tile(np.arange(num_experts), (1, num_ranks))  # slot p holds expert p % 4
    loads, tokens = _random_case(rng, 1, num_experts, num_ranks, 2)
    tables = build_tables(Placement.on_cluster(p2l, num_experts, num_ranks, 4), "static")
    assert tables.source_slot is not None
    tr = count_traffic(loads, tokens, tables, "pair")
    assert np.allclose(tr.nvl_recv, 0) and np.allclose(tr.nvl_send, 0)
    # each rank computes exactly the pairs of its own tokens
    np.testing.assert_allclose(tr.pairs[0], tokens * 2)
    # an even split (round robin) moves 3/4 of them over NVLink instead
    rr = count_traffic(loads, tokens, build_tables(Placement.on_cluster(p2l, num_experts, num_ranks, 4),
                                                   "round_robin"), "pair")
    np.testing.assert_allclose(rr.nvl_recv.sum(), tokens.sum() * 2 * 3 / 4)


def test_static_selection_falls_back_to_same_node_replica():
    # 2 nodes x 2 ranks; expert 0 has replicas on rank 0 and rank 2 (one per node)
    p2l = np.array([[0, 1, 2, 3, 0, 1, 2, 3]])            # 2 slots per rank
    tables = build_tables(Placement.on_cluster(p2l, 4, 4, 2), "static")
    # rank 1 (node 0) must use expert 0's slot on rank 0, rank 3 (node 1) the one on rank 2
    assert tables.source_slot[1, 0, 0] // 2 == 0
    assert tables.source_slot[3, 0, 0] // 2 == 2


def test_half_batch_fraction(rng):
    loads, tokens = _random_case(rng, 2, 16, 4, 2)
    tables = build_tables(Placement.on_cluster(contiguous_placement(2, 16, 4), 16, 4, 4))
    full = count_traffic(loads, tokens, tables, "rank")
    half = count_traffic(loads, tokens, tables, "rank", 0.5)
    np.testing.assert_allclose(half.pairs, full.pairs / 2)
    np.testing.assert_allclose(half.nvl_recv, full.nvl_recv / 2)
    # a slot with x tokens keeps one in a half batch with probability 1 - 2^-x
    sparse = np.zeros((1, 16))
    sparse[0, [0, 5]] = [1.0, 3.0]                       # expert 0 on rank 0, expert 5 on rank 1
    one_layer = build_tables(Placement.on_cluster(contiguous_placement(1, 16, 4), 16, 4, 4))
    two_tokens = np.array([1.0, 1.0, 0.0, 0.0])
    half_active = count_traffic(sparse, two_tokens, one_layer, "pair", 0.5).active_experts[0]
    np.testing.assert_allclose(half_active, [0.5, 1 - 0.5 ** 3, 0, 0])
    full_active = count_traffic(sparse, two_tokens, one_layer, "pair").active_experts[0]
    np.testing.assert_allclose(full_active, [1, 1, 0, 0])


def test_bad_inputs_fail_with_one_clear_line():
    tables = build_tables(Placement.on_cluster(contiguous_placement(2, 8, 4), 8, 4, 4))
    with pytest.raises(SpecError, match=r"loads \(shape \[2, 7\]\) must be \[layers, experts\] = \[2, 8\]"):
        count_traffic(np.ones((2, 7)), np.ones(4), tables, "pair")
    with pytest.raises(SpecError, match=r"tokens_per_rank \(shape \[3\]\) must be \[ranks\] = \[4\]"):
        count_traffic(np.ones((2, 8)), np.ones(3), tables, "pair")
    with pytest.raises(SpecError, match=r"dedup \('token'\) must be one of"):
        count_traffic(np.ones((2, 8)), np.ones(4), tables, "token")
    with pytest.raises(PlacementError, match=r"logical_count\[0, 7\] \(0\) must be >= 1"):
        build_tables(Placement.on_cluster(np.array([[0, 1, 2, 3, 4, 5, 6, 6]]), 8, 4, 4))
    with pytest.raises(PlacementError, match=r"num_ranks \(3\) must be > 0 and divide the physical "
                                             r"slots \(8\)"):
        build_tables(Placement.on_cluster(contiguous_placement(1, 8, 4), 8, 3, 4))
    with pytest.raises(PlacementError, match=r"num_ranks \(12\) must be a multiple of gpus_per_node "
                                             r"\(8\) when it spans nodes"):
        Placement.on_cluster(contiguous_placement(1, 24, 12), 24, 12, 8)
    with pytest.raises(SpecError, match=r"ep_dispatch_algorithm \('fastest'\) must be one of"):
        build_tables(Placement.on_cluster(contiguous_placement(1, 8, 4), 8, 4, 4), "fastest")
    with pytest.raises(SpecError, match=r"num_ranks \(4\) must divide the physical expert slots"):
        contiguous_placement(1, 8, 4, num_redundant=2)


def test_group_limited_routing_caps_the_nodes_a_token_reaches():
    # 64 experts on 16 ranks in 4 nodes, top-8 uniform; a token may reach 2 of the 4 nodes
    experts, ranks, per_node, tokens = 64, 16, 4, 100.0
    loads = np.full((1, experts), ranks * tokens * 8 / experts)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, experts, ranks), experts,
                                               ranks, per_node))
    free = count_traffic(loads, np.full(ranks, tokens), tables, "node")
    capped = count_traffic(loads, np.full(ranks, tokens), tables, "node", max_nodes_per_token=2)
    # RDMA copies a rank sends per token: remote nodes hit, f * (1 - (1 - pi/f)^16) each
    f, pi = 2 / 4, 8 / 64
    node_hit = f * (1 - (1 - pi / f) ** 16)
    assert capped.rdma_send[0, 0] / tokens == pytest.approx(3 * node_hit)
    assert capped.rdma_send.sum() == pytest.approx(capped.rdma_recv.sum())       # all arrive
    assert capped.nvl_send.sum() == pytest.approx(capped.nvl_recv.sum())
    assert 4 * node_hit <= 2.0 < 4 * (1 - (1 - pi) ** 16)                        # cap binds
    assert capped.rdma_send.sum() < free.rdma_send.sum()
    np.testing.assert_allclose(capped.pairs, free.pairs)                         # pairs unchanged


def _column_major_sums(source_slot: np.ndarray, slots_per_dest: int, num_dest: int,
                       weights: np.ndarray) -> np.ndarray:
    """[sources, layers, dests] the per-destination sums of `weights` [layers, experts] as a
    column-major sweep adds them: from 0, experts in increasing order (the CSC product's order)."""
    num_sources, num_layers, num_experts = source_slot.shape
    out = np.zeros((num_sources, num_layers, num_dest))
    for layer in range(num_layers):
        for expert in range(num_experts):
            for source in range(num_sources):
                out[source, layer, source_slot[source, layer, expert] // slots_per_dest] += \
                    weights[layer, expert]
    return out


def test_source_operators_add_in_expert_and_source_order(rng):
    """The sparse operators' products are the plain sums in one fixed order (experts, sources
    increasing from 0), bit for bit: a change of layout must not change a result's last bits."""
    num_ranks, gpus_per_node, num_experts, num_layers = 8, 4, 12, 3
    live_slots = np.r_[0:10, 12:16]                                       # rank 5 is lost
    p2l = rng.integers(0, num_experts, (num_layers, 16))                  # 2 slots per rank
    for layer in range(num_layers):                                       # all on live ranks
        p2l[layer, rng.permutation(live_slots)[:num_experts]] = np.arange(num_experts)
    alive = np.ones(num_ranks, dtype=bool)
    alive[5] = False
    placement = Placement.on_cluster(p2l, num_experts, num_ranks, gpus_per_node, alive)
    tables = build_tables(placement, "static", per_source=True)
    ops = tables.source_operators
    weights = rng.random((num_layers, num_experts)) ** 3
    for operator, per_dest, num_dest in ((ops.to_rank, 2, num_ranks),
                                         (ops.to_node, 2 * gpus_per_node, 2)):
        got = (operator @ weights.ravel()).reshape(num_ranks, num_layers, num_dest)
        want = _column_major_sums(tables.source_slot, per_dest, num_dest, weights)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))
    share = rng.random(num_ranks)
    want = np.zeros(num_layers * 16)
    for source in range(num_ranks):                                       # sources in order
        for layer in range(num_layers):
            for expert in range(num_experts):
                want[layer * 16 + tables.source_slot[source, layer, expert]] += share[source]
    assert np.array_equal(ops.slot_weights(share).view(np.int64), want.view(np.int64))


def _pair_copies_by_source(loads, tokens, source_slot, slots_per_rank, ranks_per_node):
    """(nvl_send, nvl_recv, rdma_send, rdma_recv, self_copies) [layers, ranks] of one copy per
    (token, expert), summed source by source and expert by expert from the static map."""
    num_sources, num_layers, num_experts = source_slot.shape
    out = np.zeros((5, num_layers, num_sources))
    pi = np.minimum(loads / tokens.sum(), 1.0)
    for source in range(num_sources):
        for layer in range(num_layers):
            for expert in range(num_experts):
                dest = source_slot[source, layer, expert] // slots_per_rank
                copies = tokens[source] * pi[layer, expert]
                if dest == source:
                    out[4, layer, source] += copies
                elif dest // ranks_per_node == source // ranks_per_node:
                    out[0, layer, source] += copies
                    out[1, layer, dest] += copies
                else:
                    out[2, layer, source] += copies
                    out[3, layer, dest] += copies
    return out


@pytest.mark.parametrize("num_ranks, gpus_per_node, lost", [(8, 4, 5), (8, 2, None), (6, 1, 2),
                                                            (4, 4, 0)])
def test_pair_copies_with_replicas_equal_the_sum_over_sources(rng, num_ranks, gpus_per_node, lost):
    """The pair path's per-slot sums (no `[src, layers, dst]` rates) equal the copies summed
    source by source under the static map, with replicas, a lost rank, and a draws axis."""
    num_experts, num_layers, slots_per_rank = 8, 3, 3
    num_physical = num_ranks * slots_per_rank
    alive = np.ones(num_ranks, dtype=bool)
    if lost is not None:
        alive[lost] = False
    live_slots = np.flatnonzero(np.repeat(alive, slots_per_rank))
    p2l = rng.integers(0, num_experts, (num_layers, num_physical))        # random replicas
    for layer in range(num_layers):                                       # every expert live
        p2l[layer, rng.permutation(live_slots)[:num_experts]] = np.arange(num_experts)
    placement = Placement.on_cluster(p2l, num_experts, num_ranks, gpus_per_node,
                                     None if lost is None else alive)
    tables = build_tables(placement, "static", per_source=True)
    tokens = rng.integers(1, 20, num_ranks).astype(float)
    if lost is not None:
        tokens[lost] = 0.0                                                # a lost rank sends nothing
    draws = rng.random((3, num_layers, num_experts)) ** 2 + 0.01          # [draws, layers, experts]
    draws *= tokens.sum() * 4 / draws.sum(axis=-1, keepdims=True)         # top-4 pairs per layer
    together = count_traffic(draws, tokens, tables, "pair", fraction=0.5)
    for index, loads in enumerate(draws):
        alone = count_traffic(loads, tokens, tables, "pair", fraction=0.5)
        want = _pair_copies_by_source(loads, tokens, tables.source_slot, slots_per_rank,
                                      gpus_per_node) * 0.5
        for field, expected in zip(("nvl_send", "nvl_recv", "rdma_send", "rdma_recv",
                                    "self_copies"), want):
            np.testing.assert_allclose(getattr(alone, field), expected, rtol=1e-12, atol=1e-12,
                                       err_msg=field)
            assert np.array_equal(getattr(together, field)[index], getattr(alone, field)), field
        if gpus_per_node >= num_ranks:
            assert not alone.rdma_send.any() and not alone.rdma_recv.any()
        if gpus_per_node == 1:
            assert not alone.nvl_send.any() and not alone.nvl_recv.any()
