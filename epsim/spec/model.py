"""What a model is, as far as expert-parallel inference cares: layer counts, sizes, experts."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from epsim.errors import SpecError
from epsim.io import load_json
from epsim.spec.errors import validate
from epsim.spec.quant import WeightFormat, kv_bytes_per_element, weight_bytes_per_element

# attention kinds: `gqa` (MHA is GQA with as many KV heads as query heads) and `mla` are
# priced; `mla_dsa` (MLA with DeepSeek sparse attention: an indexer picks 2048 keys per query,
# GLM-5, DeepSeek-V3.2) and `hybrid_linear` (Gated DeltaNet linear attention in 3 of 4 layers,
# Qwen3.5) are not: a scenario of such a model is refused, `epsim cost` prices its MoE layers
AttentionKind = Literal["gqa", "mla", "mla_dsa", "hybrid_linear"]
MODELLED_ATTENTION = ("gqa", "mla")


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
    attention: AttentionKind = "gqa"
    kv_lora_rank: int = Field(default=0, ge=0, description="MLA latent width")
    q_lora_rank: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    qk_nope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    vocab_size: int = Field(default=151936, gt=0)
    weight_dtype: WeightFormat = Field(
        default="bf16", description="the checkpoint's format of the routed experts (and of every "
        "linear layer unless dense_weight_dtype says otherwise); epsim.spec.quant")
    dense_weight_dtype: WeightFormat | None = Field(
        default=None, description="attention projections, shared experts and dense layers, where "
        "the checkpoint keeps them in another format than the experts (Kimi-K2.5: INT4 experts, "
        "BF16 rest); None: weight_dtype")

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
        if self.attention.startswith("mla") and self.kv_lora_rank == 0:
            raise ValueError(f"kv_lora_rank (0) must be > 0 when attention is {self.attention!r}")
        return self

    # -- derived sizes ---------------------------------------------------------------------
    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes of one routed-expert weight, scales included (`epsim.spec.quant`)."""
        return weight_bytes_per_element(self.weight_dtype)

    @property
    def dense_weight_bytes_per_param(self) -> float:
        """Bytes of one weight of the attention projections, shared experts and dense layers."""
        return weight_bytes_per_element(self.dense_weight_dtype or self.weight_dtype)

    @property
    def attention_modelled(self) -> bool:
        """Whether a step's attention can be priced (`MODELLED_ATTENTION`)."""
        return self.attention in MODELLED_ATTENTION

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
        if self.attention.startswith("mla"):        # DSA's indexer (a few % more) left out
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
    def kv_elements_per_token_per_layer(self) -> int:
        """KV-cache elements one token keeps in one layer: K and V of every KV head (GQA), the
        latent and its RoPE key (MLA)."""
        if self.attention.startswith("mla"):
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_key_value_heads * self.head_dim

    def kv_bytes_per_token(self, kv_cache_dtype: str = "auto") -> float:
        """KV-cache bytes one token keeps in one layer with SGLang's `kv_cache_dtype`
        (`epsim.spec.quant.kv_bytes_per_element`: auto/bf16 2, fp8 1)."""
        return self.kv_elements_per_token_per_layer * kv_bytes_per_element(kv_cache_dtype)

    @property
    def kv_bytes_per_token_per_layer(self) -> float:
        """KV-cache bytes one token keeps in one layer (BF16 cache, `kv_cache_dtype: auto`)."""
        return self.kv_bytes_per_token("auto")

    @classmethod
    def from_hf_config(cls, path: str | Path, name: str | None = None) -> "ModelSpec":
        """Read a Hugging Face `config.json` of a Qwen3-MoE, DeepSeek-V3 or MiniMax-M2 model
        (a multimodal wrapper's `text_config`: Kimi-K2.5, Qwen3.5).

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
                                f"Qwen3-MoE, DeepSeek-V3 or MiniMax-M2 config.json")
            return cfg[key]

        if not isinstance(cfg, dict):
            raise SpecError(f"{where}: model config ({type(cfg).__name__}) must be a mapping of "
                            f"Hugging Face config keys")
        if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg:
            cfg = cfg["text_config"]   # a multimodal wrapper (Kimi-K2.5, Qwen3.5): its LLM's keys
        _check_hf_types(cfg, where)
        if "n_routed_experts" in cfg:  # DeepSeek-V2/V3 keys
            fields = dict(
                num_experts=need("n_routed_experts"),
                num_shared_experts=cfg.get("n_shared_experts", 0) or 0,
                num_dense_layers=cfg.get("first_k_dense_replace", 0),
                num_expert_groups=cfg.get("n_group", 1) or 1,
                topk_group=cfg.get("topk_group", 1) or 1,
                attention=_attention_kind(cfg),
                kv_lora_rank=cfg.get("kv_lora_rank") or 0,
                q_lora_rank=cfg.get("q_lora_rank") or 0,
                qk_rope_head_dim=cfg.get("qk_rope_head_dim", 0),
                qk_nope_head_dim=cfg.get("qk_nope_head_dim", 0),
                v_head_dim=cfg.get("v_head_dim", 0),
                head_dim=cfg.get("v_head_dim", 128),
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
                attention=_attention_kind(cfg),
            )
        elif "num_local_experts" in cfg:  # Mixtral / MiniMax-M2 keys: every layer MoE
            fields = dict(
                num_experts=cfg["num_local_experts"],
                num_shared_experts=1 if cfg.get("shared_intermediate_size") else 0,
                head_dim=cfg.get("head_dim") or need("hidden_size") // max(
                    need("num_attention_heads"), 1),
                moe_intermediate_size=need("intermediate_size"),   # the experts' width
                intermediate_size=0,
                attention=_attention_kind(cfg),
            )
        else:
            raise SpecError(f"{where}: num_experts (missing) must be present; this reads "
                            f"Qwen3-MoE (num_experts), DeepSeek-V3 (n_routed_experts) and "
                            f"MiniMax-M2 (num_local_experts) configs")
        experts_format, dense_format = _weight_formats(cfg)
        if "moe_intermediate_size" not in fields:
            fields["moe_intermediate_size"] = need("moe_intermediate_size")
            fields["intermediate_size"] = cfg.get("intermediate_size", 0) or 0
        fields.update(
            name=name,
            num_layers=need("num_hidden_layers"),
            hidden_size=need("hidden_size"),
            top_k=need("num_experts_per_tok"),
            norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
            num_attention_heads=need("num_attention_heads"),
            num_key_value_heads=cfg.get("num_key_value_heads") or need("num_attention_heads"),
            vocab_size=cfg.get("vocab_size", 151936),
            weight_dtype=experts_format,
            dense_weight_dtype=dense_format,
        )
        return validate(cls, fields, where)


_HF_INT_KEYS = ("n_routed_experts", "n_shared_experts", "first_k_dense_replace", "n_group",
                "topk_group", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                "v_head_dim", "num_experts", "num_attention_heads", "hidden_size", "head_dim",
                "num_hidden_layers", "moe_intermediate_size", "intermediate_size",
                "num_experts_per_tok", "num_key_value_heads", "vocab_size",
                "shared_expert_intermediate_size", "num_local_experts", "shared_intermediate_size")


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


def _weight_formats(cfg: dict) -> tuple[str, str | None]:
    """(experts' format, dense parts' format or None: the same) a config's
    `quantization_config` names (`epsim.spec.quant`): FP8 with `weight_block_size` is
    `fp8_block` (DeepSeek, Qwen3-FP8, MiniMax-M2.5), other FP8 `fp8`, ModelOpt NVFP4 `nvfp4`
    experts, 4-bit compressed-tensors `w4a16` experts (Kimi-K2.5, whose `ignore` list keeps
    attention, shared experts and dense layers BF16); none (or one not listed) `bf16`."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, dict):
        return "bf16", None
    method = quant.get("quant_method")
    if method == "fp8":
        return ("fp8_block" if quant.get("weight_block_size") else "fp8"), None
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "NVFP4":
        return "nvfp4", "bf16"
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)] \
            if isinstance(groups, dict) else []
        if any(isinstance(w, dict) and w.get("num_bits") == 4 for w in weights):
            return "w4a16", "bf16"
    return "bf16", None


def _attention_kind(cfg: dict) -> str:
    """`mla` where a config has an MLA latent (`kv_lora_rank`), `mla_dsa` where it also has
    DeepSeek sparse attention's indexer (`index_topk`), `hybrid_linear` where `layer_types`
    holds linear-attention layers (Qwen3.5), else `gqa`."""
    if cfg.get("kv_lora_rank"):
        return "mla_dsa" if cfg.get("index_topk") else "mla"
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and "linear_attention" in layer_types:
        return "hybrid_linear"
    return "gqa"


def _int_list(cfg: dict, key: str, where: str) -> list:
    value = cfg.get(key) or []
    if not isinstance(value, list):
        raise SpecError(f"{where}: {key} ({value!r:.40}) must be a list of layer indices")
    return value
