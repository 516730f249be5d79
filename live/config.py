"""MoeConfig: the shape of one Qwen3 MoE sparse block, and how to get it from epsim's zoo."""

from __future__ import annotations

from dataclasses import dataclass

from live.errors import LiveError


@dataclass(frozen=True)
class MoeConfig:
    """Sizes of the Qwen3 MoE sparse block (router + routed experts; Qwen3 has no shared expert).

    Attributes:
        hidden_size: model width H.
        moe_intermediate_size: expert FFN width I (gate and up are [I, H], down is [H, I]).
        num_experts: logical routed experts E.
        top_k: experts per token (`num_experts_per_tok`).
        norm_topk_prob: renormalize the top-k probabilities to sum to 1 (Qwen3: True).
        num_layers: decoder layers of the whole model (layer ids run 0..num_layers-1).
    """

    hidden_size: int
    moe_intermediate_size: int
    num_experts: int
    top_k: int
    norm_topk_prob: bool = True
    num_layers: int = 1

    def __post_init__(self):
        for name in ("hidden_size", "moe_intermediate_size", "num_experts", "top_k", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise LiveError(f"{name} ({value!r}) must be a positive integer")
        if self.top_k > self.num_experts:
            raise LiveError(f"top_k ({self.top_k}) must be <= num_experts ({self.num_experts})")

    @classmethod
    def from_model_spec(cls, spec, num_layers: int | None = None) -> "MoeConfig":
        """From an `epsim.spec.ModelSpec` (e.g. `epsim.zoo` Qwen3-30B-A3B)."""
        return cls(hidden_size=spec.hidden_size, moe_intermediate_size=spec.moe_intermediate_size,
                   num_experts=spec.num_experts, top_k=spec.top_k,
                   norm_topk_prob=spec.norm_topk_prob,
                   num_layers=spec.num_layers if num_layers is None else num_layers)

    def hf_config(self, experts_implementation: str = "eager"):
        """The matching `transformers.Qwen3MoeConfig` (imports transformers; for references).

        Args:
            experts_implementation: transformers 5.x experts kernel: "eager" (a per-expert loop)
                or "grouped_mm".
        """
        from transformers import Qwen3MoeConfig

        cfg = Qwen3MoeConfig(hidden_size=self.hidden_size,
                             moe_intermediate_size=self.moe_intermediate_size,
                             num_experts=self.num_experts, num_experts_per_tok=self.top_k,
                             norm_topk_prob=self.norm_topk_prob, num_hidden_layers=self.num_layers,
                             hidden_act="silu")
        cfg._experts_implementation = experts_implementation
        return cfg
