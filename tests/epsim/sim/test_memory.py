"""One GPU's memory (weights, the KV pool) and the pool's admission rule during a run."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.sim import simulate
from epsim.sim.arrivals import Requests
from epsim.sim.batching import Scheduler
from epsim.sim.kv_pool import KVPool
from epsim.sim.memory import (GIB, INIT_OVERHEAD_GIB, default_mem_fraction_static, kv_bytes_per_token,
                              memory_plan, min_mem_fraction_static, weight_bytes)
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.scenario import scenario_from_dict
from epsim.zoo import get_hardware, get_model, hardware_names

# the device's total as nvidia-smi reports it (memory.total, MiB) beside the datasheet figure
# (GB as sold): H100 / H800 SXM5 81559 MiB, H200 SXM 143771, B200 183359, GB200 189471, GB300
# 284208 (nvidia-smi outputs published with the GPUs' names; docs/model.md, "Memory"), B300
# 275040 (aiconfigurator-core's b300_sxm.yaml: "275040MiB reported by nvidia-smi")
DATASHEET = {"H100": (80, 81559), "H800": (80, 81559), "H200": (141, 143771),
             "B200": (180, 183359), "B300": (288, 275040), "GB200": (186, 189471),
             "GB300": (288, 284208)}


def test_every_zoo_gpu_holds_its_datasheet_memory_in_gib():
    assert sorted(DATASHEET) == sorted(hardware_names())
    for name, (gb, mib) in DATASHEET.items():
        hw = get_hardware(name)
        assert hw.hbm_gb == gb
        assert hw.hbm_gib == pytest.approx(mib / 1024.0)
        if name == "B300":          # its 288 GB are decimal: 275040 MiB are 288.4e9 bytes
            assert hw.hbm_gib * GIB / 1e9 == pytest.approx(gb, rel=0.01)
            continue
        # NVIDIA's HBM "GB" are binary gigabytes less a reserve: read as 1e9 bytes they would
        # be 7 % below what the device reports
        assert 0.95 < hw.hbm_gib / gb <= 1.0
        assert hw.hbm_gib > gb * 1e9 / GIB * 1.03


def test_deepseek_v3_weights_add_up_to_its_671b_parameters():
    # the FP8 model card: 671B parameters (the MTP module's 14B apart), the embedding and LM
    # head in BF16. At EP 8 with DP attention each GPU holds 1/8 of the routed experts and a
    # whole copy of the rest: the experts of all eight plus one copy of the rest is the model
    model = get_model("DeepSeek-V3")
    experts, other, draft = weight_bytes(model, DeploymentSpec(ep_size=8))
    embedding = 2 * model.vocab_size * model.hidden_size
    params = 8 * experts + (other - embedding * 2.0) + embedding      # FP8: a byte a parameter
    assert params == pytest.approx(671e9, rel=0.01)
    assert draft == 0.0
    _, _, draft = weight_bytes(model, DeploymentSpec(ep_size=8, speculative_algorithm="NEXTN"))
    # one more MoE layer: 32 local experts (1.41 B parameters), attention (0.19 B), the shared
    # expert (0.04 B) and the input projection 2h x h (0.10 B): 1.74 B bytes in FP8, plus the
    # block-FP8 scales (4 bytes a 128 x 128 block: 0.024 %)
    assert draft == pytest.approx((32 * model.expert_params + model.attention_params
                                   + model.expert_params + 2 * 7168 * 7168) * (1 + 4 / 128**2),
                                  rel=2e-5)
    assert 1.6 * GIB < draft < 1.7 * GIB


def test_sglangs_own_minimum_fraction_for_a_named_case():
    # SemiAnalysisAI/InferenceX#2128, SGLang on 8 x H200 (TP 8): "avail mem=12.25 GB, mem
    # usage=125.65 GB" after loading DeepSeek-V4-Pro FP8, and "minimum-viable fraction 0.9113":
    # the memory at load is 137.90 GiB, the H200's 140.40 less INIT_OVERHEAD_GIB
    total = get_hardware("H200").hbm_gib - INIT_OVERHEAD_GIB
    assert total == pytest.approx(12.25 + 125.65, abs=0.01)
    assert min_mem_fraction_static(125.65, total) == pytest.approx(0.9113, abs=2e-4)


def test_default_fraction_is_sglangs_heuristic():
    # server_args.py: reserved MiB = 512 + 1.5 * max(chunk, 2048) + 2 * graph bs + 1024 * tp / 8
    # + 3 * graph bs * dp (DP attention); H200: 143771 MiB
    d = DeploymentSpec(ep_size=8, chunked_prefill_size=8192, cuda_graph_max_bs=256)
    reserved = 512 + 1.5 * 8192 + 2 * 256 + 1024 * 8 / 8 + 3 * 256 * 8
    expected = round((143771 - reserved) / 143771, 3)
    assert default_mem_fraction_static(get_hardware("H200").hbm_gib, d) == expected
    # the layout's sizes (SGLang's --tp-size, --dp-size): TP 8 in 2 DP groups reserves less
    grouped = DeploymentSpec(ep_size=8, dp_size=2, chunked_prefill_size=8192, cuda_graph_max_bs=256)
    reserved = 512 + 1.5 * 8192 + 2 * 256 + 1024 * 8 / 8 + 3 * 256 * 2
    assert default_mem_fraction_static(get_hardware("H200").hbm_gib, grouped) == round(
        (143771 - reserved) / 143771, 3)
    # at least 10 GiB reserved on a GPU over 60 GiB
    small = DeploymentSpec(ep_size=1, enable_dp_attention=False, chunked_prefill_size=2048,
                           cuda_graph_max_bs=8)
    assert default_mem_fraction_static(79.6474609375, small) == round(
        (81559 - 10240) / 81559, 3)


def test_kv_bytes_per_token_mla_and_gqa():
    ds, qwen = get_model("DeepSeek-V3"), get_model("Qwen3-235B-A22B")
    # MLA: the latent (512) and rope key (64), BF16, 61 layers (+1 with the MTP draft)
    assert kv_bytes_per_token(ds, DeploymentSpec(ep_size=8)) == (512 + 64) * 2 * 61
    assert kv_bytes_per_token(ds, DeploymentSpec(ep_size=8, speculative_algorithm="NEXTN")) == (
        (512 + 64) * 2 * 62)
    # GQA: K and V of 4 heads of 128; TP attention over 8 ranks keeps one head each
    assert kv_bytes_per_token(qwen, DeploymentSpec(ep_size=8)) == 2 * 4 * 128 * 2 * 94
    tp = DeploymentSpec(ep_size=8, enable_dp_attention=False)
    assert kv_bytes_per_token(qwen, tp) == 2 * 1 * 128 * 2 * 94
    # attention TP 2 per DP group (dp_size 4 of 8 GPUs) splits the 4 KV heads in two; an FP8
    # cache halves every element; MLA's latent is one head, whole on every GPU of a group
    grouped = DeploymentSpec(ep_size=8, dp_size=4, kv_cache_dtype="fp8_e4m3")
    assert kv_bytes_per_token(qwen, grouped) == 2 * 2 * 128 * 1 * 94
    assert kv_bytes_per_token(ds, DeploymentSpec(ep_size=8, dp_size=1)) == (512 + 64) * 2 * 61


def test_weights_follow_the_layout_and_the_served_formats():
    # MoE-TP 4 x EP 2 holds a quarter of each of 4x the slots: the experts' bytes of EP 8;
    # TP attention over all 8 GPUs keeps an eighth of the rest, attention TP 4 per DP group
    # (dp_size 2) a quarter
    qwen = get_model("Qwen3-235B-A22B")
    ep8 = weight_bytes(qwen, DeploymentSpec(ep_size=8))
    moe_tp = weight_bytes(qwen, DeploymentSpec(ep_size=2, tp_size=8, moe_a2a_backend="none",
                                               enable_dp_attention=False))
    assert moe_tp[0] == pytest.approx(ep8[0]) and moe_tp[1] == pytest.approx(ep8[1] / 8)
    grouped = weight_bytes(qwen, DeploymentSpec(ep_size=8, dp_size=2))
    assert grouped[0] == ep8[0] and grouped[1] == pytest.approx(ep8[1] / 4)
    # the served formats (`Scenario.served_model`): SGLang's fp8 quantization of the BF16
    # checkpoint halves the experts and the dense parts, the BF16 embedding and LM head stay
    sc = scenario_from_dict({"model": "Qwen3-235B-A22B", "cluster": {"gpu": "H200"},
                             "deployment": {"ep_size": 8, "quantization": "fp8"}})
    fp8 = memory_plan(sc)
    embedding = 2 * qwen.vocab_size * qwen.hidden_size * 2.0
    assert fp8.expert_weights_gib * GIB == pytest.approx(ep8[0] / 2)
    assert fp8.other_weights_gib * GIB == pytest.approx((ep8[1] - embedding) / 2 + embedding)


def _ds_scenario(arrivals=None, duration_s=1.0, **deployment):
    return scenario_from_dict({
        "model": "DeepSeek-V3", "cluster": {"gpu": "H200"},
        "deployment": {"ep_size": 8, "disaggregation_mode": "decode", **deployment},
        "workload": {"input_len": {"kind": "fixed", "value": 8192},
                     "output_len": {"kind": "fixed", "value": 1024}, "duration_s": duration_s,
                     **({"arrivals": arrivals} if arrivals else {})}})


def test_memory_plan_of_deepseek_on_eight_h200():
    plan = memory_plan(_ds_scenario(mem_fraction_static=0.85))
    assert plan.fits and plan.mem_fraction_source == "deployment"
    assert plan.kv_pool_gib == pytest.approx(plan.total_gib * 0.85 - plan.weights_gib)
    assert plan.max_total_num_tokens == int(plan.kv_pool_gib * GIB // ((512 + 64) * 2 * 61))


def test_weights_that_do_not_fit_are_a_one_line_error():
    sc = _ds_scenario(ep_size=2, mem_fraction_static=0.9)
    assert not memory_plan(sc).fits
    with pytest.raises(SpecError, match=r"does not fit: the weights \(\d+\.\d GiB per GPU.*"
                                        r"mem_fraction_static above"):
        simulate(sc)


def _pool_scheduler(capacity: int, reserve: int, inputs, outputs, max_running=8):
    reqs = Requests(np.zeros(len(inputs)), np.asarray(inputs, np.int64), np.asarray(outputs, np.int64))
    pool = KVPool(capacity, reserve, max_running, max(inputs) + max(outputs), 0.0)
    return Scheduler(reqs, num_ranks=1, max_running=max_running, chunk_tokens=1000, mode="decode",
                     kv=pool), pool


def test_a_rank_admits_what_its_pool_holds_with_the_reserves():
    # 1000 tokens; prompts of 300 with 100 reserved each: 2 fit (2 x 300 + 2 x 100 = 800), a
    # third would need 1200
    sched, pool = _pool_scheduler(1000, 100, [300, 300, 300], [4, 4, 4])
    plan = sched.plan(0.0)
    assert sched.occupied.tolist() == [2] and plan.num_waiting == 1
    sched.commit(plan, 1.0)
    for t in range(1, 4):                       # the first two finish after 4 tokens
        sched.commit(sched.plan(float(t)), float(t + 1))
    assert sched.occupied.tolist() == [0]
    sched.plan(4.0)
    assert sched.occupied.tolist() == [1]       # then the third is admitted
    assert pool.held == 4 and pool.summary()["held_frac"] == pytest.approx(4 / 5)


def test_the_queue_head_blocks_the_requests_behind_it():
    # FCFS: a long prompt that does not fit keeps a short one behind it waiting too
    sched, _ = _pool_scheduler(1000, 0, [600, 600, 10], [3, 3, 3])
    sched.plan(0.0)
    assert sched.occupied.tolist() == [1]


def test_a_pool_that_cannot_bind_changes_nothing():
    pool = KVPool(10_000, 100, 4, 200, 0.0)
    assert not pool.active
    reqs = Requests(np.zeros(6), np.full(6, 100, np.int64), np.full(6, 100, np.int64))
    sched = Scheduler(reqs, 1, 4, 1000, mode="decode", kv=pool)
    assert sched.kv is None
    sched.plan(0.0)
    assert sched.occupied.tolist() == [4]


def test_kv_bound_run_reports_when_it_bound():
    # a small fraction leaves a pool of a few requests per rank: the run admits fewer than its
    # slots, says so, and never holds more than the pool
    sc = _ds_scenario(arrivals={"kind": "concurrency", "clients": 256}, duration_s=0.5,
                      mem_fraction_static=0.715, max_running_requests=64)
    result = simulate(sc)
    kv = result.kv_cache
    assert kv["can_bind"] and kv["held_frac"] > 0.5 and kv["peak_used_frac"] <= 1.0
    per_rank = kv["max_total_num_tokens"] // (8192 + 512)
    assert result.steps["num_running"].max() <= 8 * per_rank + 8


def test_the_steady_batch_is_capped_by_the_pool():
    # 0.715 of the H200 leaves a pool of ~8 requests of 8192 + 1024 / 2 tokens with their 512
    # reserved: the steady model's batch limit is that, not the 64 slots
    from epsim.sim.memory import kv_running_limit
    from epsim.sim.steady import steady_model
    sc = _ds_scenario(mem_fraction_static=0.715, max_running_requests=64)
    model = steady_model(sc)
    plan = memory_plan(sc)
    assert model.max_running == kv_running_limit(plan.max_total_num_tokens, model.decode_context, 512)
    assert 1 <= model.max_running < 64
