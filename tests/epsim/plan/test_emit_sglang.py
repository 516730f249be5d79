"""`epsim plan --emit sglang` (`epsim.plan.sglang_args`): every deployment field has one row in
the table (a new field must add its own before it is emitted), each reaches its SGLang server
argument in SGLang's units, values SGLang lacks are refused by name, and a plan or fleet answer
prints its launch commands."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from epsim.plan.sglang_args import SGLANG_ARGS, EmitError, launch, router
from epsim.spec import DeploymentSpec
from epsim.spec.scenario import scenario_from_dict
from tests.epsim.plan_fixtures import TINY_PLAN_SCENARIO, write_tiny_scenario


def _scenario(**deployment):
    data = {**TINY_PLAN_SCENARIO, "deployment": {**TINY_PLAN_SCENARIO["deployment"], **deployment}}
    return scenario_from_dict(data, where="test")


def _args(**deployment) -> list[str]:
    return launch(_scenario(**deployment)).args


def _value(args: list[str], option: str) -> str:
    return args[args.index(option) + 1]


def test_the_table_covers_every_deployment_field():
    assert set(SGLANG_ARGS) == set(DeploymentSpec.model_fields), (
        "a deployment field without an SGLang row (add it to epsim.plan.sglang_args.SGLANG_ARGS): "
        f"{sorted(set(DeploymentSpec.model_fields) - set(SGLANG_ARGS))}")


def test_fields_reach_their_server_arguments_in_sglangs_units():
    args = _args(ep_size=16, max_running_requests=32, chunked_prefill_size=4096, enable_eplb=True,
                 ep_num_redundant_experts=16, eplb_rebalance_num_iterations=500,
                 ep_dispatch_algorithm="random", eplb_algorithm="deepseek_global",
                 enable_two_batch_overlap=True, cuda_graph_max_bs=64, max_prefill_tokens=5500)
    assert _value(args, "--tp-size") == _value(args, "--ep-size") == _value(args, "--dp-size") == "16"
    assert "--enable-dp-attention" in args and "--enable-two-batch-overlap" in args
    # SGLang divides these by --dp-size under DP attention; epsim's are per DP rank
    assert _value(args, "--max-running-requests") == str(32 * 16)
    assert _value(args, "--chunked-prefill-size") == str(4096 * 16)
    assert _value(args, "--cuda-graph-max-bs") == "64"               # per rank in both
    assert _value(args, "--max-prefill-tokens") == "5500"            # each DP rank's scheduler's
    assert _value(args, "--ep-dispatch-algorithm") == "dynamic"      # SGLang's name for random
    assert _value(args, "--eplb-algorithm") == "deepseek"            # non-hierarchical in SGLang
    assert _value(args, "--eplb-rebalance-num-iterations") == "500"
    assert _value(args, "--moe-a2a-backend") == "deepep" and _value(args, "--deepep-mode") == "auto"
    assert _value(args, "--disaggregation-mode") == "decode"
    # 16 GPUs on 8-GPU nodes: one command per node
    assert _value(args, "--nnodes") == "2" and "--node-rank" in args
    # without EPLB its settings are not given; TP attention gives no --dp-size
    plain = _args(enable_dp_attention=False)
    assert "--eplb-rebalance-num-iterations" not in plain and "--dp-size" not in plain
    assert "--max-prefill-tokens" not in plain                       # unset: SGLang's default
    assert _value(plain, "--max-running-requests") == "32"
    # one MLA key split is SGLang's cutlass_mla backend; the split kernel is SGLang's own pick
    r1_b200 = scenario_from_dict({**TINY_PLAN_SCENARIO, "model": "DeepSeek-V3",
                                  "cluster": {"gpu": "B200", "num_nodes": 2},
                                  "deployment": {**TINY_PLAN_SCENARIO["deployment"],
                                                 "mla_kv_splits": "one"}}, where="test")
    assert _value(launch(r1_b200).args, "--attention-backend") == "cutlass_mla"
    assert "--attention-backend" not in plain
    # BF16 DeepEP dispatch is an environment variable in SGLang
    assert launch(_scenario(dispatch_dtype="bf16")).env == {"SGLANG_DEEPEP_BF16_DISPATCH": "1"}
    assert launch(_scenario(dispatch_dtype="fp8")).env == {}
    nvfp4 = _scenario(dispatch_dtype="nvfp4", deepep_mode="low_latency")
    assert launch(nvfp4).env == {"SGLANG_MOE_NVFP4_DISPATCH": "1"}



def test_serving_fields_reach_sglang():
    # the KV pool's fraction and reserve, the draft chain resolved (SGLang's DeepSeek defaults
    # 3, 1, 4 written out), the measured accept length never (SGLang reports it)
    spec = launch(_scenario(mem_fraction_static=0.8, num_reserved_decode_tokens=256,
                            speculative_algorithm="NEXTN", speculative_accept_length=2.5))
    assert _value(spec.args, "--mem-fraction-static") == "0.8"
    assert spec.env == {"SGLANG_NUM_RESERVED_DECODE_TOKENS": "256"}
    assert [_value(spec.args, o) for o in ("--speculative-algorithm", "--speculative-num-steps",
                                           "--speculative-eagle-topk",
                                           "--speculative-num-draft-tokens")] == ["NEXTN", "3", "1", "4"]
    assert not any("accept" in a for a in spec.args)
    plain = launch(_scenario())
    assert not any(a.startswith(("--speculative", "--mem-fraction")) for a in plain.args)
    assert plain.env == {} and not plain.notes
    assert any("2 instances of this command" in n for n in launch(_scenario(num_instances=2)).notes)

def test_the_layout_and_formats_reach_sglang_resolved():
    # DP attention in 4 groups of 2 GPUs over 8: --dp-size is the groups, per-server counts x 4
    args = _args(tp_size=8, dp_size=4, max_running_requests=32)
    assert _value(args, "--tp-size") == _value(args, "--ep-size") == "8"
    assert _value(args, "--dp-size") == "4" and _value(args, "--max-running-requests") == str(32 * 4)
    # MoE-TP: 4 EP ranks of 2 GPUs with the none backend; SGLang derives moe_tp itself
    moe_tp = _args(tp_size=8, ep_size=4, moe_a2a_backend="none", enable_dp_attention=False)
    assert _value(moe_tp, "--tp-size") == "8" and _value(moe_tp, "--ep-size") == "4"
    assert "--moe-tp-size" not in moe_tp and "--dp-size" not in moe_tp
    # formats: the checkpoint's own needs nothing, FP8 at load and the KV dtype are arguments
    assert "--quantization" not in _args() and "--kv-cache-dtype" not in _args()
    assert "--quantization" not in _args(quantization="bf16")          # Qwen3-30B-A3B is BF16
    assert _value(_args(quantization="fp8"), "--quantization") == "fp8"
    assert _value(_args(kv_cache_dtype="fp8_e4m3"), "--kv-cache-dtype") == "fp8_e4m3"
    modelopt = launch(_scenario(quantization="modelopt_fp8"))      # needs ModelOpt's checkpoint
    assert _value(modelopt.args, "--quantization") == "modelopt_fp8"
    assert any("NVIDIA's ModelOpt quantised (FP8)" in note for note in modelopt.notes)


@pytest.mark.parametrize("deployment, match", [
    ({"quantization": "fp8_block"}, r"quantization \('fp8_block'\) has no SGLang setting: .*"
                                    r"fp8_block weights need a fp8_block checkpoint"),
    ({"moe_a2a_backend": "torch"}, r"deployment.moe_a2a_backend \('torch'\) has no SGLang setting"),
    ({"moe_a2a_backend": "mooncake", "dispatch_dtype": "bf16"}, r"Mooncake EP dispatches FP8 always"),
    ({"enable_eplb": True, "eplb_algorithm": "sticky"}, r"eplb_algorithm \('sticky'\)"),
    ({"enable_eplb": True, "ep_num_redundant_experts": 8, "ep_dispatch_algorithm": "round_robin"},
     r"ep_dispatch_algorithm \('round_robin'\)"),
    ({"enable_eplb": True, "init_expert_location": "from_skew"}, r"epsim eplb LOADS --out DIR"),
    ({"enable_eplb": True, "eplb_stop_the_world": False}, r"--eplb-rebalance-layers-per-chunk"),
])
def test_values_sglang_lacks_are_refused_not_guessed(deployment, match):
    with pytest.raises(EmitError, match=match):
        launch(_scenario(**deployment))


def test_a_field_without_a_row_is_refused(monkeypatch):
    monkeypatch.delitem(SGLANG_ARGS, "cuda_graph_max_bs")
    with pytest.raises(EmitError, match=r"deployment.cuda_graph_max_bs has no entry in .*SGLANG_ARGS"):
        launch(_scenario())


def test_plan_prints_the_answers_launch_command(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", scenario, "--sweep",
                           "deployment.ep_size=8,16", "--constraint", "tpot_ms.p99<=1000", "--emit", "sglang",
                           "--workers", "1", "--no-plots", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["sglang"]) == 1
    best_ep = data["best"]["deployment.ep_size"]
    entry = data["sglang"][0]
    assert entry["command"].startswith("python -m sglang.launch_server --model-path <weights of Qwen3-30B-A3B>")
    assert _value(entry["args"], "--ep-size") == str(best_ep)
    refused = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", scenario, "--sweep",
                              "deployment.ep_size=8", "--set", "deployment.moe_a2a_backend=torch",
                              "--no-keep-up", "--emit", "sglang", "--workers", "1", "--no-plots"],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "moe_a2a_backend ('torch') has no SGLang setting" in refused.stderr


def test_router_pairs_the_pools():
    assert router(2, 3) == [
        "python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
        "--prefill", "<prefill-0 URL>", "--prefill", "<prefill-1 URL>", "--decode", "<decode-0 URL>",
        "--decode", "<decode-1 URL>", "--decode", "<decode-2 URL>"]


def test_fleet_prints_a_prefill_decode_pair_and_the_router():
    from pathlib import Path
    scenario = Path(__file__).resolve().parents[3] / "scenarios" / "qwen235b_pd_fleet.yaml"
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", str(scenario), "--fleet",
                           "--sweep", "deployment.ep_size=16,32", "--sweep", "deployment.moe_a2a_backend=deepep",
                           "--constraint", "ttft_ms.p99<=2000", "--constraint", "tpot_ms.p99<=50",
                           "--no-verify", "--emit", "sglang", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    emitted = data["sglang"]
    for role in ("prefill", "decode"):
        args = emitted[role]["args"]
        assert _value(args, "--disaggregation-mode") == role
        assert _value(args, "--disaggregation-transfer-backend") == "mooncake"
        assert _value(args, "--ep-size") == str(data[role]["ep_size"])
        assert emitted[role]["instances"] == data[role]["instances"]
    route = emitted["router"]
    assert route.count("--prefill") == data["prefill"]["instances"]
    assert route.count("--decode") == data["decode"]["instances"]
    nccl = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", str(scenario), "--fleet",
                           "--sweep", "deployment.ep_size=16", "--constraint", "ttft_ms.p99<=2000",
                           "--constraint", "tpot_ms.p99<=50", "--no-verify", "--kv-transfer", "nccl",
                           "--emit", "sglang"], capture_output=True, text=True, timeout=300)
    assert nccl.returncode == 2 and "--kv-transfer ('nccl') has no SGLang transfer backend" in nccl.stderr


def test_a_decode_routed_by_room_says_so_and_auto_says_nothing():
    by_room = _args(disaggregation_mode="decode", load_balance_method="follow_bootstrap_room")
    assert _value(by_room, "--load-balance-method") == "follow_bootstrap_room"
    assert "--load-balance-method" not in _args(disaggregation_mode="decode")
