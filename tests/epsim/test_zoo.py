"""The zoo's new models equal what `from_hf_dict` reads from their Hugging Face config.json
figures (the keys and values as published in the model repositories)."""

from __future__ import annotations

from pathlib import Path

import pytest

from epsim.spec.model import ModelSpec
from epsim.zoo import get_hardware, get_model

KIMI_K2_CONFIG = {  # moonshotai/Kimi-K2-Instruct config.json (the fields epsim reads)
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "norm_topk_prob": True, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 163840,
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
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


# the models of the field's op tables and public measurements (issue 37), each from its Hugging
# Face config.json as aiconfigurator-core ships a copy of it (`model_configs/`)
HF_COPIES = {"DeepSeek-R1": "deepseek-ai--DeepSeek-R1", "Kimi-K2.5": "moonshotai--Kimi-K2.5",
             "Qwen3-235B-A22B-FP8": "Qwen--Qwen3-235B-A22B-FP8",
             "MiniMax-M2.5": "MiniMaxAI--MiniMax-M2.5", "GLM-5": "zai-org--GLM-5",
             "Qwen3.5-397B-A17B": "Qwen--Qwen3.5-397B-A17B"}


def test_new_zoo_models_equal_their_hf_config_json():
    pytest.importorskip("aiconfigurator_core")
    from importlib import resources
    folder = resources.files("aiconfigurator_core") / "model_configs"
    for name, stem in HF_COPIES.items():
        read = ModelSpec.from_hf_config(Path(str(folder / f"{stem}_config.json")), name=name)
        assert get_model(name) == read, name


def test_which_attention_each_model_has_and_whether_a_step_prices_it():
    kinds = {name: get_model(name).attention for name in HF_COPIES}
    assert kinds == {"DeepSeek-R1": "mla", "Kimi-K2.5": "mla", "Qwen3-235B-A22B-FP8": "gqa",
                     "MiniMax-M2.5": "gqa", "GLM-5": "mla_dsa", "Qwen3.5-397B-A17B": "hybrid_linear"}
    assert [n for n in HF_COPIES if get_model(n).attention_modelled] == [
        "DeepSeek-R1", "Kimi-K2.5", "Qwen3-235B-A22B-FP8", "MiniMax-M2.5"]
    # the published totals: R1 671B (routed experts 58 x 256 x 3 x 7168 x 2048 = 654B)
    r1 = get_model("DeepSeek-R1")
    assert 650e9 < r1.num_moe_layers * r1.num_experts * r1.expert_params < 660e9
    assert get_model("Qwen3.5-397B-A17B").top_k == 10 and get_model("GLM-5").num_layers == 78
