"""Recorder, updater and manager on one rank (no process group): slots end up holding the
experts the placement names, the weight cache is never written, loads add up, and the exports
are valid records that `epsim eplb` reads. Multi-rank behaviour: test_eplb_gloo.py."""

import json

import numpy as np
import pytest
import torch

from epsim.eplb import read_loads
from epsim.records import MeasurementRecord, read_records
from live.config import MoeConfig
from live.eplb import EplbManager, ExpertLoadRecorder, ExpertWeightUpdater, rebalance_record
from live.errors import LiveError
from live.model import Qwen3MoeModel
from live.bench.provenance import collect
from live.routing import forced_routing
from live.weights import fused_names, random_weights

CONFIG = MoeConfig(hidden_size=32, moe_intermediate_size=16, num_experts=8, top_k=2, num_layers=3)
HOTSET = {"kind": "hotset", "num_hot": 2, "hot_frac": 0.7}


@pytest.fixture
def cache():
    return random_weights(CONFIG, range(CONFIG.num_layers), seed=3)


def _model(cache, placement=None):
    model = Qwen3MoeModel(CONFIG, placement=placement)
    model.load_weight_cache(cache)
    return model


def _routings(rng, num_passes, num_tokens=24):
    from epsim.routing import skew_from_dict

    skew = skew_from_dict(HOTSET, CONFIG.num_layers, CONFIG.num_experts, CONFIG.top_k, seed=1)
    return [{layer: forced_routing(skew, num_tokens, rng, layer=layer)
             for layer in range(CONFIG.num_layers)} for _ in range(num_passes)]


def _holds(model, cache) -> bool:
    """Every slot's tensors equal its expert's in the cache, bitwise."""
    descriptor = model.routed_experts_weights_of_layer
    for layer in model.layer_ids:
        experts = model.placement.local_slots(0)[layer].tolist()
        for tensor, name in zip(descriptor[layer], fused_names(layer)[1:]):
            if not torch.equal(tensor, cache[name][experts]):
                return False
    return True


def test_rebalance_after_a_cache_load_moves_the_right_tensors_and_never_the_cache(cache):
    pristine = {name: t.clone() for name, t in cache.items()}
    model = _model(cache)                                   # identity: experts are cache views
    assert model.routed_experts_weights_of_layer[0][0].data_ptr() == \
        cache[fused_names(0)[1]].data_ptr()
    x = torch.randn(16, CONFIG.hidden_size)
    with torch.no_grad():
        before = model(x)
    new = np.stack([np.roll(np.arange(8), layer + 1) for layer in range(CONFIG.num_layers)])
    result = ExpertWeightUpdater(model).apply(new)
    assert result.plan["changed_slots"] == 24 and result.plan["local_copies"] == 24
    assert all(torch.equal(cache[n], pristine[n]) for n in cache)    # the cache is untouched
    assert _holds(model, pristine)
    descriptor = model.routed_experts_weights_of_layer                 # rebuilt, not stale
    for layer in model.layer_ids:
        assert descriptor[layer][0].data_ptr() == model.block(layer).experts.gate_up_proj.data_ptr()
        assert descriptor[layer][0].data_ptr() != cache[fused_names(layer)[1]].data_ptr()
    with torch.no_grad():
        assert torch.allclose(model(x), before, atol=1e-6, rtol=0)
    assert model.placement.physical_to_logical.tolist() == new.tolist()


def test_replicas_come_from_the_same_rank_through_one_spare_buffer(cache):
    placement = np.tile(np.r_[np.arange(8), [0, 1]], (CONFIG.num_layers, 1))
    model = _model(cache, placement)
    updater = ExpertWeightUpdater(model, layers_per_chunk=2)
    new = np.tile(np.r_[np.arange(8), [5, 6]], (CONFIG.num_layers, 1))
    result = updater.apply(new)
    assert [len(c) for c in result.chunk_layers] == [2, 1]
    assert result.plan["changed_slots"] == 6 and result.plan["link_bytes"] == 0
    expert_bytes = updater.expert_bytes()
    assert expert_bytes == 3 * 32 * 16 * 4                         # gate, up, down in fp32
    assert result.spare_buffer_bytes == 4 * expert_bytes            # the busiest chunk: 2 x 2
    assert _holds(model, cache)


def test_bad_placements_fail_before_any_weight_moves(cache):
    model = _model(cache)
    descriptor = model.routed_experts_weights_of_layer
    before = [t.clone() for layer in model.layer_ids for t in descriptor[layer]]
    updater = ExpertWeightUpdater(model)
    dropped = np.tile(np.arange(8), (3, 1))
    dropped[2, 3] = 4
    with pytest.raises(LiveError, match=r"new placement: logical_count\[2, 3\] \(0\) must be >= 1"):
        updater.apply(dropped)
    with pytest.raises(LiveError, match=r"new placement has 9 physical slots \(9 per rank\); the "
                                        r"model holds 8 per rank"):
        updater.apply(np.tile(np.r_[np.arange(8), 0], (3, 1)))
    with pytest.raises(LiveError, match=r"new placement: rank \(1\) must be in \[0, 1\)"):
        updater.apply({0: [[0, 1, 2, 3, 4, 5, 6, 7]] * 3, 1: [[0]] * 3})
    with pytest.raises(LiveError, match=r"layers_per_chunk \(0\) must be a positive integer"):
        ExpertWeightUpdater(model, layers_per_chunk=0)
    after = [t for layer in model.layer_ids for t in model.routed_experts_weights_of_layer[layer]]
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_recorder_counts_what_dispatch_delivered_over_its_window(cache, rng):
    placement = np.tile(np.r_[np.arange(8), [0, 1]], (CONFIG.num_layers, 1))   # replicas summed
    model = _model(cache, placement)
    recorder = ExpertLoadRecorder(model, window=2)
    with pytest.raises(LiveError, match="layer 0 has no dispatch counts"):
        recorder.record()
    routings = _routings(rng, 3)
    x = torch.randn(24, CONFIG.hidden_size)
    for routing in routings:
        with torch.no_grad():
            model(x, routing)
        recorder.record()
    assert recorder.num_passes == 2                                 # the first pass fell out
    expected = np.zeros((CONFIG.num_layers, CONFIG.num_experts))
    for routing in routings[1:]:
        for layer, r in routing.items():
            expected[layer] += np.bincount(r.topk_ids.numpy().ravel(), minlength=8)
    assert np.array_equal(recorder.window_loads(), expected)
    assert recorder.rank_loads().shape == (2, 1, CONFIG.num_layers)
    assert recorder.rank_loads().sum() == 2 * 24 * CONFIG.top_k * CONFIG.num_layers


def test_recorder_exports_records_that_epsim_eplb_reads(cache, rng, tmp_path):
    model = _model(cache)
    recorder = ExpertLoadRecorder(model, window=4)
    x = torch.randn(24, CONFIG.hidden_size)
    for routing in _routings(rng, 4):
        with torch.no_grad():
            model(x, routing)
        recorder.record()
    path = recorder.write_jsonl(tmp_path / "loads.jsonl", collect(1, "gloo"), skew=HOTSET)
    records = read_records(path)
    assert [r.forward_pass_id for r in records] == [0, 1, 2, 3]
    assert all(r.kind == "expert_load" and r.provenance.device for r in records)
    assert np.array_equal(read_loads(path), recorder.window_loads())    # what `epsim eplb` reads
    from epsim.cli import main

    assert main(["eplb", str(path), "--replicas", "8", "--gpus", "1", "--json"]) == 0


def test_rebalance_record_is_a_valid_measurement(cache):
    model = _model(cache)
    new = np.tile(np.arange(8)[::-1], (3, 1))
    results = [ExpertWeightUpdater(model).apply(new)]
    record = MeasurementRecord.model_validate(
        rebalance_record(results, model, collect(1, "gloo"), model="tiny"))
    assert record.kind == "rebalance" and record.num_layers == 3 and record.model == "tiny"
    assert record.median_us > 0 and record.extra["changed_slots"] == 24
    assert len(record.extra["chunk_us"]) == 3 and record.bytes == 0.0       # one rank: no links
    json.loads(record.to_json())


def test_manager_rebalances_every_n_passes_from_the_window(cache, rng):
    model = _model(cache, np.tile(np.r_[np.arange(8), [0, 1]], (CONFIG.num_layers, 1)))
    with pytest.raises(LiveError, match=r"algorithm \('greedy'\) must be one of"):
        EplbManager(model, algorithm="greedy")
    manager = EplbManager(model, algorithm="deepseek", rebalance_num_iterations=3)
    x = torch.randn(24, CONFIG.hidden_size)
    done = []
    for routing in _routings(rng, 7):
        with torch.no_grad():
            model(x, routing)
        done.append(manager.step() is not None)
    assert done == [False, False, True, False, False, True, False]
    result = manager.results[-1]
    assert result.extra["algorithm"] == "deepseek" and result.extra["algorithm_us"] > 0
    hot = int(np.argmax(manager.recorder.window_loads()[0]))
    assert model.placement.logical_count[0, hot] == 2                # the hot expert replicated
    assert _holds(model, cache)
