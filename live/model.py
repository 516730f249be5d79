"""Qwen3MoeModel: layers `start_layer..end_layer-1` of Qwen3 MoE blocks on one EP rank.

Attention, norms and embeddings are left out: each layer is `h = h + mlp(h)`, which is what
expert-parallel dispatch, experts and combine see. EPLB state exists from construction:
`routed_experts_weights_of_layer` maps layer id -> [gate_up_proj, down_proj] (first dim = this
rank's slots), computed on first read, and is right whichever way the weights arrived.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

import torch
from torch import nn

from live.backends import A2ABackend, BackendSpec, make_backend
from live.block import Qwen3MoeSparseMoeBlock
from live.config import MoeConfig
from live.errors import LiveError
from live.lazy import LazyValue
from live.location import as_placement
from live.routing import Routing
from live.weights import HF_EXPERT, HF_GATE, fused_names, iter_safetensors


class MoeDecoderLayer(nn.Module):
    """A decoder layer reduced to its MoE block (`mlp`); attention is left out."""

    def __init__(self, mlp: Qwen3MoeSparseMoeBlock):
        super().__init__()
        self.mlp = mlp


class Qwen3MoeModel(nn.Module):
    """MoE layers of a Qwen3 model on one EP rank.

    Args:
        config: block sizes (`num_layers` = all layers of the model).
        start_layer, end_layer: the layers held here (end exclusive; None = to the last).
        placement: `epsim.eplb.Placement` / `[layers, physical]` / `{rank: [layers][slots]}` /
            None (`live.location.as_placement`).
        ranks_per_node: EP ranks per node, for the static replica choice's same-node
            preference (None: every rank in one node, as on one host).
        backend: backend name (`none`, `torch`, `mooncake`, `deepep`) or a built A2ABackend.
        group: the EP process group (None = one device).
        max_tokens_per_rank, dispatch_dtype, deepep_mode: sizing of the backend buffers.
    """

    def __init__(self, config: MoeConfig, start_layer: int = 0, end_layer: int | None = None,
                 placement=None, backend: str | A2ABackend = "none", group=None,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 dispatch_mode: str = "static", experts_impl: str = "auto",
                 max_tokens_per_rank: int = 256, dispatch_dtype: str = "bf16",
                 deepep_mode: str = "normal", seed: int = 0, ranks_per_node: int | None = None):
        super().__init__()
        end_layer = config.num_layers if end_layer is None else end_layer
        if not 0 <= start_layer < end_layer <= config.num_layers:
            raise LiveError(f"layers [{start_layer}, {end_layer}) must be a non-empty range "
                            f"within [0, {config.num_layers})")
        self.config, self.start_layer, self.end_layer = config, start_layer, end_layer
        ep_size = 1 if group is None else torch.distributed.get_world_size(group)
        if ranks_per_node is not None and (ranks_per_node <= 0 or ep_size % ranks_per_node):
            raise LiveError(f"ranks_per_node ({ranks_per_node}) must divide the EP ranks ({ep_size})")
        num_nodes = 1 if ranks_per_node is None else ep_size // ranks_per_node
        self.placement = as_placement(placement, config.num_layers, config.num_experts, ep_size,
                                      num_nodes)
        if isinstance(backend, str):
            spec = BackendSpec(hidden_size=config.hidden_size,
                               num_physical_experts=self.placement.num_physical, top_k=config.top_k,
                               max_tokens_per_rank=max_tokens_per_rank, dtype=dtype,
                               device=torch.device(device), dispatch_dtype=dispatch_dtype,
                               mode=deepep_mode)
            backend = make_backend(backend, spec, group)
        self.backend = backend
        self.layers = nn.ModuleDict({
            str(layer): MoeDecoderLayer(Qwen3MoeSparseMoeBlock(
                config, layer, self.placement, backend, dtype, device, dispatch_mode,
                experts_impl, seed))
            for layer in range(start_layer, end_layer)})
        # EPLB reads this as a mapping; computed on first read, reset when weights are rebound
        self._routed_experts_weights_of_layer = LazyValue(self._expert_weights_by_layer)
        self._borrowed_layers: set[int] = set()   # experts are views of a weight cache

    # -- EPLB state ------------------------------------------------------------------------
    def _expert_weights_by_layer(self) -> dict[int, list[torch.Tensor]]:
        return {layer: self.block(layer).experts.weights() for layer in self.layer_ids}

    @property
    def routed_experts_weights_of_layer(self) -> Mapping[int, list[torch.Tensor]]:
        """{layer id: [gate_up_proj [slots, 2I, H], down_proj [slots, H, I]]} of this rank."""
        return self._routed_experts_weights_of_layer.value

    @property
    def layer_ids(self) -> list[int]:
        return list(range(self.start_layer, self.end_layer))

    def block(self, layer: int) -> Qwen3MoeSparseMoeBlock:
        return self.layers[str(layer)].mlp

    def update_placement(self, placement, layers: Iterable[int] | None = None) -> None:
        """New replica choice in every block, or only in `layers` (EPLB's chunked moves: the
        other blocks keep theirs); EPLB moves the weights itself."""
        self.placement = as_placement(placement, self.config.num_layers, self.config.num_experts,
                                      self.placement.num_ranks, self.placement.num_nodes,
                                      self.placement.alive)
        for layer in self.layer_ids if layers is None else layers:
            self.block(layer).update_placement(self.placement)

    def own_expert_weights(self, layers: Iterable[int] | None = None) -> list[int]:
        """Copy experts that are views of a weight cache (`load_weight_cache` without a copy)
        into tensors of this rank, so EPLB can rewrite slots without changing the cache (which
        other processes map). Returns the layers copied; the descriptor is rebuilt."""
        copied = []
        for layer in self.layer_ids if layers is None else layers:
            if layer in self._borrowed_layers:
                experts = self.block(layer).experts
                experts.gate_up_proj = nn.Parameter(experts.gate_up_proj.data.clone(),
                                                    requires_grad=False)
                experts.down_proj = nn.Parameter(experts.down_proj.data.clone(), requires_grad=False)
                self._borrowed_layers.discard(layer)
                copied.append(layer)
        if copied:
            self._routed_experts_weights_of_layer.reset()
        return copied

    def set_group(self, group, placement) -> None:
        """Serve on another EP group with the same slots per rank (elastic EP: the survivors of
        a failed rank). Builds the same backend on `group`; the blocks keep their weights."""
        ep_size = torch.distributed.get_world_size(group)
        location = as_placement(placement, self.config.num_layers, self.config.num_experts,
                                ep_size)
        if location.slots_per_rank != self.placement.slots_per_rank:
            raise LiveError(f"placement has {location.slots_per_rank} slots per rank; the model "
                            f"holds {self.placement.slots_per_rank}")
        spec = replace(self.backend.spec, num_physical_experts=location.num_physical)
        self.backend = make_backend(self.backend.name, spec, group)
        self.placement = location
        for layer in self.layer_ids:
            self.block(layer).set_backend(self.backend, location)

    # -- forward ---------------------------------------------------------------------------
    def forward(self, hidden_states: torch.Tensor,
                routing: Mapping[int, Routing] | None = None) -> torch.Tensor:
        """[tokens, H] through every layer (`h = h + mlp(h)`); `routing[layer]` forces a layer's
        expert choices."""
        h = hidden_states
        for layer in self.layer_ids:
            forced = None if routing is None else routing.get(layer)
            h = h + self.block(layer)(h, routing=forced)
        return h

    # -- weights: checkpoint path ----------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load HF-named tensors (per-expert `gate_proj`/`up_proj`/`down_proj`, `mlp.gate`) into
        the slots this rank holds, in place. Names of other modules or layers are skipped.

        Returns:
            names used.
        Raises:
            LiveError: a tensor's shape does not fit, or a held layer/expert is missing.
        """
        inter, hidden = self.config.moe_intermediate_size, self.config.hidden_size
        expected = {"gate": (inter, hidden), "up": (inter, hidden), "down": (hidden, inter)}
        pending: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        loaded, seen = set(), set()
        for name, tensor in weights:
            if (match := HF_GATE.match(name)) is not None:
                layer = int(match.group(1))
                if layer in self.layer_ids:
                    weight = self.block(layer).gate.weight
                    if tuple(tensor.shape) != tuple(weight.shape):
                        raise LiveError(f"{name} (shape {list(tensor.shape)}) must be "
                                        f"{list(weight.shape)}")
                    weight.data.copy_(tensor)
                    loaded.add(name)
                    seen.add((layer, "gate"))
            elif (match := HF_EXPERT.match(name)) is not None:
                layer, expert, kind = int(match.group(1)), int(match.group(2)), match.group(3)
                if layer not in self.layer_ids or not len(self.block(layer).slots_of(expert)):
                    continue
                if tuple(tensor.shape) != expected[kind]:
                    raise LiveError(f"{name} (shape {list(tensor.shape)}) must be "
                                    f"{list(expected[kind])}")
                parts = pending.setdefault((layer, expert), {})
                parts[kind] = tensor
                loaded.add(name)
                if len(parts) == 3:
                    self.block(layer).load_expert(expert, parts["gate"], parts["up"], parts["down"])
                    seen.add((layer, expert))
                    del pending[(layer, expert)]
        self._check_complete(seen)
        return loaded

    def load_safetensors(self, path) -> set[str]:
        """`load_weights` from a safetensors file."""
        return self.load_weights(iter_safetensors(path))

    def _check_complete(self, seen: set) -> None:
        for layer in self.layer_ids:
            if (layer, "gate") not in seen:
                raise LiveError(f"model.layers.{layer}.mlp.gate.weight (missing) must be in the "
                                f"checkpoint")
            for expert in sorted(set(self.block(layer).local_logical.tolist())):
                if (layer, expert) not in seen:
                    raise LiveError(f"model.layers.{layer}.mlp.experts.{expert} (gate/up/down "
                                    f"incomplete) must be in the checkpoint")

    # -- weights: IPC weight-cache path ----------------------------------------------------
    def load_weight_cache(self, cache: Mapping[str, torch.Tensor]) -> dict[int, bool]:
        """Bind fused tensors handed over by a weight-cache process, bypassing `load_weights`.

        Args:
            cache: {`layers.{i}.mlp.gate.weight` [E, H], `layers.{i}.mlp.experts.gate_up_proj`
                [E, 2I, H], `layers.{i}.mlp.experts.down_proj` [E, H, I]} (a `model.` prefix is
                accepted); shared-memory or CUDA IPC tensors.
        Returns:
            {layer id: True where the layer's experts are views of the cache (no copy)}.
        Raises:
            LiveError: a held layer is missing from the cache or a shape does not fit.
        """
        cache = {name.removeprefix("model."): t for name, t in cache.items()}
        cfg = self.config
        shapes = {0: (cfg.num_experts, cfg.hidden_size),
                  1: (cfg.num_experts, 2 * cfg.moe_intermediate_size, cfg.hidden_size),
                  2: (cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)}
        zero_copy = {}
        for layer in self.layer_ids:
            names = fused_names(layer)
            tensors = []
            for i, name in enumerate(names):
                if name not in cache:
                    raise LiveError(f"{name} (missing) must be in the weight cache")
                if tuple(cache[name].shape) != shapes[i]:
                    raise LiveError(f"{name} (shape {list(cache[name].shape)}) must be "
                                    f"{list(shapes[i])}")
                tensors.append(cache[name])
            zero_copy[layer] = self.block(layer).bind_fused(*tensors)
        self._borrowed_layers = {layer for layer, borrowed in zero_copy.items() if borrowed}
        # the parameters are new tensors now: the EPLB view must be rebuilt on next read
        self._routed_experts_weights_of_layer.reset()
        return zero_copy

