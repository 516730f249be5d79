"""Number formats (`epsim.spec.quant`): bytes per weight and per KV element from one function
each, the tensor rate a format's GEMM runs at, and SGLang's names mapped onto formats."""

from __future__ import annotations

import pytest

from epsim.spec.quant import (QUANTIZATIONS, WEIGHT_FORMATS, kv_bytes_per_element, served_formats,
                              served_model, weight_bytes_per_element, weight_tensor_dtype)
from epsim.zoo import get_hardware, get_model


def test_weight_bytes_include_their_scales():
    assert weight_bytes_per_element("bf16") == 2.0
    assert weight_bytes_per_element("fp8") == 1.0                       # one scale per tensor
    assert weight_bytes_per_element("fp8_block") == 1.0 + 4.0 / (128 * 128)
    assert weight_bytes_per_element("nvfp4") == 0.5 + 1.0 / 16          # FP8 scale per 16
    assert weight_bytes_per_element("w4a16") == 0.5 + 2.0 / 32          # BF16 scale per 32
    with pytest.raises(ValueError, match=r"weight format \('int3'\) must be one of"):
        weight_bytes_per_element("int3")


def test_kv_bytes_per_element():
    assert [kv_bytes_per_element(d) for d in ("auto", "bf16", "fp8_e4m3", "fp8_e5m2")] == [2, 2, 1, 1]
    with pytest.raises(ValueError, match=r"kv_cache_dtype \('fp4'\) must be one of"):
        kv_bytes_per_element("fp4")
    m = get_model("DeepSeek-V3")                       # MLA: latent 512 + RoPE key 64
    assert m.kv_bytes_per_token("fp8_e4m3") == 576 and m.kv_bytes_per_token_per_layer == 1152
    q = get_model("Qwen3-235B-A22B")                   # GQA: K and V of 4 heads x 128
    assert q.kv_bytes_per_token("auto") == 2 * 4 * 128 * 2


def test_tensor_rate_of_each_format():
    assert [weight_tensor_dtype(f) for f in WEIGHT_FORMATS] == [
        "bf16", "bf16", "fp8", "fp8", "fp4", "bf16"]
    assert get_hardware("H200").tensor_tflops("fp4") is None
    assert get_hardware("B200").tensor_tflops("fp4") == 2 * get_hardware("B200").tensor_tflops("fp8")


def test_sglang_names_map_onto_formats():
    """SGLang's `fp8` keeps a block checkpoint's 128 x 128 scales and quantises any other per
    tensor; w8a8 / modelopt FP8 are per tensor; modelopt_fp4 serves NVFP4 experts, BF16
    attention (NVIDIA's NVFP4 checkpoints)."""
    assert served_formats("fp8_block", "fp8_block", "fp8") == served_formats("bf16", "bf16", "fp8_block")
    assert served_formats("fp8_block", "fp8_block", "fp8").experts == "fp8_block"
    assert served_formats("bf16", "bf16", "fp8").experts == "fp8"
    assert served_formats("bf16", "bf16", "w8a8_fp8").dense == "fp8"
    assert served_formats("bf16", "bf16", "modelopt_fp8").experts == "fp8"
    assert served_formats("fp8_block", "fp8_block", "modelopt_fp4") == served_formats(
        "bf16", "bf16", "nvfp4")
    assert served_formats("fp8_block", "fp8_block", "nvfp4").dense == "bf16"
    assert served_formats("w4a16", "bf16", None) == served_formats("w4a16", "bf16", "w4a16")
    for name in QUANTIZATIONS:
        served_formats("bf16", "bf16", name)                 # every listed name maps


def test_served_model_is_the_model_itself_when_unchanged():
    m = get_model("Qwen3-235B-A22B-FP8")
    assert served_model(m, None) is m and served_model(m, "fp8") is m
    bf16 = served_model(m, "bf16")
    assert bf16.expert_bytes == 2 * m.expert_params and bf16.name == m.name
    kimi = get_model("Kimi-K2.5")
    assert kimi.weight_bytes_per_param == 0.5625 and kimi.dense_weight_bytes_per_param == 2.0
