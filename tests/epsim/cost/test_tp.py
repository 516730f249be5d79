"""Tensor parallelism in a step (`epsim.cost.tp`, `epsim.cost.attention`): attention TP splits
heads and projections (MLA's latent KV not), the collectives SGLang runs around it, the tokens
each EP rank dispatches, MoE-TP's split experts and its reduce, and the number formats a
deployment serves (KV-cache dtype, quantization)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.allreduce import ring_us
from epsim.cost.attention import BatchCounts, attention_work, kv_share
from epsim.cost.tp import (_span, attention_collectives_us, none_collectives_us,
                           tp_allreduce_us)
from epsim.eplb import Placement
from epsim.profile import Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

DATASHEET = Profile(name="datasheet", hardware="H200")     # no fits: the rooflines


def _cm(model: str = "Qwen3-235B-A22B", gpu: str = "H200", nodes: int = 1,
        profile: Profile | None = DATASHEET, **deployment) -> CostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(get_model(model), ClusterSpec(gpu=gpu, num_nodes=nodes),
                         DeploymentSpec(**deployment), profile)


def test_kv_share_splits_gqa_heads_but_not_mla_latent():
    qwen, r1 = get_model("Qwen3-235B-A22B"), get_model("DeepSeek-R1")    # 4 KV heads; MLA
    assert [kv_share(qwen, tp) for tp in (1, 2, 4, 8)] == [1.0, 0.5, 0.25, 0.25]   # replicated
    assert kv_share(r1, 8) == 1.0


def test_attention_tp_splits_weights_and_flops_not_mla_kv():
    batch = BatchCounts.uniform_decode(1, 256, 4096.0)
    for name in ("Qwen3-235B-A22B", "DeepSeek-R1"):
        m = get_model(name)
        one_bytes, one_flops = attention_work(batch, m)
        tp_bytes, tp_flops = attention_work(batch, m, 8)
        np.testing.assert_allclose(tp_flops, one_flops / 8)
        kv = m.kv_bytes_per_token_per_layer * (256 * 4096.0 + 256)
        weights = m.attention_params * m.dense_weight_bytes_per_param
        np.testing.assert_allclose(tp_bytes, weights / 8 + kv * kv_share(m, 8))
        np.testing.assert_allclose(one_bytes, weights + kv)


def test_collectives_around_attention():
    """All-to-all MoE backends: a reduce-scatter and an all-gather (NCCL ring passes) over the
    attention group; `none`: one SGLang all-reduce; none with one GPU per group."""
    batch = BatchCounts.uniform_decode(1, 64, 1024.0)
    size = 64 * 4096 * 2.0
    a2a = _cm(ep_size=8, enable_dp_attention=False)
    ring = float(ring_us(size, 8, 1, a2a.params.tp_collectives.allreduce["nccl"], passes=1))
    assert attention_collectives_us(a2a.params, batch, True) == pytest.approx(2 * ring)
    none = _cm(ep_size=8, enable_dp_attention=False, moe_a2a_backend="none")
    assert attention_collectives_us(none.params, batch, True) == pytest.approx(
        tp_allreduce_us(size, 8, none.params, True))
    assert tp_allreduce_us(size, 8, none.params, True) < 2 * ring      # custom one-shot vs NCCL
    dp = _cm(ep_size=8)
    assert attention_collectives_us(dp.params, BatchCounts.uniform_decode(8, 64, 1024.0), True) == 0.0
    # two DP groups of four GPUs: the busiest group's tokens over its 4 GPUs
    groups = _cm(ep_size=8, dp_size=2)
    two = BatchCounts(np.array([64.0, 32.0]), np.array([64.0, 32.0]) * 1024, np.zeros(2),
                      np.zeros(2), np.zeros(2), np.array([64.0, 32.0]))
    assert attention_collectives_us(groups.params, two, True) == pytest.approx(
        2 * float(ring_us(size, 4, 1, groups.params.tp_collectives.allreduce["nccl"], passes=1)))


def test_an_eager_step_adds_the_profiles_host_overhead_per_collective():
    from epsim.profile import Component
    host = Profile(name="host", hardware="H200", components={
        "any/allreduce/host": Component(params={"base_us": 12.0}, source="fit")})
    cm = _cm(ep_size=8, enable_dp_attention=False, moe_a2a_backend="none", profile=host)
    assert cm.params.tp_collectives.host_us == 12.0
    assert tp_allreduce_us(1e6, 8, cm.params, False) == pytest.approx(
        tp_allreduce_us(1e6, 8, cm.params, True) + 12.0)


def test_span_of_a_group_and_the_custom_kernel_within_a_host():
    params = SimpleNamespace(tp_collectives=SimpleNamespace(gpus_per_node=72, gpus_per_host=4))
    assert _span(params, 8) == (1, 2) and _span(params, 4) == (1, 1)
    gb200 = _cm(gpu="GB200", profile=None, ep_size=8, enable_dp_attention=False,
                moe_a2a_backend="none")
    assert gb200.params.tp_collectives.gpus_per_host == 4
    nccl = float(ring_us(1e5, 8, 1, gb200.params.tp_collectives.allreduce["nccl"]))
    assert tp_allreduce_us(1e5, 8, gb200.params, True) == pytest.approx(nccl)


def test_ep_tokens_follow_the_layout():
    """One GPU per DP group: its own tokens; attention groups of several GPUs scatter their
    tokens evenly over them; an EP rank of moe_tp GPUs counts all of theirs."""
    b = BatchCounts(np.array([64.0, 32.0]), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2),
                    np.array([64.0, 32.0]))
    np.testing.assert_array_equal(_cm(ep_size=8, dp_size=2).ep_tokens(b), [16] * 4 + [8] * 4)
    one = BatchCounts.uniform_decode(1, 512, 1.0)
    np.testing.assert_array_equal(_cm(ep_size=8, enable_dp_attention=False).ep_tokens(one), [64] * 8)
    moe_tp = _cm(ep_size=2, tp_size=8, moe_a2a_backend="none", enable_dp_attention=False)
    np.testing.assert_array_equal(moe_tp.ep_tokens(one), [256, 256])


def test_moe_tp_splits_each_expert_and_reduces_over_every_gpu():
    ep = _cm(model="Qwen3-235B-A22B-FP8", ep_size=8, moe_a2a_backend="none")
    split = _cm(model="Qwen3-235B-A22B-FP8", ep_size=2, tp_size=8, moe_a2a_backend="none")
    assert (split.params.num_ranks, split.params.parallel.moe_tp_size) == (2, 4)
    assert split.params.gemm.intermediate_size == 1536 // 4
    assert split.params.gemm.weight_bytes == pytest.approx(ep.params.gemm.weight_bytes / 4)
    gather, reduce = none_collectives_us(split.params, 512.0, True)
    assert float(reduce) == pytest.approx(tp_allreduce_us(512 * 4096 * 2.0, 8, split.params, True))
    # the same all-reduce as EP's (one collective over the tp_size GPUs sums both)
    assert none_collectives_us(ep.params, 512.0, True)[1] == pytest.approx(float(reduce))
    assert float(gather) > 0                                   # DP attention: gathered first
    no_dp = _cm(model="Qwen3-235B-A22B-FP8", ep_size=2, tp_size=8, moe_a2a_backend="none",
                enable_dp_attention=False)
    assert float(none_collectives_us(no_dp.params, 512.0, True)[0]) == 0.0
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 2), 128, 2, 8))
    loads = np.full((1, 128), 512 * 8 / 128)
    half = split.moe(loads, np.full(2, 256.0), tables, graph=True)
    assert float(half.experts_us[0]) > 0 and float(half.combine_us[0]) == pytest.approx(float(reduce))


def test_kv_cache_dtype_halves_the_kv_bytes():
    batch = BatchCounts.uniform_decode(8, 64, 8192.0)
    bf16 = _cm(ep_size=8)._attention_layer_us(batch)
    fp8 = _cm(ep_size=8, kv_cache_dtype="fp8_e4m3")._attention_layer_us(batch)
    assert fp8 < 0.75 * bf16                               # KV reads dominate at 8k context
    # the fitted flash kernels read it too: fewer KV bytes, never more time
    kernels_bf16 = _cm(ep_size=8, profile=None)._attention_layer_us(batch)
    kernels_fp8 = _cm(ep_size=8, profile=None, kv_cache_dtype="fp8_e4m3")._attention_layer_us(batch)
    assert kernels_fp8 <= kernels_bf16


def test_quantization_serves_the_weights_in_its_format():
    bf16 = _cm(ep_size=8)
    fp8 = _cm(ep_size=8, quantization="fp8")
    assert fp8.model.weight_dtype == "fp8" and bf16.model is get_model("Qwen3-235B-A22B")
    assert fp8.params.gemm.weight_bytes == pytest.approx(bf16.params.gemm.weight_bytes / 2)
    assert (fp8.params.eager.experts.params["tflops"]
            == pytest.approx(2 * bf16.params.eager.experts.params["tflops"], rel=1e-3))  # FP8
    fp4 = _cm(model="DeepSeek-R1", gpu="B200", ep_size=8, quantization="modelopt_fp4")
    assert fp4.model.weight_dtype == "nvfp4" and fp4.model.dense_weight_dtype == "bf16"


def test_an_eager_moe_reduce_keeps_the_measured_fit_on_the_gpus_it_was_measured_on():
    """The shipped H200 profile's `none/allreduce` (the live block's, two GPUs) prices an eager
    reduce over two GPUs; over eight, beyond its range, the eager reduce is the all-reduce
    model's with its host, as TP attention's."""
    from epsim.cost.comm import collective_us
    from epsim.default_profile import default_profile
    profile = default_profile("H200")
    assert profile.components["none/allreduce"].valid_range["ep_size"] == [2.0, 2.0]
    two = _cm(model="DeepSeek-R1", profile=profile, ep_size=1, tp_size=2, moe_a2a_backend="none",
              enable_dp_attention=False)
    eight = _cm(model="DeepSeek-R1", profile=profile, ep_size=1, tp_size=8, moe_a2a_backend="none",
                enable_dp_attention=False)
    num_bytes = 8192 * 7168 * 2.0
    measured = collective_us(num_bytes, 2, 1, 2, two.params.collectives.allreduce)
    assert none_collectives_us(two.params, 8192.0, False)[1] == pytest.approx(float(measured))
    model = tp_allreduce_us(num_bytes, 8, eight.params, False)
    assert none_collectives_us(eight.params, 8192.0, False)[1] == pytest.approx(model)
    stretched = float(collective_us(num_bytes, 8, 1, 2, eight.params.collectives.allreduce))
    assert model < stretched
    # a CUDA-graph step prices both by the all-reduce model, as before
    assert none_collectives_us(two.params, 8192.0, True)[1] == pytest.approx(
        tp_allreduce_us(num_bytes, 2, two.params, True))


def test_fp4_allgather_gathers_nvfp4_and_reduce_scatters_once():
    """SGLang's FP4 all-gather (flashinfer_cutlass, DP attention, EP = DP): the gather moves
    NVFP4 values, scales and top-k (4,096 bytes a DeepSeek token, not BF16's 14,336) and the
    reduce is one reduce-scatter pass, so both fall below the BF16 all-gather and all-reduce;
    the layout it needs is checked."""
    from epsim.cost.tp import fp4_gather_bytes_per_token, nccl_allgather_us
    r1 = get_model("DeepSeek-R1")
    assert fp4_gather_bytes_per_token(r1.hidden_size, r1.top_k) == 3584 + 448 + 64
    layout = dict(model="DeepSeek-R1", gpu="GB200", ep_size=4, tp_size=4, dp_size=4,
                  moe_a2a_backend="none")
    bf16, fp4 = _cm(**layout), _cm(**layout, moe_fp4_allgather=True)
    tokens = 65536.0
    for graph in (True, False):
        gather, reduce = none_collectives_us(fp4.params, tokens, graph)
        assert gather == pytest.approx(nccl_allgather_us(tokens * 4096, 4, fp4.params, graph))
        assert reduce == pytest.approx(
            nccl_allgather_us(tokens * r1.hidden_size * 2.0, 4, fp4.params, graph))
        old_gather, old_reduce = none_collectives_us(bf16.params, tokens, graph)
        assert gather < 0.5 * old_gather and reduce < old_reduce
    with pytest.raises(ValueError, match="moe_fp4_allgather needs"):
        DeploymentSpec(ep_size=4, tp_size=4, dp_size=4, moe_a2a_backend="deepep",
                       moe_fp4_allgather=True)
    with pytest.raises(ValueError, match="moe_fp4_allgather needs"):
        DeploymentSpec(ep_size=4, tp_size=4, moe_a2a_backend="none", enable_dp_attention=False,
                       moe_fp4_allgather=True)
