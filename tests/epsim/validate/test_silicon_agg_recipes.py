"""The server flags of an agg silicon row: InferenceX's launch scripts, held to the sweep in effect
when the row was measured (`epsim.validate.silicon.agg_recipes`)."""

from __future__ import annotations

from epsim.cost.shared_experts import fused_shared_experts
from epsim.spec.deployment import DeploymentSpec
from epsim.validate.silicon import agg_recipes
from epsim.validate.silicon.agg_recipes import _runs, recipe_flags
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.rows import parse_row
from epsim.zoo import get_model

MARCH = "2026-03-25T16:34:14Z"


def test_runs_are_the_single_node_groups_of_a_key():
    config = {"seq-len-configs": [
        {"isl": 1024, "osl": 1024, "search-space": [
            {"tp": 4, "ep": 4, "conc-start": 4, "conc-end": 16},
            {"tp": 8, "conc-list": [64]}]}]}
    assert _runs(config) == [[1024, 1024, 4, 4, 4], [1024, 1024, 4, 4, 8], [1024, 1024, 4, 4, 16],
                             [1024, 1024, 8, 0, 64]]          # ep not stated: 0


def test_fp4_b200_script_sets_the_scheduler_limits_and_the_receive_interval():
    low = recipe_flags("fp4", "b200_sxm", 1024, 1024, 4, 4, 8, MARCH)
    high = recipe_flags("fp4", "b200_sxm", 1024, 1024, 4, 4, 128, MARCH)
    assert (low.scheduler_recv_interval, high.scheduler_recv_interval) == (10, 30)   # CONC >= 16
    assert agg_recipes.deployment_fields(high) == {
        "max_running_requests": 256, "cuda_graph_max_bs": 256, "chunked_prefill_size": 16384,
        "mem_fraction_static": 0.85, "kv_cache_dtype": "fp8_e4m3", "scheduler_recv_interval": 30,
        "disable_shared_experts_fusion": True}          # --moe-runner-backend flashinfer_trtllm


def test_fp8_b200_branches_on_tp_and_a_run_outside_the_sweep_has_no_flags():
    tp4 = recipe_flags("fp8", "b200_sxm", 8192, 1024, 4, 1, 32, MARCH)
    assert (tp4.flags.max_running_requests, tp4.flags.chunked_prefill_size,
            tp4.scheduler_recv_interval) == (32, 8192, 10)
    # the sweep ran 8k/1k at TP 8 with 4 clients only that day: 256 clients came from elsewhere
    assert recipe_flags("fp8", "b200_sxm", 8192, 1024, 8, 1, 4, MARCH).flags.max_running_requests == 128
    assert recipe_flags("fp8", "b200_sxm", 8192, 1024, 8, 1, 256, MARCH) is None
    assert recipe_flags("fp8", "h100_sxm", 1024, 1024, 8, 1, 4, MARCH) is None      # no such key


def test_a_november_row_runs_the_sweeps_ep_and_its_flags():
    record = {"id": "r", "silicon_data_source": "db-dump; silicon_concurrency=16; "
              "measured=2025-11-10T00:00:00.000Z; workflow_run_id=122", "backend": "sglang",
              "backend_version": "", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm",
              "precision": "fp4", "mode": "agg", "isl": "1024", "osl": "1024",
              "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "batch_size": "16",
              "tp_size": "4", "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "4",
              "moe_ep_size": "1", "silicon_ttft_ms": "890", "silicon_tpot_ms": "16.3"}
    row = parse_row(record, "test")
    found = agg_recipes.for_row(row)
    assert found.ep_size == 4 and found.scheduler_recv_interval == 30
    plan = plan_row(row)
    deployment = plan.instances[0].data["deployment"]
    assert deployment["ep_size"] == 4 and deployment["scheduler_recv_interval"] == 30
    assert deployment["max_running_requests"] == 256 and deployment["kv_cache_dtype"] == "fp8_e4m3"
    assert any("the row says EP 1" in a for a in plan.assumptions)


def test_every_fp4_script_unfuses_the_shared_expert_which_its_ep_does_anyway():
    # the FP4 B200 scripts (e06929c70's --enable-flashinfer-trtllm-moe, --moe-runner-backend
    # flashinfer_trtllm from d8fe8f73e) and the B300 one: SGLang sets disable_shared_experts_fusion
    for system, measured in (("b200_sxm", "2025-11-10T00:00:00.000Z"), ("b200_sxm", MARCH),
                             ("b300_sxm", "2026-04-20T00:00:00.000Z")):
        found = recipe_flags("fp4", system, 1024, 1024, 4, 4, 16, measured)
        assert found.flags.moe_runner_backend == "flashinfer_trtllm", (system, measured)
        assert agg_recipes.deployment_fields(found)["disable_shared_experts_fusion"] is True
    # every FP4 sweep ran MoE EP = TP, where SGLang runs the shared expert apart whatever the flag:
    # the assumption says so, and the price is unchanged
    record = {"id": "r", "silicon_data_source": f"db-dump; silicon_concurrency=16; measured={MARCH}",
              "backend": "sglang", "backend_version": "0.5.9",
              "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp4",
              "mode": "agg", "isl": "1024", "osl": "1024", "gemm_quant_mode": "nvfp4",
              "moe_quant_mode": "nvfp4", "batch_size": "16", "tp_size": "16", "pp_size": "1",
              "attention_dp_size": "1", "moe_tp_size": "4", "moe_ep_size": "4",
              "silicon_ttft_ms": "300", "silicon_tpot_ms": "10"}
    plan = plan_row(parse_row(record, "test"))
    deployment = DeploymentSpec.model_validate(plan.instances[0].data["deployment"])
    assert deployment.disable_shared_experts_fusion and deployment.ep_size == 4
    assert any(a.startswith(agg_recipes.UNFUSED_NOTE) and "at MoE EP 4" in a
               for a in plan.assumptions)
    model = get_model("DeepSeek-R1")
    fused = deployment.model_copy(update={"disable_shared_experts_fusion": False})
    assert fused_shared_experts(model, fused, "sglang", 4) == 0           # EP > 1: apart anyway
    assert fused_shared_experts(model, fused, "sglang", 1) == 1           # it matters at EP 1 only
    assert fused_shared_experts(model, deployment, "sglang", 1) == 0


def test_a_row_measured_before_the_harness_warm_up_says_its_run_started_cold():
    def row(measured):
        return parse_row({"id": "r", "silicon_data_source": f"db-dump; silicon_concurrency=32; "
                          f"measured={measured}; workflow_run_id=122", "backend": "sglang",
                          "backend_version": "", "model_path": "deepseek-ai/DeepSeek-R1",
                          "system": "b200_sxm", "precision": "fp4", "mode": "agg", "isl": "1024",
                          "osl": "1024", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
                          "batch_size": "32", "tp_size": "8", "pp_size": "1",
                          "attention_dp_size": "1", "moe_tp_size": "8", "moe_ep_size": "1",
                          "silicon_ttft_ms": "8621", "silicon_tpot_ms": "18.5"}, "test")
    november, march = row("2025-11-10T00:00:00.000Z"), row(MARCH)
    assert "without warm-up" in agg_recipes.cold_start_note(november)
    assert agg_recipes.cold_start_note(march) is None
    assert any("without warm-up" in a for a in plan_row(november).assumptions)
    assert not any("without warm-up" in a for a in plan_row(march).assumptions)


def _november_fp8(osl: int, measured: str = "2025-11-18T00:00:00.000Z"):
    return parse_row({"id": "r", "silicon_data_source": f"db-dump; silicon_concurrency=64; "
                      f"measured={measured}; workflow_run_id=148", "backend": "sglang",
                      "backend_version": "", "model_path": "deepseek-ai/DeepSeek-R1",
                      "system": "b200_sxm", "precision": "fp8", "mode": "agg", "isl": "1024",
                      "osl": str(osl), "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8_block",
                      "batch_size": "64", "tp_size": "64", "pp_size": "1",
                      "attention_dp_size": "1", "moe_tp_size": "8", "moe_ep_size": "8",
                      "silicon_ttft_ms": "1616", "silicon_tpot_ms": "27.0"}, "test")


def test_a_cold_row_of_the_nvd_only_label_runs_the_nvd_scripts_prompts():
    # November 18th: the b200 label held only b200-nvd, whose script runs 50N (20N at OSL 8192)
    # for deepseek-ai/DeepSeek-R1-0528; FP4's -V2 checkpoint gets 10N there
    plan = plan_row(_november_fp8(1024))
    assert plan.instances[0].requests_per_client == 50
    assert any("--num-prompts 50N (b200-nvd" in a for a in plan.assumptions)
    assert plan_row(_november_fp8(8192)).instances[0].requests_per_client == 20
    # the last day of 2025 (d27433dff): the label held slurm and DGXC runners too
    late = plan_row(_november_fp8(1024, measured="2025-12-31T00:00:00.000Z"))
    assert late.instances[0].requests_per_client == 0
    assert any("simulated as 10N" in a for a in late.assumptions)


def test_a_cold_b200_row_plans_the_fmha_build_and_a_warm_one_the_allocators_compiles():
    cold = plan_row(_november_fp8(1024)).instances[0].data["deployment"]["first_use_compile"]
    assert cold["kernel"] == "flashinfer_cutlass_fmha" and cold["warmup_batches"] == []
    assert cold["alloc_compile_s"] > 0 and cold["page_size"] == 64      # its paged allocator's
    # the same run measured in March: InferenceX 12ba0ae07's lmsysorg/sglang:v0.5.9-cu130, after
    # the warm-up: no module build, the paged allocator's Triton kernels at their new keys
    warm = plan_row(_november_fp8(1024, measured=MARCH), approximate=True)    # MTP or not
    deployments = [i.data["deployment"] for p in (warm, *warm.candidates) for i in p.instances]
    assert deployments and all(d["first_use_compile"]["kernel"] == "sglang_paged_alloc"
                               for d in deployments)


def _fp8_tp8(clients: int, isl: int = 1024, osl: int = 8192, measured: str = MARCH):
    return parse_row({"id": "r", "silicon_data_source": f"source_file=2026-03-25.csv; "
                      f"silicon_concurrency={clients}; measured={measured}", "backend": "sglang",
                      "backend_version": "0.5.9", "model_path": "deepseek-ai/DeepSeek-R1",
                      "system": "b200_sxm", "precision": "fp8", "mode": "agg", "isl": str(isl),
                      "osl": str(osl), "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8_block",
                      "batch_size": str(clients), "tp_size": "8", "pp_size": "1",
                      "attention_dp_size": "1", "moe_tp_size": "8", "moe_ep_size": "1",
                      "silicon_ttft_ms": "200", "silicon_tpot_ms": "9"}, "test")


def test_the_mtp_twin_keys_flags_set_its_draft():
    found = recipe_flags("fp8", "b200_sxm", 1024, 8192, 8, 1, 256, MARCH, mtp=True)
    assert found.key == "dsr1-fp8-b200-sglang-mtp"
    assert agg_recipes.deployment_fields(found) == {
        "max_running_requests": 512, "cuda_graph_max_bs": 512, "chunked_prefill_size": 16384,
        "mem_fraction_static": 0.82, "kv_cache_dtype": "fp8_e4m3", "scheduler_recv_interval": 30,
        "fp8_gemm_backend": "flashinfer_trtllm", "disable_shared_experts_fusion": True,
        "speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
    assert recipe_flags("fp8", "b200_sxm", 8192, 1024, 4, 1, 4, MARCH, mtp=True) is None  # TP 8 only


def test_a_b200_fp8_row_runs_its_linears_on_flashinfers_trtllm_gemm_its_shared_expert_apart():
    # every B200 FP8 script: SGLANG_ENABLE_FLASHINFER_GEMM=true (or --fp8-gemm-backend
    # flashinfer_trtllm) and --moe-runner-backend flashinfer_trtllm, which unfuses the shared expert
    plan = plan_row(_fp8_tp8(256))                     # the MTP twin's script
    deployment = plan.instances[0].data["deployment"]
    assert deployment["fp8_gemm_backend"] == "flashinfer_trtllm"
    assert deployment["disable_shared_experts_fusion"] is True
    assert any("FlashInfer's trtllm FP8 block GEMM's tile model" in a for a in plan.assumptions)
    assert any("disable_shared_experts_fusion" in a for a in plan.assumptions)
    tp4 = agg_recipes.deployment_fields(recipe_flags("fp8", "b200_sxm", 8192, 1024, 4, 1, 32, MARCH))
    assert (tp4["fp8_gemm_backend"], tp4["disable_shared_experts_fusion"]) == ("flashinfer_trtllm", True)
    fp4 = agg_recipes.deployment_fields(recipe_flags("fp4", "b200_sxm", 1024, 1024, 4, 4, 8, MARCH))
    assert "fp8_gemm_backend" not in fp4           # NVFP4 linears: not this kernel


def test_a_row_only_the_mtp_twins_sweep_ran_is_predicted_with_mtp():
    # 12ba0ae07 swept dsr1-fp8-b200-sglang (TP 8 up to 64 clients) and its -mtp twin (up to 512)
    plan = plan_row(_fp8_tp8(256))
    deployment = plan.instances[0].data["deployment"]
    assert plan.expressible and deployment["speculative_algorithm"] == "NEXTN"
    assert (deployment["speculative_num_steps"], deployment["speculative_num_draft_tokens"],
            deployment["max_running_requests"]) == (2, 3, 512)
    assert any("only dsr1-fp8-b200-sglang-mtp's sweep ran" in a for a in plan.assumptions)
    assert not any("SGLang's defaults for DeepSeek" in a for a in plan.assumptions)


def test_a_row_both_keys_ran_in_one_sweep_is_not_known_and_each_draft_is_a_candidate():
    row = _fp8_tp8(16)
    plan = plan_row(row)
    assert not plan.instances and "both ran" in plan.error
    assert plan.error_class == "deployment not known: several InferenceX recipe groups fit the row"
    candidates = plan_row(row, approximate=True).candidates
    drafts = [c.instances[0].data["deployment"].get("speculative_algorithm") for c in candidates]
    assert drafts == [None, "NEXTN"]
    assert candidates[0].instances[0].data["deployment"]["max_running_requests"] == 128


def test_a_row_of_a_sweep_before_the_twin_keeps_its_key():
    plan = plan_row(_fp8_tp8(16, measured="2026-02-05T19:55:05Z"))
    assert plan.expressible and "speculative_algorithm" not in plan.instances[0].data["deployment"]
