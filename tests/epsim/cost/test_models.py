"""Cost models against hand-computed values; design rows equal the models; the facade and
profile plumbing; predictions straight from measurement records."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from epsim.eplb import Placement
from epsim.cost import CostModel, ProfileHardwareWarning, build_tables, contiguous_placement
from epsim.cost.attention import BatchCounts
from epsim.cost.block_ops import block_ops_us
from epsim.cost.combine_sides import queue_spread, reduction_rounds
from epsim.cost.comm import (NORMAL_CHANNELS, chunk_rounds, collective_features, collective_us,
                             comm_defaults, comm_features, comm_us, dedup_for,
                             dispatch_bytes_per_copy, l2_bytes, queue_copies)
from epsim.cost.experts import (TILE_M, TILE_N, ExpertGemm, even_experts_us, even_row_tiles,
                                experts_features, experts_us, row_tiles)
from epsim.cost.linear import COLLECTIVE_TERMS, COMM_TERMS, EXPERT_TERMS
from epsim.cost.record import predict_record, record_features
from epsim.cost.allreduce import ring_us
from epsim.cost.tp import nccl_allgather_us, tp_allreduce_us
from epsim.cost.traffic import Traffic, count_traffic
from epsim.errors import ProfileError, RecordError, SpecError
from epsim.default_profile import default_profile
from epsim.profile import Component, Profile, load_profile
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

PARAMS = {"base_us": 10.0, "overlap_us": 0.0, "nvl_gbps": 100.0, "rdma_gbps": 25.0,
          "per_copy_us": 0.0, "slot_us_per_kb": 0.0, "spill_gbps": 4800.0, "expert_signal_us": 0.0,
          "rdma_signal_us": 0.0, "token_us": 0.0, "chunk_us": 0.0, "chunk_us_per_kb": 0.0}


def _traffic(nvl_send, nvl_recv, rdma_send, rdma_recv) -> Traffic:
    arrays = [np.atleast_2d(np.asarray(a, dtype=float))
              for a in (nvl_send, nvl_recv, rdma_send, rdma_recv)]
    zeros = np.zeros_like(arrays[0])
    return Traffic(zeros, zeros, *arrays, zeros, 0.0, "pair",
                   multi_node=bool(arrays[2].any() or arrays[3].any()))


def test_dispatch_bytes_per_copy():
    assert dispatch_bytes_per_copy(4096, "bf16", 8, "pair") == 2 * 4096 + 16
    assert dispatch_bytes_per_copy(4096, "fp8", 8, "pair") == 4096 + 4 * 4096 / 128 + 16
    assert dispatch_bytes_per_copy(4096, "fp8", 8, "rank") == 4096 + 128 + 12 * 8
    # NVFP4 (DeepEP low-latency use_nvfp4): 4 bits a value and an E4M3 byte per 16 values,
    # 0.55 x the FP8 copy at DeepSeek's hidden size
    assert dispatch_bytes_per_copy(7168, "nvfp4", 8, "pair") == 7168 / 2 + 7168 / 16 + 16
    nvfp4, fp8 = (dispatch_bytes_per_copy(7168, d, 8, "pair") for d in ("nvfp4", "fp8"))
    assert 0.54 < nvfp4 / fp8 < 0.56
    with pytest.raises(SpecError, match=r"dispatch_dtype \('int4'\) must be one of"):
        dispatch_bytes_per_copy(4096, "int4", 8, "pair")


def test_an_nvfp4_dispatch_is_the_fp8_fit_at_its_own_bytes():
    """DeepEP low-latency `use_nvfp4` (no table times it): the FP8 dispatch's component priced
    at NVFP4's bytes a copy; the experts and the combine unchanged."""
    from epsim.validate.published_predict import cost_model
    model, ep, tokens = get_model("DeepSeek-V3"), 8, 128
    loads = np.full((1, model.num_experts), ep * tokens * model.top_k / model.num_experts)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, model.num_experts, ep),
                                               model.num_experts, ep, 8))
    moe = {d: cost_model(model, "B200", ep, "deepep", "low_latency", dispatch_dtype=d).moe(
        loads, np.full(ep, float(tokens)), tables, "decode") for d in ("fp8", "nvfp4")}
    fp8, nvfp4 = moe["fp8"], moe["nvfp4"]
    assert np.all(nvfp4.dispatch_us < fp8.dispatch_us)
    np.testing.assert_array_equal(nvfp4.experts_us, fp8.experts_us)
    np.testing.assert_array_equal(nvfp4.combine_us, fp8.combine_us)
    # its provenance says so (no table times an NVFP4 dispatch)
    from epsim.cost.provenance import component_uses
    cm = cost_model(model, "B200", ep, "deepep", "low_latency", dispatch_dtype="nvfp4")
    full = np.tile(loads, (model.num_moe_layers, 1))
    layers = build_tables(Placement.on_cluster(contiguous_placement(
        model.num_moe_layers, model.num_experts, ep), model.num_experts, ep, 8))
    cm.step(BatchCounts.uniform_decode(ep, tokens, 1024), full, layers)
    axes = [a for u in component_uses(cm, cm.ledger) if u.part == "dispatch" for a in u.axes]
    assert any(a.startswith("dispatch_dtype nvfp4") for a in axes)


def test_dedup_per_backend_and_sglang_mode_rule():
    assert dedup_for("torch") == "rank"
    assert dedup_for("mooncake") == "pair"
    assert dedup_for("deepep", "normal") == "node"
    assert dedup_for("deepep", "low_latency") == "pair"
    assert dedup_for("none") == ""
    auto = DeploymentSpec(deepep_mode="auto")
    assert (auto.deepep_mode_for("prefill"), auto.deepep_mode_for("decode")) == ("normal", "low_latency")
    with pytest.raises(SpecError, match=r"backend \('nccl'\) must be one of"):
        dedup_for("nccl")


def test_comm_busiest_rank_hand_computed():
    # rank 1 receives 1000 copies over NVLink, rank 0 sends 400 over RDMA; 1000 bytes per copy
    tr = _traffic([[0, 0]], [[0, 1000]], [[400, 0]], [[0, 0]])
    # rank 0: 400*1000 B / 25 GB/s = 16 us; rank 1: 1e6 B / 100 GB/s = 10 us -> rank 0 decides
    np.testing.assert_allclose(comm_us(tr, 1000.0, PARAMS), [10.0 + 16.0])
    # the busier direction of a rank counts, not the sum of both
    tr2 = _traffic([[500, 0]], [[1000, 0]], [[0, 0]], [[0, 0]])
    np.testing.assert_allclose(comm_us(tr2, 1000.0, PARAMS), [10.0 + 10.0])
    # twice the load, twice the bandwidth term
    tr3 = _traffic([[0, 0]], [[0, 2000]], [[800, 0]], [[0, 0]])
    np.testing.assert_allclose(comm_us(tr3, 1000.0, PARAMS), [10.0 + 32.0])
    with_copy_cost = {**PARAMS, "per_copy_us": 0.01}
    np.testing.assert_allclose(comm_us(tr, 1000.0, with_copy_cost), [26.0 + 0.01 * 1000])
    # one rank on both links: NVLink (10 us) and the NIC (16 us) run at once, the slower paces
    both = _traffic([[0, 0]], [[1000, 0]], [[400, 0]], [[0, 0]])
    np.testing.assert_allclose(comm_us(both, 1000.0, PARAMS), [10.0 + 16.0])


def test_comm_design_row_equals_model(rng):
    params = {"base_us": 7.0, "overlap_us": 3.0, "nvl_gbps": 300.0, "rdma_gbps": 40.0,
              "per_copy_us": 0.002, "slot_us_per_kb": 0.03, "spill_gbps": 500.0,
              "expert_signal_us": 0.01, "rdma_signal_us": 0.001, "token_us": 0.02,
              "chunk_us": 2.0, "chunk_us_per_kb": 0.1, "handshake_us": 0.04}
    tr = dataclasses.replace(_traffic(*(rng.random((5, 8)) * 1000 for _ in range(4))),
                             max_slot_pairs=rng.random(5) * 500,
                             pairs=rng.random((5, 8)) * 40000)
    for counts in (tr.nvl_send, tr.nvl_recv, tr.rdma_send, tr.rdma_recv, tr.pairs):
        counts[0] = 1.0                                   # layer 0: the overlapped work paces
    tr.max_slot_pairs[0] = 1.0
    rows = comm_features(tr.nvl_copies, tr.rdma_copies, tr.copies, 4224.0, params,
                         tr.max_slot_pairs, tr.pairs.max(axis=-1), l2=50e6, num_experts=256,
                         remote_experts=128)
    assert rows[0, 1] == 1.0 and (rows[1:, 1] == 0.0).all() and (rows[:, 6] > 0).any()
    assert (rows[1:, 7] == 256).all() and rows[0, 7] == 0.0       # layer 0: hidden under overlap
    assert (rows[1:, 8] == 128).all() and rows[0, 8] == 0.0
    np.testing.assert_allclose(rows @ COMM_TERMS.coefficients(params),
                               comm_us(tr, 4224.0, params, l2=50e6, num_experts=256,
                                       remote_experts=128))
    assert COMM_TERMS.params_from(COMM_TERMS.coefficients(params)) == pytest.approx(params)
    assert COMM_TERMS.coef_names == ("base_us", "overlap_us", "inv_nvl_gbps", "inv_rdma_gbps",
                                     "per_copy_us", "slot_us_per_kb", "inv_spill_gbps",
                                     "expert_signal_us", "rdma_signal_us", "token_us",
                                     "chunk_us", "chunk_us_per_kb", "handshake_us")
    assert (rows[:, 9:] == 0.0).all()              # not a chunked kernel: no owner, no queues
    # a column the fit never saw (zero inverse bandwidth) leaves that parameter out
    assert "rdma_gbps" not in COMM_TERMS.params_from(np.array([5.0, 0.0, 1 / 300, 0.0, 0.0, 0.0,
                                                               1 / 500, 0.0, 0.0, 0.0, 0.0, 0.0,
                                                               0.0]))


def test_tuned_chunk_hand_computed():
    """A queue of 100 copies of 4 kB, 2 µs a round and 0.1 µs per kB of the first chunk: each
    size c costs 2 ceil(100 / c) + 0.4 c. Dispatch's 4, 6, ..., 32: least at c = 20 (5 rounds,
    18 µs; 18 -> 19.2, 26 -> 18.4); combine's 1..16: at c = 15 (7 rounds, 20.0 µs; 16 -> 20.4).
    A queue of 3 copies ties from c = 3 up and takes 3. With no round cost the smallest wins."""
    params = {"chunk_us": 2.0, "chunk_us_per_kb": 0.1}
    rounds, fill_kb = chunk_rounds(100.0, 4000.0, params, "dispatch")
    assert (float(rounds), float(fill_kb)) == pytest.approx((5.0, 20 * 4.0))
    rounds, fill_kb = chunk_rounds(np.array([100.0, 3.0]), 4000.0, params, "combine")
    np.testing.assert_allclose(rounds, [7.0, 1.0])
    np.testing.assert_allclose(fill_kb, [15 * 4.0, 3 * 4.0])     # a short queue: its copies
    rounds, fill_kb = chunk_rounds(100.0, 4000.0, {"chunk_us_per_kb": 0.1}, "dispatch")
    assert (float(rounds), float(fill_kb)) == pytest.approx((25.0, 16.0))
    assert float(queue_copies(7000.0, 7)) == pytest.approx(7000.0 / 7 / NORMAL_CHANNELS)


def test_record_and_simulator_price_deepep_normal_alike():
    """DeepEP normal's owner tokens and tuned queues: a record and the simulator's `comm_us`
    of the same uniform exchange add the same microseconds over the datasheet price (the
    intranode combine's handshake: its owner tokens, on either side of its max), and a kernel
    that is not `chunked` (low-latency) adds none."""
    extra = {"token_us": 0.02, "chunk_us": 3.0, "chunk_us_per_kb": 0.1, "handshake_us": 0.01}
    keys = ("deepep/dispatch/normal", "deepep/combine/normal")
    fitted = Profile(name="fit", hardware="H200", components={
        k: Component(params=extra, source="fit") for k in keys})
    plain = Profile(name="datasheet", hardware="H200")
    loads, tokens = np.full((1, 128), 2048 * 8 * 8 / 128), np.full(8, 2048.0)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 8), 128, 8, 8))
    model, cluster = get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200")
    dep = DeploymentSpec(ep_size=8, moe_a2a_backend="deepep", deepep_mode="normal")
    sim = CostModel(model, cluster, dep, fitted).moe(loads, tokens, tables)
    base = CostModel(model, cluster, dep, plain).moe(loads, tokens, tables)
    tr = sim.traffic
    for stage, got, was in (("dispatch", sim.dispatch_us, base.dispatch_us),
                            ("combine", sim.combine_us, base.combine_us)):
        per_copy = (dispatch_bytes_per_copy(model.hidden_size, "fp8", model.top_k, "node")
                    if stage == "dispatch" else 2.0 * model.hidden_size)
        queue = queue_copies(tr.peak("nvl_copies"), 7)
        rounds, fill_kb = chunk_rounds(queue, per_copy, extra, stage)
        added = 3.0 * rounds + 0.1 * fill_kb
        if stage == "dispatch":
            added = added + 2048 * 0.02
        else:        # the slower of its sending (longest queue) and receiving sides
            nvl = comm_defaults("deepep", "normal", cluster)["nvl_gbps"]
            send_us = (tr.peak("nvl_copies") * per_copy * 1e-3 / nvl
                       * queue_spread(queue, 2048.0, 8, NORMAL_CHANNELS))
            recv_us = 2048 * reduction_rounds(per_copy) * 0.02
            added = added + np.maximum(send_us, recv_us) - send_us + 2048 * 0.01
        np.testing.assert_allclose(got - was, added)
        rec = _record(stage, backend="deepep", mode="normal", ep_size=8, num_tokens_per_rank=2048,
                      dispatch_dtype="fp8" if stage == "dispatch" else "bf16",
                      hidden_size=model.hidden_size, top_k=model.top_k,
                      send_tokens_per_rank=list(tr.nvl_send[0]),
                      recv_tokens_per_rank=list(tr.nvl_recv[0]))
        assert predict_record(rec, fitted) - predict_record(rec, plain) == pytest.approx(added[0])
        ll = rec.model_copy(update={"mode": "low_latency"})
        assert predict_record(ll, Profile(name="fit", hardware="H200", components={
            f"deepep/{stage}/low_latency": Component(params=extra, source="fit")})) == \
            pytest.approx(predict_record(ll, plain))


def test_remote_signals_only_across_nodes():
    """`rdma_signal_us` per expert slot on other nodes: paid by a low-latency exchange whose
    ranks span nodes, not by one within a node (the same counts otherwise)."""
    params = {**PARAMS, "rdma_signal_us": 0.05}
    local = _traffic([[0, 0]], [[100, 0]], [[0, 0]], [[0, 0]])
    remote = _traffic([[0, 0]], [[100, 0]], [[0, 0]], [[1, 0]])
    base = comm_us(local, 1000.0, params, num_experts=288, remote_experts=144)
    np.testing.assert_allclose(base, comm_us(local, 1000.0, PARAMS, num_experts=288))
    np.testing.assert_allclose(comm_us(remote, 1000.0, params, num_experts=288,
                                       remote_experts=144)
                               - comm_us(remote, 1000.0, PARAMS, num_experts=288), [144 * 0.05])


def test_fixed_work_hidden_under_a_large_transfer():
    """`base_us + max(overlap_us, transfer)`: a small transfer pays the overlapped fixed work,
    a large one hides it (the time's slope is the bandwidth's, its intercept `base_us`)."""
    params = {**PARAMS, "overlap_us": 20.0}
    small = _traffic([[0, 0]], [[500, 0]], [[0, 0]], [[0, 0]])      # 5 us on NVLink
    large = _traffic([[0, 0]], [[5000, 0]], [[0, 0]], [[0, 0]])     # 50 us
    np.testing.assert_allclose(comm_us(small, 1000.0, params), [10.0 + 20.0])
    np.testing.assert_allclose(comm_us(large, 1000.0, params), [10.0 + 50.0])
    np.testing.assert_allclose(comm_us(large, 1000.0, PARAMS), [10.0 + 50.0])   # 0: the plain sum


def test_spill_l2_is_hoppers_own_and_h200s_elsewhere():
    """The spill term's L2 comes from the hardware zoo: a Hopper GPU's own 50 MB; a Blackwell GPU
    keeps H200's (the stated assumption), not its own larger L2."""
    assert l2_bytes("H100") == get_hardware("H100").l2_bytes == 50e6
    assert l2_bytes("B200") == l2_bytes("H200") == 50e6 < get_hardware("B200").l2_bytes


def test_staged_pairs_beyond_l2_spill_to_hbm():
    """Low-latency kernels stage every pair in a receive buffer; bytes beyond the L2 cost
    `1 / spill_gbps` each; rank-deduplicated kernels (NCCL) pay no per-pair terms."""
    tr = dataclasses.replace(_traffic([[0, 0]], [[1000, 0]], [[0, 0]], [[0, 0]]),
                             pairs=np.array([[60000.0, 1000.0]]))   # 60 MB at 1000 B per pair
    params = {**PARAMS, "spill_gbps": 1000.0}
    t = comm_us(tr, 1000.0, params, l2=50e6)
    np.testing.assert_allclose(t, [10.0 + 10.0 + 10e6 * 1e-3 / 1000.0])   # 10 MB spill: 10 us
    np.testing.assert_allclose(comm_us(tr, 1000.0, params, l2=100e6), [20.0])
    nccl = dataclasses.replace(tr, dedup="rank")
    np.testing.assert_allclose(comm_us(nccl, 1000.0, {**params, "per_copy_us": 1.0}), [20.0])


def test_busiest_expert_slot_paces_low_latency_kernels():
    # same bytes per rank; one slot takes 800 pairs instead of 100: 700 * 1 KB * 0.03 us/KB more
    tr = _traffic([[0, 0]], [[1000, 1000]], [[0, 0]], [[0, 0]])
    params = {**PARAMS, "slot_us_per_kb": 0.03}
    balanced = comm_us(dataclasses.replace(tr, max_slot_pairs=np.array([100.0])), 1000.0, params)
    hot = comm_us(dataclasses.replace(tr, max_slot_pairs=np.array([800.0])), 1000.0, params)
    np.testing.assert_allclose(hot - balanced, [700 * 1.0 * 0.03])


def test_busiest_queue_is_one_source_ranks_share_of_an_expert():
    """A low-latency kernel receives each (local expert, source rank) queue with one warp group:
    at the same tokens a rank, more ranks fill more queues, not a longer one; a replica does
    not shorten a source's queue (its static map sends all its tokens of an expert to one)."""
    tokens_a_rank, experts, top_k = 64.0, 256, 8
    queues = []
    for ranks in (8, 32, 64):
        tables = build_tables(Placement.on_cluster(contiguous_placement(1, experts, ranks),
                                                   experts, ranks, 8))
        tokens = np.full(ranks, tokens_a_rank)
        loads = np.full((1, experts), tokens.sum() * top_k / experts)        # uniform routing
        queues.append(count_traffic(loads, tokens, tables, "pair").max_slot_pairs[0])
    np.testing.assert_allclose(queues, tokens_a_rank * top_k / experts)      # 2 pairs each
    loads = np.full((1, experts), 8 * tokens_a_rank * top_k / experts)
    loads[0, 0] += 8 * tokens_a_rank                                         # every token's expert 0
    plain = build_tables(Placement.on_cluster(contiguous_placement(1, experts, 8), experts, 8, 8))
    replicated = build_tables(Placement.on_cluster(contiguous_placement(1, experts, 8, 8),
                                                   experts, 8, 8))
    for tables in (plain, replicated):
        got = count_traffic(loads, np.full(8, tokens_a_rank), tables, "pair").max_slot_pairs[0]
        np.testing.assert_allclose(got, loads[0, 0] / 8)


def test_low_latency_kernels_signal_every_expert_slot():
    """A `pair` kernel pays `expert_signal_us` per expert slot of the deployment (one warp group
    per expert sends and polls its counts), whatever the tokens; NCCL's rank-deduplicated
    all-to-all pays none."""
    tr = _traffic([[0, 0]], [[1000, 0]], [[0, 0]], [[0, 0]])        # 10 us on NVLink
    params = {**PARAMS, "expert_signal_us": 0.015}
    np.testing.assert_allclose(comm_us(tr, 1000.0, params, num_experts=256), [10.0 + 10.0 + 3.84])
    np.testing.assert_allclose(comm_us(tr, 1000.0, params, num_experts=512), [10.0 + 10.0 + 7.68])
    nccl = dataclasses.replace(tr, dedup="rank")
    np.testing.assert_allclose(comm_us(nccl, 1000.0, params, num_experts=256), [20.0])


def test_experts_grouped_gemm_physics_hand_computed():
    """Weights of touched experts and activations over HBM against tile- and wave-quantized
    FLOPs over the tensor rate; the larger wins; the slowest rank decides."""
    params = {"base_us": 5.0, "per_expert_us": 1.0, "hbm_gbps": 1000.0, "tflops": 100.0}
    gemm = ExpertGemm(hidden_size=256, intermediate_size=128, weight_bytes=1e6, num_sms=4)
    # 2 experts with 1 row each: memory 2e6 B + 2 rows * (4*256 + 12*128) B = 2005120 B -> 2.00512 us
    # FLOPs: 2 row tiles; GEMM1 N=256 -> 2 col tiles -> 4 tiles = 1 wave of 4 SMs:
    #   4 * 2*TILE_M*128*256 ; GEMM2 N=256, K=128 -> same tiles: 4 * 2*TILE_M*128*128
    flops = 4 * 2 * TILE_M * TILE_N * 256 + 4 * 2 * TILE_M * TILE_N * 128
    assert gemm.quantized_mflops(np.array(2.0)) == pytest.approx(flops * 1e-6)
    math_us = flops * 1e-6 / 100.0
    mem_us = 2005120 * 1e-3 / 1000.0
    t = experts_us(np.array([2.0]), np.array([2.0]), np.array([2.0]), gemm, params)
    np.testing.assert_allclose(t, 5.0 + 2.0 + max(mem_us, math_us))
    # one more row in an expert's tile costs nothing (tile quantization); a new tile does
    assert row_tiles(np.array([1.0, TILE_M])) == 2 and row_tiles(np.array([1.0, TILE_M + 1])) == 3
    # the slowest rank decides
    two = experts_us(np.array([[2.0, 1e5]]), np.array([[2.0, 2.0]]),
                     np.array([[2.0, 2 * np.ceil(5e4 / TILE_M)]]), gemm, params)
    one = experts_us(np.array([1e5]), np.array([2.0]), np.array([2 * np.ceil(5e4 / TILE_M)]),
                     gemm, params)
    np.testing.assert_allclose(two, one)
    # even split: `pairs / active` rows per expert
    assert even_row_tiles(np.array([3 * TILE_M]), np.array([3.0])) == 3


def test_experts_design_row_equals_model(rng):
    params = {"base_us": 5.0, "per_expert_us": 0.5, "hbm_gbps": 3000.0, "tflops": 500.0,
              "wave_us": 0.2}
    gemm = ExpertGemm(2048, 768, 9.4e6)
    pairs = rng.random((6, 8)) * 5000
    pairs[0] = 1.0                                        # a memory-bound layer too
    active = rng.integers(1, 16, (6, 8)).astype(float)
    tiles = even_row_tiles(pairs, active)
    rows = experts_features(pairs, active, tiles, gemm, params)
    assert (rows[0, 2] > 0) and (rows[-1, 3] > 0)         # both bound sides appear
    np.testing.assert_allclose(rows @ EXPERT_TERMS.coefficients(params),
                               experts_us(pairs, active, tiles, gemm, params))
    assert EXPERT_TERMS.params_from(EXPERT_TERMS.coefficients(params)) == pytest.approx(params)


@pytest.mark.parametrize("params", [
    {"base_us": 5.0, "per_expert_us": 0.5, "hbm_gbps": 3000.0, "tflops": 500.0, "wave_us": 0.2},
    {"base_us": 38.3, "per_expert_us": 0.0245, "hbm_gbps": 2911.3, "tflops": 619.6, "wave_us": 1.09},
    {"base_us": 8.0, "per_expert_us": 0.0, "hbm_gbps": 4800.0, "tflops": 989.0, "wave_us": 0.0},
    {"base_us": 8.0, "per_expert_us": 1.0, "hbm_gbps": 4800.0, "tflops": 989.0, "wave_us": -0.1}])
def test_even_experts_us_is_every_ranks_time_at_the_slowest_rank_to_the_bit(rng, params):
    """The engines' `even_experts_us` reduces over ranks first where every rank has the same
    active experts; it gives the bits of `experts_us` over every rank's even-split tiles, on
    both bound sides, tile edges and idle ranks, and forms every rank's time otherwise."""
    gemm = ExpertGemm(4096, 1536, 3 * 4096 * 1536 * 2.0)
    pairs = rng.random((3, 94, 64)) * rng.choice([1.0, 60.0, 900.0, 20000.0], size=(3, 94, 1))
    pairs[0, :4] = np.round(pairs[0, :4] / TILE_M) * TILE_M * 2     # on tile edges
    pairs[1, 0] = 0.0                                            # no tokens in a layer
    for active in (np.full(pairs.shape, 2.0), np.where(pairs > 0, 2.0, 0.0),
                   rng.integers(0, 3, pairs.shape).astype(float)):
        want = experts_us(pairs, active, even_row_tiles(pairs, active), gemm, params)
        got = even_experts_us(pairs, active, gemm, params)
        assert got.shape == want.shape == (3, 94)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))


def test_a_loaded_profile_is_the_callers_to_change_unless_shared():
    """Calibration changes the profile it loads; the simulator and the cost model only read
    theirs, and share the one read from disk instead of copying it per run."""
    mine = load_profile()
    assert mine.components and mine is not load_profile()
    mine.components.clear()                                 # a caller's change stays its own
    assert load_profile().components and load_profile(shared=True).components
    assert load_profile(shared=True) is load_profile(shared=True)
    # a cost model with no profile named reads its GPU's default, shared, never copied
    assert CostModel(get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200", gpus_per_node=8),
                     DeploymentSpec(ep_size=8)).profile is default_profile("H200")


def test_ring_collective():
    params = {"base_us": 15.0, "overlap_us": 0.0, "nvl_gbps": 100.0, "rdma_gbps": 10.0}
    # all-reduce over 4 ranks in one node: 2 * 3/4 * 1e6 B / 100 GB/s = 15 us
    np.testing.assert_allclose(collective_us(1e6, 4, 1, 2, params), 30.0)
    # across nodes the RDMA link bounds the ring; all-gather moves half of an all-reduce
    np.testing.assert_allclose(collective_us(1e6, 4, 2, 1, params), 15.0 + 75.0)
    assert collective_us(1e6, 1, 1, 2, params) == 0.0
    rows = collective_features(np.array([1e6, 2e6]), 4, 1, 2, params)
    np.testing.assert_allclose(rows @ COLLECTIVE_TERMS.coefficients(params), [30.0, 45.0])
    # fixed work that the transfer hides: 20 us of it covers the 15 us ring, not the 30 us one
    hidden = {**params, "overlap_us": 20.0}
    rows = collective_features(np.array([1e6, 2e6]), 4, 1, 2, hidden)
    np.testing.assert_allclose(rows @ COLLECTIVE_TERMS.coefficients(hidden), [35.0, 45.0])
    np.testing.assert_allclose(collective_us(np.array([1e6, 2e6]), 4, 1, 2, hidden), [35.0, 45.0])


def _cost_model(backend="mooncake", **deployment):
    model = get_model("Qwen3-30B-A3B")
    dep = DeploymentSpec(ep_size=8, moe_a2a_backend=backend, **deployment)
    return CostModel(model, ClusterSpec(gpu="H200"), dep, Profile(name="datasheet", hardware="H200"))


def _decode_batch(ranks=8, per_rank=64, context=1000):
    return BatchCounts.uniform_decode(ranks, per_rank, context)


def test_step_is_sum_of_parts_and_tbo_overlaps(rng):
    model = get_model("Qwen3-30B-A3B")
    tables = build_tables(Placement.on_cluster(contiguous_placement(model.num_moe_layers, 128, 8), 128, 8, 8))
    loads = np.full((model.num_moe_layers, 128), 8 * 64 * 8 / 128)
    plain = _cost_model().step(_decode_batch(), loads, tables)
    parts = (plain.attention_us + plain.dispatch_us + plain.experts_us + plain.combine_us
             + plain.block_ops_us)
    assert (plain.block_ops_us > 0).all()
    np.testing.assert_allclose(plain.layer_us, parts)
    assert plain.step_us == pytest.approx(parts.sum() + plain.dense_us + plain.overhead_us)
    tbo = _cost_model(enable_two_batch_overlap=True).step(_decode_batch(), loads, tables)
    # one node: a receive-hook kernel's NVLink copies are its own SMs' work (epsim.cost.tbo),
    # nothing runs beside the compute stream, so both micro-batches' stages add up
    np.testing.assert_allclose(tbo.layer_us, tbo.attention_us + tbo.dispatch_us + tbo.experts_us
                               + tbo.combine_us + tbo.block_ops_us, rtol=1e-12)
    assert (tbo.dispatch_us > 0).all() and tbo.step_us > plain.step_us  # weights read twice


def test_deepep_kernels_follow_the_phase():
    cm = _cost_model("deepep", deepep_mode="auto")
    model = get_model("Qwen3-30B-A3B")
    tables = build_tables(Placement.on_cluster(contiguous_placement(model.num_moe_layers, 128, 8), 128, 8, 8))
    loads = np.full((model.num_moe_layers, 128), 8 * 64 * 8 / 128)
    decode = cm.step(_decode_batch(), loads, tables)
    prefill_batch = BatchCounts(*(np.zeros(8),) * 2, np.full(8, 64.0), np.full(8, 64.0),
                                np.full(8, 2080.0), np.zeros(8), "prefill")
    prefill = cm.step(prefill_batch, loads, tables)
    assert (decode.mode, prefill.mode) == ("low_latency", "normal")
    assert (decode.traffic.dedup, prefill.traffic.dedup) == ("pair", "node")


def test_profile_overrides_datasheet_defaults_and_hardware_mismatch_warns():
    model = get_model("Qwen3-30B-A3B")
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 8), 128, 8, 8))
    loads = np.full((1, 128), 8 * 256 * 8 / 128)
    tokens = np.full(8, 256.0)
    cluster = ClusterSpec(gpu="H200")
    dep = DeploymentSpec(ep_size=8, moe_a2a_backend="torch")
    datasheet = CostModel(model, cluster, dep, Profile(name="d", hardware="H200"))
    fitted = Profile(name="fit", hardware="H200", components={
        "torch/dispatch": Component(params={"base_us": 99.0, "nvl_gbps": 10.0}, source="fit")})
    slow = CostModel(model, cluster, dep, fitted)
    assert slow.params.eager.dispatch[""].params["rdma_gbps"] == comm_defaults("torch", "", cluster)["rdma_gbps"]
    a, b = datasheet.moe(loads, tokens, tables), slow.moe(loads, tokens, tables)
    assert b.dispatch_us[0] > a.dispatch_us[0] and b.combine_us[0] == a.combine_us[0]
    with pytest.warns(ProfileHardwareWarning, match="measured on H200; the cluster is B200"):
        other = CostModel(model, ClusterSpec(gpu="B200"), dep, fitted)
    b200_defaults = comm_defaults("torch", "", ClusterSpec(gpu="B200"))
    assert other.params.eager.dispatch[""].params == b200_defaults


def test_none_backend_is_allgather_plus_allreduce():
    cm = _cost_model("none")
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 8), 128, 8, 8))
    tokens = np.full(8, 100.0)
    moe = cm.moe(np.full((1, 128), 800 * 8 / 128), tokens, tables)
    hidden_bytes = 800 * 2048 * 2
    # a datasheet profile has no measured `none/allreduce`: both collectives are the all-reduce
    # model's (`epsim.cost.allreduce`, the one owner): the gather its NCCL ring's one pass, the
    # reduce SGLang's all-reduce over the 8 GPUs
    np.testing.assert_allclose(moe.dispatch_us, nccl_allgather_us(hidden_bytes, 8, cm.params, False))
    ring = ring_us(hidden_bytes, 8, 1, cm.params.tp_collectives.allreduce["nccl"], passes=1)
    np.testing.assert_allclose(moe.dispatch_us, float(ring) + cm.params.tp_collectives.host_us)
    np.testing.assert_allclose(moe.combine_us, tp_allreduce_us(hidden_bytes, 8, cm.params, False))


# -- measurement records ------------------------------------------------------------------------
def _record(kind, backend="torch", **fields):
    base = dict(kind=kind, backend=backend, ep_size=2, num_tokens_per_rank=256, hidden_size=2048,
                moe_intermediate_size=768, num_experts=128, top_k=8, dispatch_dtype="bf16",
                median_us=100.0, provenance=Provenance(device="2x NVIDIA H200", hardware="H200"))
    return MeasurementRecord(**{**base, **fields})


def test_predict_record_matches_the_simulator_models():
    profile = Profile(name="datasheet", hardware="H200")
    rec = _record("dispatch", send_tokens_per_rank=[900.0, 1000.0], recv_tokens_per_rank=[1000.0, 900.0])
    params = comm_defaults("torch", "", ClusterSpec(gpu="H200"))
    expected = params["base_us"] + 1000 * (2 * 2048 + 12 * 8) * 1e-3 / params["nvl_gbps"]
    assert predict_record(rec, profile) == pytest.approx(expected)
    feats = record_features(rec, profile)
    assert feats.component == "torch/dispatch" and feats.coef_names[2] == "inv_nvl_gbps"
    experts = _record("experts", local_expert_tokens=[[10.0] * 64, [0.0] * 32 + [20.0] * 32])
    params = CostModel(get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200"),
                       DeploymentSpec(ep_size=2), profile).params.eager
    direct = experts_us(np.array([640.0, 640.0]), np.array([64.0, 32.0]),
                        np.array([64.0, 32.0]), ExpertGemm(2048, 768, 3 * 2048 * 768 * 2.0),
                        params.experts.params)
    # a `torch` experts stage: the kernel model and the block's permute and weighting (its
    # layout work is not fitted in a datasheet profile: not charged)
    inside = block_ops_us(np.full(2, 256.0), np.array([640.0, 640.0]), 2048, 128, 8,
                          params.block_ops.params, ("permute", "combine_weighting"))
    assert predict_record(experts, profile) == pytest.approx(float(direct + inside))
    local = experts.model_copy(update={"backend": "local"})       # one GPU: the kernel alone
    assert predict_record(local, profile) == pytest.approx(float(direct))
    layer = _record("moe_layer", backend="mooncake", send_tokens_per_rank=[900.0, 1000.0],
                    recv_tokens_per_rank=[1000.0, 900.0], local_expert_tokens=[[10.0] * 64] * 2)
    assert predict_record(layer, profile) > predict_record(experts, profile)
    allreduce = _record("allreduce", backend="none")
    # an all-reduce record and the simulator's eager all-reduce over the same 2 GPUs: one model
    assert predict_record(allreduce, profile) == pytest.approx(tp_allreduce_us(
        2 * 256 * 2048 * 2.0, 2, CostModel(get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200"),
                                           DeploymentSpec(ep_size=2), profile).params, False))


def test_record_and_simulator_price_the_expert_signals_alike():
    """A low-latency record pays `expert_signal_us` per physical expert slot, exactly as the
    simulator's `comm_us` does for the same deployment's slots."""
    signal = 0.015
    profile = Profile(name="fit", hardware="H200", components={
        "mooncake/dispatch": Component(params={"expert_signal_us": signal}, source="fit")})
    rec = _record("dispatch", backend="mooncake", send_tokens_per_rank=[900.0, 1000.0],
                  recv_tokens_per_rank=[1000.0, 900.0], local_expert_tokens=[[10.0] * 64] * 2)
    plain = predict_record(rec, Profile(name="datasheet", hardware="H200"))
    assert predict_record(rec, profile) == pytest.approx(plain + 128 * signal)
    redundant = rec.model_copy(update={"num_physical_experts": 160})
    assert predict_record(redundant, profile) == pytest.approx(plain + 160 * signal)
    dep = DeploymentSpec(ep_size=8, moe_a2a_backend="mooncake")
    fitted = CostModel(get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200"), dep,
                       Profile(name="fit", hardware="H200", components={
                           "mooncake/dispatch": Component(params={"expert_signal_us": signal},
                                                          source="fit")}))
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 8), 128, 8, 8))
    loads, tokens = np.full((1, 128), 800 * 8 / 128), np.full(8, 100.0)
    moe = fitted.moe(loads, tokens, tables)
    np.testing.assert_allclose(moe.dispatch_us - _cost_model().moe(loads, tokens, tables).dispatch_us,
                               128 * signal)


def test_predict_record_errors_name_the_problem():
    profile = Profile(name="datasheet", hardware="H200")
    with pytest.raises(RecordError, match=r"send_tokens_per_rank \(empty\) must hold ep_size \(2\) counts"):
        predict_record(_record("dispatch"), profile)
    with pytest.raises(ProfileError, match=r"kind \('rebalance'\) must be one of"):
        predict_record(_record("rebalance"), profile)
    with pytest.raises(RecordError, match=r"mode \('fast'\) must be one of"):
        predict_record(_record("combine", backend="deepep", mode="fast", send_tokens_per_rank=[1, 1],
                               recv_tokens_per_rank=[1, 1]), profile)


def test_uniform_decode_counts():
    batch = _decode_batch(4, 10, 100)
    np.testing.assert_allclose(batch.tokens, 10)
    np.testing.assert_allclose(batch.scaled(0.5).decode_context, 500)


def test_moe_traffic_is_the_traffic_function(rng):
    cm = _cost_model("torch")
    tables = build_tables(Placement.on_cluster(contiguous_placement(2, 128, 8), 128, 8, 8))
    loads = rng.random((2, 128)) * 100
    tokens = np.full(8, loads.sum(axis=1)[0] / 8 / 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moe = cm.moe(loads, tokens, tables)
    np.testing.assert_allclose(moe.traffic.nvl_recv, count_traffic(loads, tokens, tables, "rank").nvl_recv)


def test_carried_comm_rates_scale_the_link_and_hbm_rates_only():
    """A DeepEP fit on H200 priced on B200 (the system hold-out): a low-latency kernel's
    NVLink rate x 900 / 450 and its spill rate x the HBM ratio; DeepEP normal's link rate
    (its `num_sms` channels pace it) and every fixed cost kept; the same GPU unchanged."""
    from epsim.cost.comm import carried_comm_rates
    h200, b200 = get_hardware("H200"), get_hardware("B200")
    fitted = {"base_us": 9.0, "nvl_gbps": 233.0, "spill_gbps": 2000.0, "rdma_gbps": 46.0,
              "slot_us_per_kb": 0.01, "expert_signal_us": 0.005}
    assert carried_comm_rates(fitted, h200, h200) == fitted
    ll = carried_comm_rates(fitted, h200, b200)
    assert ll["nvl_gbps"] == pytest.approx(233.0 * b200.nvlink_gbps / h200.nvlink_gbps)
    assert ll["spill_gbps"] == pytest.approx(2000.0 * b200.hbm_gbps / h200.hbm_gbps)
    assert {k: ll[k] for k in ("base_us", "rdma_gbps", "slot_us_per_kb", "expert_signal_us")} \
        == {k: fitted[k] for k in ("base_us", "rdma_gbps", "slot_us_per_kb", "expert_signal_us")}
    normal = carried_comm_rates({"base_us": 32.0, "nvl_gbps": 332.0}, h200, b200, link_bound=False)
    assert normal == {"base_us": 32.0, "nvl_gbps": 332.0}
