"""Expert weights: random test weights, Hugging Face checkpoint names, and the IPC weight cache.

Two ways in: `Qwen3MoeModel.load_weights` takes HF per-expert names from a checkpoint
(`model.layers.{i}.mlp.experts.{e}.gate_proj.weight`, ...); the weight cache hands fused
tensors (`layers.{i}.mlp.experts.gate_up_proj [experts, 2I, H]`, transformers 5.x layout)
from another process — shared memory on CPU, CUDA IPC on GPU — and bypasses `load_weights`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Iterator

import torch

from live.config import MoeConfig

HF_EXPERT = re.compile(r"^(?:model\.)?layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$")
HF_GATE = re.compile(r"^(?:model\.)?layers\.(\d+)\.mlp\.gate\.weight$")
FUSED = re.compile(r"^(?:model\.)?layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


def fused_names(layer: int) -> tuple[str, str, str]:
    """Cache keys of one layer: (router, gate_up_proj, down_proj)."""
    prefix = f"layers.{layer}.mlp"
    return f"{prefix}.gate.weight", f"{prefix}.experts.gate_up_proj", f"{prefix}.experts.down_proj"


def random_weights(config: MoeConfig, layers: Iterable[int], seed: int = 0,
                   dtype: torch.dtype = torch.float32,
                   device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Fused weights of `layers`, N(0, 1/fan_in) so activations stay O(1); seeded per device.

    Returns:
        {router [E, H], gate_up_proj [E, 2I, H], down_proj [E, H, I]} per layer, by `fused_names`.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    hidden, inter, experts = config.hidden_size, config.moe_intermediate_size, config.num_experts

    def draw(*shape, fan_in):
        return (torch.randn(*shape, generator=gen, device=device) / fan_in ** 0.5).to(dtype)

    out = {}
    for layer in layers:
        router, gate_up, down = fused_names(layer)
        out[router] = draw(experts, hidden, fan_in=hidden)
        out[gate_up] = draw(experts, 2 * inter, hidden, fan_in=hidden)
        out[down] = draw(experts, hidden, inter, fan_in=inter)
    return out


def to_hf_names(fused: dict[str, torch.Tensor]) -> Iterator[tuple[str, torch.Tensor]]:
    """Fused weights -> HF checkpoint names, one tensor per expert and projection."""
    for name, tensor in fused.items():
        match = FUSED.match(name)
        if match is None:
            yield f"model.{name}", tensor
            continue
        layer, kind = match.groups()
        prefix = f"model.layers.{layer}.mlp.experts"
        for expert in range(tensor.shape[0]):
            if kind == "down_proj":
                yield f"{prefix}.{expert}.down_proj.weight", tensor[expert]
            else:
                gate, up = tensor[expert].chunk(2, dim=0)
                yield f"{prefix}.{expert}.gate_proj.weight", gate
                yield f"{prefix}.{expert}.up_proj.weight", up


def save_hf_safetensors(fused: dict[str, torch.Tensor], path: str | Path) -> Path:
    """Write fused weights as an HF-named safetensors file (per-expert tensors)."""
    from safetensors.torch import save_file

    path = Path(path)
    save_file({name: t.contiguous() for name, t in to_hf_names(fused)}, str(path))
    return path


def iter_safetensors(path: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of a safetensors file, read one at a time."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        for name in fh.keys():
            yield name, fh.get_tensor(name)


def fuse_hf(weights: Iterable[tuple[str, torch.Tensor]], config: MoeConfig) -> dict[str, torch.Tensor]:
    """HF per-expert tensors -> fused cache tensors (what a weight-cache service holds)."""
    inter = config.moe_intermediate_size
    out: dict[str, torch.Tensor] = {}
    for name, tensor in weights:
        if (match := HF_GATE.match(name)) is not None:
            out[fused_names(int(match.group(1)))[0]] = tensor
        elif (match := HF_EXPERT.match(name)) is not None:
            layer, expert, kind = int(match.group(1)), int(match.group(2)), match.group(3)
            _, gate_up_key, down_key = fused_names(layer)
            if kind == "down":
                if down_key not in out:
                    out[down_key] = tensor.new_empty((config.num_experts, *tensor.shape))
                out[down_key][expert] = tensor
            else:
                if gate_up_key not in out:
                    out[gate_up_key] = tensor.new_empty((config.num_experts, 2 * inter, tensor.shape[1]))
                rows = slice(0, inter) if kind == "gate" else slice(inter, 2 * inter)
                out[gate_up_key][expert, rows] = tensor
    return out


def serve_weight_cache(queue, done, path: str, config: MoeConfig, device: str = "cpu") -> None:
    """Weight-cache producer (run in its own process): load `path`, fuse, share, hand over.

    CPU tensors go to shared memory (`share_memory_`); CUDA tensors travel by CUDA IPC when
    put on a torch.multiprocessing queue. The producer must outlive the consumer's use of
    CUDA IPC tensors, so it waits on `done`.
    """
    cache = fuse_hf(iter_safetensors(path), config)
    cache = {name: t.to(device) for name, t in cache.items()}
    for tensor in cache.values():
        if tensor.device.type == "cpu":
            tensor.share_memory_()
    queue.put(cache)
    done.wait(timeout=300)
