"""What a model is, as far as expert-parallel inference cares: layer counts, sizes, experts."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from epsim.errors import SpecError
from epsim.io import load_json
from epsim.spec.errors import validate

_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}


class ModelSpec(BaseModel):
    """A decoder-only MoE model.

    Layers `0..num_dense_layers-1` are dense (DeepSeek-V3's `first_k_dense_replace`); the rest
    carry `num_experts` routed experts of which each token picks `top_k`, plus
    `num_shared_experts` that every token uses.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    num_layers: int = Field(gt=0)
    num_dense_layers: int = Field(default=0, ge=0)
    hidden_size: int = Field(gt=0)
    moe_intermediate_size: int = Field(gt=0)
    intermediate_size: int = Field(default=0, ge=0, description="dense-layer FFN width")
    num_experts: int = Field(gt=0, description="routed experts per MoE layer")
    num_shared_experts: int = Field(default=0, ge=0)
    top_k: int = Field(gt=0)
    norm_topk_prob: bool = True
    num_expert_groups: int = Field(default=1, gt=0, description="DeepSeek n_group")
    topk_group: int = Field(default=1, gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(default=128, gt=0)
    attention: Literal["gqa", "mla"] = "gqa"
    kv_lora_rank: int = Field(default=0, ge=0, description="MLA latent width")
    q_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    qk_nope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    vocab_size: int = Field(default=151936, gt=0)
    weight_dtype: Literal["bf16", "fp16", "fp8"] = "bf16"

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.num_dense_layers >= self.num_layers:
            raise ValueError(
                f"num_dense_layers ({self.num_dense_layers}) must be < num_layers ({self.num_layers})")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must be <= num_experts ({self.num_experts})")
        if self.num_experts % self.num_expert_groups:
            raise ValueError(f"num_expert_groups ({self.num_expert_groups}) must divide "
                             f"num_experts ({self.num_experts})")
        if self.topk_group > self.num_expert_groups:
            raise ValueError(f"topk_group ({self.topk_group}) must be <= num_expert_groups "
                             f"({self.num_expert_groups})")
        if self.attention == "mla" and self.kv_lora_rank == 0:
            raise ValueError("kv_lora_rank (0) must be > 0 when attention is 'mla'")
        return self

    # -- derived sizes ---------------------------------------------------------------------
    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers

    @property
    def weight_bytes_per_param(self) -> float:
        return _DTYPE_BYTES[self.weight_dtype]

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert: gate, up and down projections (SwiGLU)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def expert_bytes(self) -> float:
        """Bytes of one routed expert's weights (Qwen3-30B-A3B in BF16: 9,437,184)."""
        return self.expert_params * self.weight_bytes_per_param

    @property
    def attention_params(self) -> int:
        """Parameters of one attention block (projections only)."""
        h = self.hidden_size
        if self.attention == "mla":
            q_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * self.num_attention_heads * q_head
                 if self.q_lora_rank else h * self.num_attention_heads * q_head)
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * (
                self.num_attention_heads * (self.qk_nope_head_dim + self.v_head_dim))
            o = self.num_attention_heads * self.v_head_dim * h
            return q + kv + o
        q = h * self.num_attention_heads * self.head_dim
        kv = 2 * h * self.num_key_value_heads * self.head_dim
        o = self.num_attention_heads * self.head_dim * h
        return q + kv + o

    @property
    def kv_bytes_per_token_per_layer(self) -> float:
        """KV-cache bytes one token keeps in one layer (BF16 cache)."""
        if self.attention == "mla":
            return 2.0 * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2.0 * 2 * self.num_key_value_heads * self.head_dim

    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> "ModelSpec":
        """Read a Hugging Face `config.json` of a Qwen3-MoE or DeepSeek-V3 model.

        Raises:
            SpecError: the file is not JSON or lacks the keys of either family.
        """
        path = Path(path)
        cfg = load_json(path, "model config")
        if not isinstance(cfg, dict):
            raise SpecError(f"{path}: model config ({type(cfg).__name__}) must be a JSON object "
                            f"of Hugging Face config keys")
        name = name or cfg.get("_name_or_path") or path.parent.name
        return cls.from_hf_dict(cfg, name=str(name), where=str(path))

    @classmethod
    def from_hf_dict(cls, cfg: dict, name: str, where: str = "config") -> "ModelSpec":
        """Build from an already-parsed Hugging Face config dict (see `from_hf_config`)."""
        def need(key: str):
            if key not in cfg:
                raise SpecError(f"{where}: {key} (missing) must be present in a "
                                f"Qwen3-MoE or DeepSeek-V3 config.json")
            return cfg[key]

        if not isinstance(cfg, dict):
            raise SpecError(f"{where}: model config ({type(cfg).__name__}) must be a mapping of "
                            f"Hugging Face config keys")
        _check_hf_types(cfg, where)
        if "n_routed_experts" in cfg:  # DeepSeek-V2/V3 keys
            fields = dict(
                num_experts=need("n_routed_experts"),
                num_shared_experts=cfg.get("n_shared_experts", 0) or 0,
                num_dense_layers=cfg.get("first_k_dense_replace", 0),
                num_expert_groups=cfg.get("n_group", 1) or 1,
                topk_group=cfg.get("topk_group", 1) or 1,
                attention="mla" if cfg.get("kv_lora_rank") else "gqa",
                kv_lora_rank=cfg.get("kv_lora_rank") or 0,
                q_lora_rank=cfg.get("q_lora_rank") or 0,
                qk_rope_head_dim=cfg.get("qk_rope_head_dim", 0),
                qk_nope_head_dim=cfg.get("qk_nope_head_dim", 0),
                v_head_dim=cfg.get("v_head_dim", 0),
                head_dim=cfg.get("v_head_dim", 128),
                weight_dtype="fp8" if _quant_method(cfg) == "fp8" else "bf16",
            )
        elif "num_experts" in cfg:  # Qwen2/3-MoE keys
            heads = need("num_attention_heads")
            if not cfg.get("head_dim") and heads <= 0:
                raise SpecError(f"{where}: num_attention_heads ({heads}) must be > 0 "
                                f"(head_dim = hidden_size / num_attention_heads)")
            fields = dict(
                num_experts=cfg["num_experts"],
                num_shared_experts=1 if cfg.get("shared_expert_intermediate_size") else 0,
                num_dense_layers=len(_int_list(cfg, "mlp_only_layers", where)),
                head_dim=cfg.get("head_dim") or need("hidden_size") // heads,
            )
        else:
            raise SpecError(f"{where}: num_experts (missing) must be present; this reads "
                            f"Qwen3-MoE (num_experts) and DeepSeek-V3 (n_routed_experts) configs")
        fields.update(
            name=name,
            num_layers=need("num_hidden_layers"),
            hidden_size=need("hidden_size"),
            moe_intermediate_size=need("moe_intermediate_size"),
            intermediate_size=cfg.get("intermediate_size", 0) or 0,
            top_k=need("num_experts_per_tok"),
            norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
            num_attention_heads=need("num_attention_heads"),
            num_key_value_heads=cfg.get("num_key_value_heads") or need("num_attention_heads"),
            vocab_size=cfg.get("vocab_size", 151936),
        )
        return validate(cls, fields, where)


_HF_INT_KEYS = ("n_routed_experts", "n_shared_experts", "first_k_dense_replace", "n_group",
                "topk_group", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                "v_head_dim", "num_experts", "num_attention_heads", "hidden_size", "head_dim",
                "num_hidden_layers", "moe_intermediate_size", "intermediate_size",
                "num_experts_per_tok", "num_key_value_heads", "vocab_size",
                "shared_expert_intermediate_size")


def _check_hf_types(cfg: dict, where: str) -> None:
    """Every key the reader uses holds what Hugging Face writes there: integers (or null) for
    sizes and counts, true/false for `norm_topk_prob`; nothing is coerced (`bool("x")`)."""
    for key in _HF_INT_KEYS:
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpecError(f"{where}: {key} ({str(value)[:40]}) must be an integer")
    flag = cfg.get("norm_topk_prob")
    if flag is not None and not isinstance(flag, bool):
        raise SpecError(f"{where}: norm_topk_prob ({str(flag)[:40]}) must be true or false")


def _quant_method(cfg: dict):
    quant = cfg.get("quantization_config")
    return quant.get("quant_method") if isinstance(quant, dict) else None


def _int_list(cfg: dict, key: str, where: str) -> list:
    value = cfg.get(key) or []
    if not isinstance(value, list):
        raise SpecError(f"{where}: {key} ({value!r:.40}) must be a list of layer indices")
    return value
