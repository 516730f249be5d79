"""The block on one device equals transformers' Qwen3MoeSparseMoeBlock on the same weights."""

import pytest
import torch

from live.block import Qwen3MoeSparseMoeBlock
from live.config import MoeConfig
from live.errors import LiveError
from live.routing import Routing
from live.weights import fused_names, random_weights


def _block(config, weights, **kwargs):
    block = Qwen3MoeSparseMoeBlock(config, **kwargs)
    router, gate_up, down = fused_names(0)
    block.bind_fused(weights[router], weights[gate_up], weights[down])
    return block


@pytest.fixture
def config(tiny):
    return MoeConfig(hidden_size=tiny.hidden_size, moe_intermediate_size=tiny.moe_intermediate_size,
                     num_experts=tiny.num_experts, top_k=tiny.top_k, num_layers=tiny.num_layers)


@pytest.mark.parametrize("hf_impl", ["eager", "grouped_mm"])
@pytest.mark.parametrize("ours", ["loop", "grouped_mm"])
@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_equals_transformers_block_fp32(config, hf_impl, ours, norm_topk_prob):
    modeling = pytest.importorskip("transformers.models.qwen3_moe.modeling_qwen3_moe",
                                   reason="transformers is not installed (dev extra)")
    if ours == "grouped_mm" and not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch._grouped_mm is missing in this torch build")
    config = MoeConfig(**{**config.__dict__, "norm_topk_prob": norm_topk_prob})
    weights = random_weights(config, [0], seed=11)
    router, gate_up, down = fused_names(0)
    hf = modeling.Qwen3MoeSparseMoeBlock(config.hf_config(hf_impl))
    hf.gate.weight.data.copy_(weights[router])
    hf.experts.gate_up_proj.data.copy_(weights[gate_up])
    hf.experts.down_proj.data.copy_(weights[down])
    x = torch.randn(3, 7, config.hidden_size, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = hf(x)
        got = _block(config, weights, experts_impl=ours)(x)
    assert got.shape == x.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_forced_routing_of_the_routers_choice_gives_the_same_output(config):
    weights = random_weights(config, [0], seed=2)
    block = _block(config, weights)
    x = torch.randn(9, config.hidden_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        routed = block(x)
        forced = block(x, routing=block.route(x))
    torch.testing.assert_close(forced, routed)
    assert block.last_routing.topk_ids.shape == (9, config.top_k)


def test_forced_routing_sends_tokens_where_told_and_counts_them(config):
    block = _block(config, random_weights(config, [0], seed=3))
    ids = torch.tensor([[0, 5], [5, 7], [5, 1]])
    ones = Routing(ids, torch.ones(3, 2))
    with torch.no_grad():
        out = block(torch.randn(3, config.hidden_size), routing=ones,
                    expert_fn=lambda rows, counts: torch.ones_like(rows))
    torch.testing.assert_close(out, torch.full_like(out, 2.0))      # top_k pairs per token
    stats = block.last_stats.to_host()
    assert stats["local_expert_tokens"] == [1, 1, 0, 0, 0, 3, 0, 1]
    assert stats["recv_tokens_from_rank"] == [3] and stats["send_tokens_to_rank"] == [3]


def test_block_arguments_are_checked(config):
    with pytest.raises(LiveError, match=r"layer_id \(2\) must be in \[0, 2\)"):
        Qwen3MoeSparseMoeBlock(config, layer_id=2)
    with pytest.raises(LiveError, match=r"dispatch_mode \('nearest'\) must be one of static, random"):
        Qwen3MoeSparseMoeBlock(config, dispatch_mode="nearest")
    with pytest.raises(LiveError, match=r"top_k \(9\) must be <= num_experts \(8\)"):
        MoeConfig(hidden_size=8, moe_intermediate_size=8, num_experts=8, top_k=9)
    with pytest.raises(LiveError, match=r"hidden_size \(0\) must be a positive integer"):
        MoeConfig(hidden_size=0, moe_intermediate_size=8, num_experts=8, top_k=2)


def test_config_from_the_zoo():
    from epsim.zoo import get_model

    config = MoeConfig.from_model_spec(get_model("Qwen3-235B-A22B"))
    assert (config.hidden_size, config.moe_intermediate_size, config.num_experts,
            config.top_k) == (4096, 1536, 128, 8)
    assert config.num_layers == 94


def test_all_local_pairs_equal_the_nonzero_path():
    """One rank: the sync-free pairs (what a CUDA graph captures) are the nonzero path's."""
    import torch

    from live.backends.base import pairs_by_slot
    slots = torch.randint(0, 16, (37, 4), generator=torch.Generator().manual_seed(3))
    for a, b in zip(pairs_by_slot(slots, 16), pairs_by_slot(slots, 16, all_local=True)):
        assert torch.equal(a, b)


def test_kernel_counts_of_the_block_ops_model_are_the_blocks_ops():
    """`epsim.cost.block_ops.KERNELS` (the per-launch term's launches) counts the aten ops each
    part of the live block dispatches in BF16 (views and scalars launch no kernel)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from epsim.cost.block_ops import GATE, KERNELS, PARTS
    from live.bench.component_ops import Point, WeightCache, build_op
    from live.bench.components import CPU_EXPERTS
    no_kernel = {"view", "t", "unsqueeze", "slice", "scalar_tensor", "_unsafe_view", "expand",
                 "alias"}

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] not in no_kernel:
                self.ops.append(func.__name__)
            return func(*args, **(kwargs or {}))

    cache = WeightCache(torch.device("cpu"), torch.bfloat16, 0)
    whole, fields = build_op(Point("block_ops", CPU_EXPERTS, 8), cache, 0, 0)
    counted = {}
    for name, op in [("all", whole), *fields["parts"].items()]:
        with torch.no_grad(), Count() as count:
            op()
        counted[name] = len(count.ops)
        if name == "router":              # CPU casts before the softmax; CUDA's fp32 softmax
            assert count.ops.count("_to_copy.default") == 1    # reads BF16 (half_to_float)
            counted[name] -= 1
            # the gate GEMM alone (`GATE`, priced beside a fit that timed its own top-k) is the
            # router's linear
            counted[GATE] = sum(op.split(".")[0] in ("mm", "addmm") for op in count.ops)
    counted["all"] -= 1
    assert {k: counted[k] for k in KERNELS} == KERNELS
    assert counted["all"] == sum(KERNELS[k] for k in PARTS)
