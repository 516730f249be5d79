"""EPLB state from construction, right for both ways weights arrive.

`routed_experts_weights_of_layer` must read as a mapping of the live expert tensors whether
the weights came through `load_weights()` (an HF-named safetensors file written here) or
through the IPC weight cache from another process (spawned here), which bypasses
`load_weights()` and rebinds the parameters.
"""

from collections.abc import Mapping

import pytest
import torch
import torch.multiprocessing as mp

from live.config import MoeConfig
from live.errors import LiveError
from live.model import Qwen3MoeModel
from live.weights import fused_names, random_weights, save_hf_safetensors, serve_weight_cache, to_hf_names


@pytest.fixture
def config(tiny):
    return MoeConfig(hidden_size=tiny.hidden_size, moe_intermediate_size=tiny.moe_intermediate_size,
                     num_experts=tiny.num_experts, top_k=tiny.top_k, num_layers=3)


@pytest.fixture
def checkpoint(config, tmp_path):
    weights = random_weights(config, range(config.num_layers), seed=21)
    return weights, save_hf_safetensors(weights, tmp_path / "model.safetensors")


def _check_descriptor(model: Qwen3MoeModel, weights: dict) -> None:
    """What EPLB does with the descriptor: keys, [layer], iteration, the tensors it moves."""
    descriptor = model.routed_experts_weights_of_layer
    assert type(descriptor) is dict and isinstance(descriptor, Mapping)   # unwrapped
    assert list(descriptor.keys()) == model.layer_ids == list(descriptor) and len(descriptor) == 2
    for layer in descriptor.keys():
        gate_up, down = descriptor[layer]
        block = model.block(layer)
        # the very tensors the forward reads, so an in-place EPLB move changes the outputs
        assert gate_up.data_ptr() == block.experts.gate_up_proj.data_ptr()
        assert down.data_ptr() == block.experts.down_proj.data_ptr()
        _, gate_up_name, down_name = fused_names(layer)
        torch.testing.assert_close(gate_up, weights[gate_up_name])
        torch.testing.assert_close(down, weights[down_name])


def test_descriptor_exists_from_construction_before_any_load(config):
    model = Qwen3MoeModel(config, start_layer=1)
    assert not model._routed_experts_weights_of_layer.is_computed      # lazy
    assert list(model.routed_experts_weights_of_layer.keys()) == [1, 2]
    assert model.routed_experts_weights_of_layer[2][0].shape == (8, 64, 64)


def test_checkpoint_path(config, checkpoint):
    weights, path = checkpoint
    model = Qwen3MoeModel(config, start_layer=1)
    loaded = model.load_safetensors(path)
    assert "model.layers.0.mlp.gate.weight" not in loaded                # layer 0 not held here
    assert "model.layers.2.mlp.experts.7.down_proj.weight" in loaded
    _check_descriptor(model, weights)


def test_ipc_weight_cache_path_from_another_process(config, checkpoint):
    weights, path = checkpoint
    spawn = mp.get_context("spawn")
    queue, done = spawn.Queue(), spawn.Event()
    producer = spawn.Process(target=serve_weight_cache, args=(queue, done, str(path), config, "cpu"))
    producer.start()
    try:
        cache = queue.get(timeout=120)
        assert all(t.is_shared() for t in cache.values())                 # shared memory
        model = Qwen3MoeModel(config, start_layer=1)
        stale = model.routed_experts_weights_of_layer                     # read before the load
        zero_copy = model.load_weight_cache(cache)
        assert zero_copy == {1: True, 2: True}
        assert stale[1][0].data_ptr() != model.block(1).experts.gate_up_proj.data_ptr()
        _check_descriptor(model, weights)                                 # refreshed, not stale
        for layer in model.layer_ids:                                     # no copy was made
            assert (model.routed_experts_weights_of_layer[layer][0].data_ptr()
                    == cache[fused_names(layer)[1]].data_ptr())
        via_file = Qwen3MoeModel(config, start_layer=1)
        via_file.load_safetensors(path)
        x = torch.randn(11, config.hidden_size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            torch.testing.assert_close(model(x), via_file(x), rtol=0, atol=0)
    finally:
        done.set()
        producer.join(timeout=30)
    assert producer.exitcode == 0


def test_an_eplb_style_in_place_move_changes_the_forward(config, checkpoint):
    weights, path = checkpoint
    model = Qwen3MoeModel(config, start_layer=1, end_layer=2)
    model.load_safetensors(path)
    block = model.block(1)
    x = torch.randn(4, config.hidden_size)
    from live.routing import Routing
    routing = Routing(torch.tensor([[3, 5]] * 4), torch.full((4, 2), 0.5))
    with torch.no_grad():
        before = block(x, routing=routing)
        for tensor in model.routed_experts_weights_of_layer[1]:
            tensor[5].zero_()                                             # "move" expert 5 away
        after = block(x, routing=routing)
        only_3 = block(x, routing=Routing(torch.tensor([[3, 0]] * 4), torch.tensor([[0.5, 0.0]] * 4)))
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, only_3)


def test_missing_or_misshapen_weights_are_named(config, checkpoint):
    weights, _ = checkpoint
    model = Qwen3MoeModel(config)
    partial = [(n, t) for n, t in to_hf_names(weights) if n != "model.layers.1.mlp.gate.weight"]
    with pytest.raises(LiveError, match=r"model.layers.1.mlp.gate.weight \(missing\) must be in "
                                        r"the checkpoint"):
        model.load_weights(partial)
    partial = [(n, t) for n, t in to_hf_names(weights)
               if n != "model.layers.2.mlp.experts.4.up_proj.weight"]
    with pytest.raises(LiveError, match=r"model.layers.2.mlp.experts.4 \(gate/up/down incomplete\)"):
        model.load_weights(partial)
    bad = [("model.layers.0.mlp.experts.1.down_proj.weight", torch.zeros(64, 31))]
    with pytest.raises(LiveError, match=r"model.layers.0.mlp.experts.1.down_proj.weight \(shape "
                                        r"\[64, 31\]\) must be \[64, 32\]"):
        model.load_weights(bad)
    cache = dict(weights)
    del cache["layers.2.mlp.experts.down_proj"]
    with pytest.raises(LiveError, match=r"layers.2.mlp.experts.down_proj \(missing\) must be in "
                                        r"the weight cache"):
        model.load_weight_cache(cache)
    with pytest.raises(LiveError, match=r"layers \[2, 2\) must be a non-empty range within \[0, 3\)"):
        Qwen3MoeModel(config, start_layer=2, end_layer=2)
