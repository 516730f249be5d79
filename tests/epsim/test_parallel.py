"""The layout of one instance in SGLang's terms (`epsim.spec.parallel`): what unset sizes mean,
SGLang's derivations, and every bad combination refused in one line naming its fields."""

from __future__ import annotations

import pytest

from epsim.errors import SpecError
from epsim.spec import DeploymentSpec, scenario_from_dict
from epsim.spec.parallel import Parallel, model_problem


def _scenario(deployment: dict, model: str = "Qwen3-30B-A3B", gpu: str = "H200", nodes: int = 2):
    return scenario_from_dict({"model": model, "cluster": {"gpu": gpu, "num_nodes": nodes},
                               "deployment": deployment}, "s.yaml")


def test_unset_sizes_keep_what_ep_size_meant():
    """tp_size = ep_size GPUs; DP attention: one DP group per GPU; without: one group of all."""
    assert DeploymentSpec(ep_size=16).parallel == Parallel(16, 16, 1, 16, 1)
    assert DeploymentSpec(ep_size=16, enable_dp_attention=False).parallel == Parallel(16, 1, 16, 16, 1)
    assert _scenario({"ep_size": 8}).dp_size == 8
    assert _scenario({"ep_size": 8, "enable_dp_attention": False}).dp_size == 1


def test_sglang_derivations():
    """attn_tp_size = tp_size / dp_size; moe_tp_size = tp_size / ep_size (given or derived)."""
    p = DeploymentSpec(ep_size=8, dp_size=2).parallel
    assert (p.tp_size, p.dp_size, p.attn_tp_size, p.moe_tp_size) == (8, 2, 4, 1)
    p = DeploymentSpec(ep_size=2, tp_size=8, moe_a2a_backend="none").parallel
    assert (p.ep_size, p.moe_tp_size, p.num_gpus) == (2, 4, 8)
    p = DeploymentSpec(ep_size=2, moe_tp_size=4, moe_a2a_backend="none").parallel
    assert p.tp_size == 8                                     # tp_size = ep_size x moe_tp_size
    assert DeploymentSpec(ep_size=2, moe_tp_size=4, moe_a2a_backend="none").num_gpus == 8


@pytest.mark.parametrize("deployment, fragment", [
    ({"ep_size": 3, "tp_size": 8, "moe_a2a_backend": "none"},
     r"deployment.ep_size \(3\) must divide tp_size \(8\)"),
    ({"ep_size": 2, "tp_size": 8, "moe_tp_size": 2, "moe_a2a_backend": "none"},
     r"deployment.moe_tp_size \(2\) must be tp_size / ep_size \(8 / 2 = 4\)"),
    ({"ep_size": 2, "tp_size": 8, "moe_a2a_backend": "deepep"},
     r"moe_tp_size \(4 = tp_size 8 / ep_size 2\) must be 1 with moe_a2a_backend 'deepep'"),
    ({"ep_size": 8, "moe_tp_size": 2, "moe_a2a_backend": "mooncake"},
     r"must be 1 with moe_a2a_backend 'mooncake'"),
    ({"ep_size": 8, "dp_size": 3}, r"deployment.dp_size \(3\) must divide tp_size \(8\)"),
    ({"ep_size": 8, "enable_dp_attention": False, "dp_size": 2},
     r"deployment.dp_size \(2\) must be 1 without enable_dp_attention"),
    ({"ep_size": 32, "tp_size": 32}, r"deployment.tp_size \(32\) must be <= the cluster's GPUs"),
    ({"ep_size": 4, "tp_size": 12, "moe_a2a_backend": "none"},
     r"deployment.tp_size \(12\) must be a multiple of gpus_per_node \(8\)"),
])
def test_bad_layouts_are_refused_naming_their_fields(deployment, fragment):
    with pytest.raises(SpecError, match=fragment):
        _scenario(deployment)


def test_layouts_the_model_cannot_take():
    """SGLang's checks on the model's shapes: heads per attention group, KV heads, whole FP8
    blocks per GPU of an expert (aiconfigurator-core's `moe_tp=8` Qwen3-235B-FP8 refusal)."""
    with pytest.raises(SpecError, match=r"tp_size / dp_size \(16 / 1 = 16 GPUs per attention group\) "
                                        r"must divide the model's num_attention_heads \(12\)"):
        scenario_from_dict({"model": {"name": "m", "num_layers": 2, "hidden_size": 768,
                                      "moe_intermediate_size": 256, "num_experts": 16, "top_k": 2,
                                      "num_attention_heads": 12, "num_key_value_heads": 4},
                            "cluster": {"num_nodes": 2},
                            "deployment": {"ep_size": 16, "enable_dp_attention": False}}, "s.yaml")
    problem = model_problem(Parallel(8, 1, 8, 8, 1), 64, 6, 1536, "bf16", "gqa")
    assert "num_key_value_heads (6)" in problem
    assert model_problem(Parallel(8, 1, 8, 8, 1), 64, 4, 1536, "bf16", "gqa") is None   # replicated
    with pytest.raises(SpecError, match=r"moe_intermediate_size / moe_tp_size \(1536 / 8\) is not "
                                        r"a multiple of 128"):
        _scenario({"ep_size": 1, "tp_size": 8, "moe_a2a_backend": "none"},
                  model="Qwen3-235B-A22B-FP8", nodes=1)
    ok = _scenario({"ep_size": 2, "tp_size": 8, "moe_a2a_backend": "none"},
                   model="Qwen3-235B-A22B-FP8", nodes=1)          # 1536 / 4 = 384: whole blocks
    assert ok.deployment.parallel.moe_tp_size == 4


def test_elastic_failures_need_one_gpu_per_dp_group():
    with pytest.raises(SpecError, match=r"deployment.failures needs deployment.enable_dp_attention: "
                                        r"true with one GPU per DP group"):
        _scenario({"ep_size": 8, "dp_size": 2, "failures": [{"rank": 1, "at_s": 1.0}]})


def test_attention_not_modelled_is_refused_for_a_run():
    for name, kind in (("GLM-5", "mla_dsa"), ("Qwen3.5-397B-A17B", "hybrid_linear")):
        with pytest.raises(SpecError, match=rf"model.attention \('{kind}'\) must be one of "
                                            rf"\['gqa', 'mla'\] to simulate {name}"):
            _scenario({"ep_size": 16}, model=name)


def test_nvfp4_needs_fp4_tensor_cores():
    with pytest.raises(SpecError, match=r"deployment.quantization \('modelopt_fp4'\) must run on a "
                                        r"GPU with FP4 tensor cores \['B200', 'B300', 'GB200', 'GB300'\]: "
                                        r"H200 has none"):
        _scenario({"ep_size": 8, "quantization": "modelopt_fp4"})
    served = _scenario({"ep_size": 8, "quantization": "modelopt_fp4"}, gpu="B200").served_model
    assert (served.weight_dtype, served.dense_weight_dtype) == ("nvfp4", "bf16")
