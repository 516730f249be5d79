"""The zoo's new models equal what `from_hf_dict` reads from their Hugging Face config.json
figures (the keys and values as published in the model repositories)."""

from __future__ import annotations

from epsim.spec.model import ModelSpec
from epsim.zoo import get_hardware, get_model

KIMI_K2_CONFIG = {  # moonshotai/Kimi-K2-Instruct config.json (the fields epsim reads)
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "norm_topk_prob": True, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 163840, "quantization_config": {"quant_method": "fp8"}}
QWEN3_CODER_CONFIG = {  # Qwen/Qwen3-Coder-480B-A35B-Instruct config.json
    "hidden_size": 6144, "intermediate_size": 8192, "moe_intermediate_size": 2560,
    "num_hidden_layers": 62, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
    "num_experts": 160, "num_experts_per_tok": 8, "norm_topk_prob": True, "mlp_only_layers": [],
    "shared_expert_intermediate_size": 0, "vocab_size": 151936}


def test_zoo_models_match_their_hf_configs():
    for name, cfg in (("Kimi-K2", KIMI_K2_CONFIG), ("Qwen3-Coder-480B-A35B", QWEN3_CODER_CONFIG)):
        assert get_model(name) == ModelSpec.from_hf_dict(cfg, name=name)
    assert get_model("Kimi-K2").num_experts == 384
    # 480B total: 62 layers x 160 experts x 3 x 6144 x 2560 = 468 B routed-expert parameters
    coder = get_model("Qwen3-Coder-480B-A35B")
    assert 460e9 < coder.num_moe_layers * coder.num_experts * coder.expert_params < 475e9


def test_nvl72_gpus_are_one_nvlink_domain_of_72():
    for name in ("GB200", "GB300"):
        hw = get_hardware(name)
        assert (hw.gpus_per_node, hw.network, hw.nvlink_gbps) == (72, "nvl72", 900)
