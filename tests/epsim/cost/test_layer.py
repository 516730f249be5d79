"""One cost path per stage at every EP size (issue 40): the experts are the kernel model for
every backend, a backend adds only its own measured work and its communication, nothing
crosses a GPU at EP 1; the public layer cost names what priced each part; the attention
block's own ops are their own term."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim import vocab
from epsim.commands.cost import layer_cost as cli_layer_cost
from epsim.cost import BatchCounts, CostModel, build_tables, contiguous_placement
from epsim.cost.attention_ops import KERNELS, BlockOps, attention_ops_us, block_ops
from epsim.cost.block_ops import PARTS, block_ops_us
from epsim.cost.experts import even_experts_us
from epsim.cost.layout import layout_us
from epsim.eplb import Placement
from epsim.profile import Component, load_profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

MODEL = "Qwen3-30B-A3B"


def _layer(backend: str, ep: int, tokens: float, profile=None, context: float = 2048.0, **spec):
    model = get_model(MODEL)
    spec.setdefault("dispatch_dtype", "bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # fits outside their EP range
        cm = CostModel(model, ClusterSpec(gpu="H200", num_nodes=max(1, ep // 8)),
                       DeploymentSpec(ep_size=ep, moe_a2a_backend=backend, **spec),
                       profile or load_profile())
        tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, ep), 128, ep, 8))
        dp = cm.params.parallel.dp_size                     # a batch per attention group
        loads = np.full((1, 128), dp * tokens * 8 / 128)
        return cm, cm.layer(BatchCounts.uniform_decode(dp, tokens, context), loads, tables)


@pytest.mark.parametrize("tokens", [8, 64, 256])
def test_ep1_is_the_kernel_and_the_block_ops_for_every_backend(tokens):
    """At EP 1 one GPU holds every expert: whatever the backend's name, the layer is the kernel
    model plus the block's three ops (plus attention), with no dispatch, combine, backend
    layout or layer sync."""
    layers = {}
    for backend in vocab.A2A_BACKENDS:
        cm, layer = _layer(backend, 1, tokens)
        for name in ("dispatch", "combine", "layout", "sync"):
            assert layer.part(name)[0] == 0.0, (backend, name)
        assert layer.component("experts") == "any/experts/graph"
        kernel = even_experts_us(np.array([tokens * 8.0]), np.array([128.0]), cm.params.gemm,
                                 cm.params.graph.experts.params)
        assert layer.part("experts")[0] == pytest.approx(float(kernel), rel=1e-12)
        block = block_ops_us(np.array([float(tokens)]), np.array([tokens * 8.0]), 2048, 128, 8,
                             cm.params.graph.block_ops.params, PARTS,
                             cm.params.graph.block_ops_engine)
        assert layer.part("block_ops")[0] == pytest.approx(float(block), rel=1e-12)
        layers[backend] = layer.layer_us[0]
    assert len(set(layers.values())) == 1, layers


def test_cost_cli_at_ep1_is_equal_across_backends_and_charges_no_communication():
    results = {b: cli_layer_cost(get_model(MODEL), "H200", b, 1, 64) for b in vocab.A2A_BACKENDS}
    for b, r in results.items():
        assert r["dispatch_us"] == r["combine_us"] == 0.0, b
        assert r["layout_us"] == 0.0 and r["block_ops_parts"] == list(PARTS)
    assert len({r["layer_us"] for r in results.values()}) == 1


@pytest.mark.parametrize("backend", vocab.A2A_BACKENDS)
def test_every_stage_is_monotone_in_ep(backend):
    """A fixed batch per rank on one node, EP 1 -> 8: the kernel's work per rank shrinks (the
    same pairs over fewer experts), the communication grows (a larger share of each rank's
    copies leaves it), a backend's layout work follows the pairs a rank receives (as many at
    every EP size here); the block ops do not depend on EP beyond what the backend's kernels take
    over from EP 2."""
    eps = (1, 2, 4, 8)
    layers = [_layer(backend, ep, 128)[1] for ep in eps]
    experts = [lay.part("experts")[0] for lay in layers]
    comm = [lay.part("dispatch")[0] + lay.part("combine")[0] for lay in layers]
    layout = [lay.part("layout")[0] for lay in layers]
    block = [lay.part("block_ops")[0] for lay in layers]
    assert all(a >= b for a, b in zip(experts, experts[1:])), experts
    assert comm[0] == 0.0 and all(c > 0 for c in comm[1:])
    assert all(a <= b * (1 + 1e-9) for a, b in zip(comm[1:], comm[2:])), comm
    assert all(a <= b for a, b in zip(layout, layout[1:])), layout
    assert len(set(np.round(block[1:], 9))) == 1 and block[1] <= block[0]


def test_a_low_latency_backend_prices_its_own_layout_where_measured():
    """Mooncake's measured layout (a gather and a scatter of each pair a rank receives,
    `epsim.cost.layout`) is priced from EP 2 over the kernel; DeepEP low-latency, unmeasured,
    adds none: its kernels' layout is what a serving engine's grouped GEMM reads."""
    cm, layer = _layer("mooncake", 8, 128)
    params = cm.params.graph.layout[""]
    assert layer.component("layout") == "mooncake/layout/graph"
    pairs = 128.0 * 8                                    # balanced: every rank's own share
    assert layer.part("layout")[0] == pytest.approx(float(layout_us(pairs, 2048, params.params)))
    assert layer.part("block_ops_in_comm")[0] > 0         # the permute and weighting it replaces
    _, deepep = _layer("deepep", 8, 128)
    assert deepep.part("layout")[0] == 0.0 and deepep.component("layout") == ""
    assert deepep.part("experts")[0] == pytest.approx(layer.part("experts")[0], rel=1e-12)


@pytest.mark.parametrize("tbo,ep", [(False, 8), (True, 8), (True, 16)])
def test_the_charged_parts_add_up_to_the_layer(tbo, ep):
    _, layer = _layer("mooncake", ep, 128, enable_two_batch_overlap=tbo)
    charged = sum(p.us for p in layer.parts if p.charged)
    if tbo and ep > 8:   # two nodes: the RDMA bytes move beside the other micro-batch's stages
        assert layer.layer_us[0] < charged[0]
    else:                # one node: the copies are the sending SMs' work, nothing hides
        assert layer.layer_us[0] == pytest.approx(charged[0], rel=1e-12)
    assert all(p.us[0] >= 0 for p in layer.parts if p.name != "sync")


def test_attention_ops_are_charged_where_fitted_only():
    """The attention block's norms, RoPE, KV write and residual: per token bytes plus a launch
    floor where the profile holds their fit; a profile without it prices attention as before."""
    profile = load_profile()
    assert "any/attention_ops/graph" in profile.components
    cm, with_ops = _layer("none", 1, 64, profile)
    bare = profile.model_copy(deep=True)
    del bare.components["any/attention_ops/graph"]
    _, without = _layer("none", 1, 64, bare)
    ops = attention_ops_us(np.array([64.0]), block_ops(get_model(MODEL)), cm.params.attention_ops)
    assert with_ops.part("attention_ops")[0] == pytest.approx(float(ops[0]))
    assert without.part("attention_ops")[0] == 0.0
    assert with_ops.part("attention")[0] == pytest.approx(without.part("attention")[0])
    assert with_ops.layer_us[0] - without.layer_us[0] == pytest.approx(float(ops[0]))
    launch = cm.params.attention_ops["launch_us"]
    kernels = cm.params.attention_block_ops.kernels             # a deployment's: SGLang's
    assert 1.0 < launch < 5.0 and ops[0] > kernels * launch       # a floor plus bytes


def test_attention_ops_bytes_follow_the_block_widths():
    """transformers, GQA: 42 H + 56 Q + 64 K + 24 rows per token (Qwen3-30B-A3B: H 2048, Q
    4096, K 512, 37 RMSNorm rows); MLA over its latent widths."""
    qwen = block_ops(get_model(MODEL), "transformers")
    assert qwen == BlockOps(KERNELS, 42 * 2048 + 56 * 4096 + 64 * 512 + 24 * 37)
    ds = get_model("DeepSeek-V3")
    expected = (36 * (7168 + ds.q_lora_rank + ds.kv_lora_rank) + 24 * 3
                + 20 * (128 * ds.qk_rope_head_dim + ds.qk_rope_head_dim)
                + 4 * (ds.kv_lora_rank + ds.qk_rope_head_dim) + 6 * 7168)
    assert block_ops(ds, "transformers").bytes_per_token == expected


def test_sglang_attention_ops_are_its_fused_kernels():
    """SGLang's block (counted from its code, `epsim.cost.attention_ops`): two fused
    add-RMSNorms over H, the head norms (overlapped on two streams: one launch), RoPE and the
    KV write in place; GQA adds its two projection GEMMs (no fixed term in their roofline) and,
    FP8, an activation quant before each; MLA block-FP8 the three projections' activation
    quant (its BMMs are BF16: the block-FP8 `kv_b_proj` is dequantised at load), MLA with
    per-tensor FP8 also the BMMs' quant, zeroed scale and output copy."""
    qwen = block_ops(get_model(MODEL))
    assert qwen == BlockOps(7, 16 * 2048 + 8 * 4096 + 16 * 512)
    ds = get_model("DeepSeek-V3")
    assert (ds.dense_weight_dtype or ds.weight_dtype) == "fp8_block"
    latent = ds.q_lora_rank + ds.kv_lora_rank + ds.kv_lora_rank + ds.qk_rope_head_dim
    rope = 128 * ds.qk_rope_head_dim + ds.qk_rope_head_dim
    assert block_ops(ds) == BlockOps(8, 16 * 7168 + 4 * (latent + rope))
    per_tensor = block_ops(ds.model_copy(update={"weight_dtype": "fp8"}))
    assert per_tensor == BlockOps(13, 16 * 7168 + 4 * (latent + rope + 128 * ds.v_head_dim))
    assert block_ops(ds, tp_size=8).kernels == 8
    assert qwen.bytes_per_token < block_ops(get_model(MODEL), "transformers").bytes_per_token / 4
    with pytest.raises(ValueError, match="engine"):
        block_ops(ds, "vllm")


def test_allreduce_fusion_takes_the_two_add_norms_into_the_tp_allreduce():
    """SGLang's `enable_flashinfer_allreduce_fusion` at attention TP > 1: a decoder layer's two
    add-RMSNorms run inside the all-reduces before them at batches of <= 2048 tokens
    (`apply_flashinfer_allreduce_fusion`), two launches fewer and the same bytes; one GPU has no
    all-reduce, and transformers' block no fusion."""
    from epsim.cost.attention_ops import FUSED_ALLREDUCE_MAX_TOKENS
    ds = get_model("DeepSeek-V3")
    plain, fused = block_ops(ds, tp_size=8), block_ops(ds, tp_size=8, allreduce_fusion=True)
    assert fused == BlockOps(plain.kernels, plain.bytes_per_token, 2)
    assert block_ops(ds, tp_size=1, allreduce_fusion=True).fused_norms == 0
    assert block_ops(ds, "transformers", 8, allreduce_fusion=True).fused_norms == 0
    params = {"launch_us": 2.4, "hbm_gbps": 2600.0}
    tokens = np.array([0.0, 4.0, FUSED_ALLREDUCE_MAX_TOKENS, FUSED_ALLREDUCE_MAX_TOKENS + 1.0])
    saved = attention_ops_us(tokens, plain, params) - attention_ops_us(tokens, fused, params)
    assert saved == pytest.approx([0.0, 2 * 2.4, 2 * 2.4, 0.0])
    assert fused.launches(tokens).tolist() == [0.0, 6.0, 6.0, 8.0]


def test_a_backend_experts_fit_never_replaces_the_kernel_model():
    """An old profile's backend experts stage fit (`none/experts`: the two-GPU eager stage,
    ~1 ms flat) is not read: the kernel model prices the experts."""
    profile = load_profile()
    old = profile.model_copy(deep=True)
    old.components["none/experts"] = Component(params={"base_us": 865.0, "per_expert_us": 0.0,
                                                       "hbm_gbps": 3275.0, "tflops": 588.0})
    _, new = _layer("none", 2, 64, profile)
    _, stale = _layer("none", 2, 64, old)
    assert stale.part("experts")[0] == new.part("experts")[0]
    assert stale.component("experts") == "any/experts/graph"


def test_moe_tp_at_ep1_still_reduces_over_its_gpus():
    """EP 1 is one GPU only without MoE-TP: `none` at EP 1 over 8 GPUs (each expert's
    intermediate split eight ways) sums the shards' outputs with its all-reduce: SGLang's, by
    the all-reduce model (`any/allreduce/graph/*`, which `h200x2` alone does not fit: its
    datasheet values, no component named), not the two-GPU eager `none/allreduce`."""
    _, one = _layer("none", 1, 64)
    _, tp = _layer("none", 1, 64, tp_size=8)
    assert one.part("combine")[0] == 0.0
    assert tp.part("combine")[0] > 0 and tp.component("combine") == ""
    assert tp.part("experts")[0] < one.part("experts")[0]      # an eighth of each expert
