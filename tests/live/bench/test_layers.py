"""The whole-layer bench (`live.bench.layers`): its grid, its records (run for real on the CPU,
tiny shapes), and that what it times is transformers' layer and a virtual EP rank's share."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from epsim.records import read_records
from live.bench.component_ops import Point, expert_rows
from live.bench.layer_ops import (DEEPSEEK_LIKE, Layer, StaticKV, decode_inputs, group_rows,
                                  rank_inputs)
from live.bench.layers import CPU_SHAPES, main, plan_layers, run_layers
from live.errors import LiveError
from live.experts import swiglu_mlp

TINY, TINY_SHARED = CPU_SHAPES


def test_cpu_run_writes_every_kind_as_valid_records(tmp_path):
    plan = plan_layers("cpu", quick=True, models=[TINY_SHARED.name])
    result = run_layers(plan, tmp_path / "l.jsonl", progress=False)
    records = read_records(tmp_path / "l.jsonl")
    assert result.num_records == len(records) == len(plan.points) == result.num_points
    assert not result.skipped
    assert {r.kind for r in records} == {"decoder_layer", "layer_stack", "layer_part",
                                         "attention_decode", "experts", "block_ops", "dense_mlp"}
    assert {r.extra["part"] for r in records if r.kind == "layer_part"} == {
        "attention_block", "moe_block", "experts_module", "router"}
    for r in records:
        assert r.timing == "eager" and r.backend == "local" and r.provenance.device == "1x cpu"
        assert r.provenance.model_extra["transformers"]
        assert 0 < r.p10_us <= r.median_us <= r.p90_us and r.num_iters == plan.num_iters
    for r in records:
        if r.kind in ("decoder_layer", "layer_stack") or r.extra.get("part") == "moe_block":
            rows = np.array(r.local_expert_tokens)                     # [ranks, local experts]
            assert rows.shape == (r.ep_size, r.num_experts // r.ep_size)
            assert rows.sum() == r.ep_size * r.num_seqs * r.top_k   # every pair (an exact draw)
            assert rows[0].sum() == rows.sum(axis=1).max() == r.extra["rows"]   # busiest first
    layers = [r for r in records if r.kind == "decoder_layer"]
    assert {r.ep_size for r in layers} == {1, 2}
    assert all(r.extra["kernel"].startswith("sdpa/") and r.context_len for r in layers)
    assert [r.num_layers for r in records if r.kind == "layer_stack"] == [2]


def test_grid_covers_the_issue():
    plan = plan_layers("cuda")
    layers = [p for p in plan.points if p.kind == "decoder_layer"]
    assert {p.shape.name for p in layers} == {"Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-like"}
    assert {p.ep_size for p in layers} == {1, 2, 4, 8, 16}
    assert min(p.num_seqs for p in layers) == 8 and max(p.num_seqs for p in layers) == 256
    assert {p.context_len for p in layers} >= {512, 8192}
    assert {(8, 8192), (64, 512)} <= {(p.num_seqs, p.context_len) for p in layers}
    stacks = [p for p in plan.points if p.kind == "layer_stack"]
    assert {p.num_layers for p in stacks if p.shape.name.startswith("Qwen3")} == {4, 8}
    assert list(plan.points[-len(stacks):]) == stacks                 # a spent budget costs stacks
    for p in stacks:           # every stack has its one-layer point, judged against N x it
        assert any((q.shape, q.ep_size, q.num_seqs, q.context_len)
                   == (p.shape, p.ep_size, p.num_seqs, p.context_len) for q in layers)
    # each EP size's MoE parts and each batch's attention parts come with the layers
    for p in layers:
        kinds = {(q.kind, q.part) for q in plan.points if q.shape == p.shape
                 and q.num_seqs == p.num_seqs and q.ep_size == p.ep_size}
        assert {("experts", ""), ("layer_part", "moe_block"),
                ("layer_part", "experts_module")} <= kinds


@pytest.mark.parametrize("kwargs, message", [
    (dict(device="tpu"), "device .'tpu'. must be 'cuda' or 'cpu'"),
    (dict(device="cpu", models=["Qwen3-30B-A3B"]),
     "model .'Qwen3-30B-A3B'. must be one of cpu-tiny"),
    (dict(device="cuda", num_iters=0), r"iters \(0\) must be >= 1")])
def test_bad_plans_name_the_value(kwargs, message):
    with pytest.raises(LiveError, match=message):
        plan_layers(**kwargs)


def test_bad_model_on_the_command_line_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--cpu", "--models", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["live.bench.layers: error: model ('nope') must be one of cpu-tiny, "
                   "cpu-tiny-shared"]


def test_ep1_layer_is_transformers_layer_on_a_static_cache():
    """The static cache (new token in the last of `context_len` slots) gives what transformers'
    own DynamicCache gives with `context_len - 1` cached tokens, and the whole layer is its
    attention block then its MoE block."""
    from transformers import DynamicCache
    torch.manual_seed(0)
    layer = Layer(TINY_SHARED, torch.device("cpu"), torch.float32, seed=3)
    gen = torch.Generator().manual_seed(1)
    decode = decode_inputs(layer, 3, 16, 1, gen)
    cache = decode.caches[0]
    reference = DynamicCache()
    reference.update(cache.keys[:, :, :-1].clone(), cache.values[:, :, :-1].clone(), 0)
    with torch.no_grad():
        ours = layer.forward(decode.x, decode.position, cache)
        theirs = layer.hf(decode.x, attention_mask=None, position_embeddings=decode.position,
                          **{layer.cache_kwarg: reference})
        theirs = theirs[0] if isinstance(theirs, tuple) else theirs
        parts = layer.moe_block(layer.attention_block(decode.x, decode.position, cache), None)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours, parts)
    assert isinstance(cache, StaticKV) and cache.keys.shape[2] == 16


def test_virtual_rank_runs_its_local_experts_on_the_pairs_it_receives():
    layer = Layer(TINY, torch.device("cpu"), torch.float32, seed=5)
    gen = torch.Generator().manual_seed(2)
    rank = rank_inputs(TINY, 4, 4, 0, gen, torch.float32)
    experts = layer.local_experts(4)
    assert experts.gate_up_proj.shape[0] == TINY.num_experts // 4
    with torch.no_grad():
        out = experts(rank.pairs, rank.expert_ids, rank.weights)
    full = layer.hf.mlp.experts
    ids = rank.expert_ids[:, 0].tolist()
    expected = torch.stack([swiglu_mlp(rank.pairs[i:i + 1], full.gate_up_proj[j],
                                       full.down_proj[j])[0] * rank.weights[i, 0]
                            for i, j in enumerate(ids)])                # the first E/n experts
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    assert np.bincount(ids, minlength=TINY.num_experts // 4).tolist() == rank.rows[0].tolist()


def test_group_rows_are_epsim_routings_draw_busiest_rank_first():
    rows = group_rows(DEEPSEEK_LIKE, 64, 8, seed=0)
    drawn = expert_rows(Point("experts", DEEPSEEK_LIKE.experts, 64, 32, (("kind", "uniform"),)), 0)
    assert sorted(map(tuple, rows)) == sorted(map(tuple, drawn))        # the same draw, reordered
    # above 8 pairs per expert the draw is sampled and rounded: the total within 1 %
    assert abs(rows.sum() - 8 * 64 * 8) <= 0.01 * 8 * 64 * 8
    assert list(rows.sum(axis=1)) == sorted(rows.sum(axis=1))[::-1]


def test_keep_l2_times_only_the_layer_kinds_and_says_so(tmp_path):
    plan = plan_layers("cpu", quick=True, models=[TINY.name], keep_l2=True)
    assert {p.kind for p in plan.points} == {"decoder_layer", "layer_stack", "layer_part"}
    assert plan.keep_l2 and not plan_layers("cuda").keep_l2
