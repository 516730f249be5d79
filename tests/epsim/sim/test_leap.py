"""The fast engine's leap over saturated decode steps (`epsim.sim.leap`) changes nothing: a run
that leaps and the same run stepped one at a time (`leap=False`) give the same bits, step rows,
request times, token gaps, per-layer sums, the last step, the provenance ledger and EPLB's
rebalances alike."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from epsim.sim import Simulation
from epsim.spec import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[3]
QWEN_DECODE = {
    "name": "leap", "model": "Qwen3-235B-A22B", "cluster": {"gpu": "H200", "num_nodes": 2},
    "deployment": {"ep_size": 16, "enable_dp_attention": True, "moe_a2a_backend": "deepep",
                   "dispatch_dtype": "fp8", "disaggregation_mode": "decode",
                   "max_running_requests": 64},
    "workload": {"input_len": {"kind": "lognormal", "mean": 2048, "sigma": 0.5},
                 "output_len": {"kind": "lognormal", "mean": 400, "sigma": 0.5},
                 "skew": {"kind": "zipf", "alpha": 0.6, "drift_rate_per_s": 0.05},
                 "arrivals": {"kind": "poisson", "rate_per_s": 400},
                 "initial_running_per_rank": 64, "duration_s": 8.0, "warmup_s": 2.0},
}


def qwen_decode(deployment: dict | None = None, **workload):
    data = {**QWEN_DECODE, "workload": {**QWEN_DECODE["workload"], **workload},
            "deployment": {**QWEN_DECODE["deployment"], **(deployment or {})}}
    return scenario_from_dict(data)


def run_both(scenario, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = []
        for leap in (True, False):
            sim = Simulation(scenario, leap=leap, **kwargs)
            runs.append((sim, sim.run()))
    return runs


def assert_same(a, b, where=""):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, np.ndarray):
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), where
    else:
        assert a == b, where


def assert_same_runs(runs):
    (leapt, a), (stepped, b) = runs
    assert_same(a.steps, b.steps, "steps")
    assert_same(a.layer_mean_us, b.layer_mean_us, "layer_mean_us")
    for name in ("rank_pairs_mean", "first_token_s", "finish_s"):
        assert_same(getattr(a, name), getattr(b, name), name)
    assert_same(a.window_gaps.count, b.window_gaps.count, "window_gaps.count")
    assert_same(a.window_gaps.span_s, b.window_gaps.span_s, "window_gaps.span_s")
    assert_same({str(k): v for k, v in leapt.cost_model.ledger.sums.items()},
                {str(k): v for k, v in stepped.cost_model.ledger.sums.items()}, "ledger")
    assert leapt.cost_model.ledger.steps == stepped.cost_model.ledger.steps
    assert_same(a.last_step.cost.parts, b.last_step.cost.parts, "last step")
    assert (a.last_step.index, a.last_step.end_us) == (b.last_step.index, b.last_step.end_us)
    assert stepped.leaper is None


@pytest.mark.parametrize("case, workload", [
    # full batches all run long: most steps leap, cut at the pool's drift window and the run's end
    ("saturated", {}),
    # requests short enough to finish within the steps a leap looks at: leaps end before them
    ("short_outputs", {"output_len": {"kind": "lognormal", "mean": 30, "sigma": 0.8},
                       "arrivals": {"kind": "poisson", "rate_per_s": 2000}}),
    # arrivals just above completions: the few waiting cover few steps, leaps end where they do
    # (at 70 /s the queue empties on the shipped profile: no step leaps)
    ("thin_queue", {"arrivals": {"kind": "poisson", "rate_per_s": 75}}),
])
def test_leaping_gives_the_bits_of_stepping_one_at_a_time(case, workload):
    runs = run_both(qwen_decode(**workload))
    assert_same_runs(runs)
    leaper = runs[0][0].leaper
    steps = runs[0][1].steps["step_us"].shape[0]
    assert leaper is not None and leaper.num_steps > 0
    if case == "saturated":
        assert leaper.num_steps > 0.7 * steps


@pytest.mark.parametrize("stop_the_world", [True, False])
def test_leaping_with_eplb_gives_the_bits_of_stepping_one_at_a_time(stop_the_world):
    # EPLB's window takes the leapt passes' loads; the pass that rebalances (a stall, or
    # chunks charged to the passes after it) is stepped as usual, and leaping resumes after
    scenario = qwen_decode({"enable_eplb": True, "ep_num_redundant_experts": 16,
                            "eplb_rebalance_num_iterations": 20,
                            "eplb_stop_the_world": stop_the_world,
                            "eplb_rebalance_layers_per_chunk": 24})
    runs = run_both(scenario)
    assert_same_runs(runs)
    (leapt, a), (_, b) = runs
    assert len(a.rebalances) >= 3 and a.rebalances == b.rebalances
    assert a.stalls == b.stalls and a.charged_us == b.charged_us
    assert leapt.leaper.num_steps > 0.5 * a.steps["step_us"].shape[0]
    assert leapt.leaper.num_leaps >= len(a.rebalances)


def test_deepseek_dense_layers_and_eplb_leap_with_the_same_result():
    # DeepSeek-V3's three dense layers: their attention follows each step's contexts
    scenario = load_scenario(ROOT / "scenarios" / "eplb_redundancy_32gpu.yaml")
    assert scenario.model.num_dense_layers > 0 and scenario.deployment.enable_eplb
    runs = run_both(scenario)
    assert_same_runs(runs)
    (leapt, a), (_, b) = runs
    assert a.rebalances == b.rebalances and len(a.rebalances) >= 2
    assert leapt.leaper.num_steps > 0.8 * a.steps["step_us"].shape[0]


def test_two_batch_overlap_and_datasheet_attention_leap_with_the_same_result():
    # deepseek_v3_decode's deployment on H800 (two micro-batches per step, EP 144, attention
    # from the datasheet roofline: the shipped profile is of H200) with a GQA model: MLA's own
    # decode kernel may split the KV (`epsim.cost.mla`), which a leap does not vectorise. Inputs
    # of ~1000 tokens, so that the slots bind and not the KV pool (a leap needs full slots).
    scenario = load_scenario(ROOT / "scenarios" / "deepseek_v3_decode.yaml",
                             {"model": "Qwen3-235B-A22B", "deployment.ep_num_redundant_experts": 16,
                              "deployment.dispatch_dtype": "bf16",
                              "workload.input_len": {"kind": "lognormal", "mean": 1000, "sigma": 0.5,
                                                     "max": 8192}})
    assert scenario.deployment.enable_two_batch_overlap and scenario.cluster.gpu == "H800"
    runs = run_both(scenario)
    assert_same_runs(runs)
    leapt = runs[0][0]
    assert leapt.cost_model.params.attention.kernels is None
    assert leapt.leaper.num_steps > 0.8 * runs[0][1].steps["step_us"].shape[0]


def test_deepseek_v3s_mla_leaps_with_split_kv_and_dense_layers_alike():
    # DeepSeek-V3 itself (MLA, dense layers, two micro-batches): FlashMLA-class decode may split
    # the KV, priced over the leap's steps at once (`epsim.cost.flash.decode_work`): the same
    # result as stepping
    scenario = load_scenario(ROOT / "scenarios" / "deepseek_v3_decode.yaml",
                             {"workload.duration_s": 4.0, "workload.warmup_s": 1.0})
    runs = run_both(scenario)
    assert_same_runs(runs)
    leapt = runs[0][0]
    kernel = leapt.cost_model._decode_kernel
    batch = leapt.scheduler.saturated_batch()
    assert leapt.cost_model.params.attention.mla is not None
    assert kernel.counts(batch.scaled(0.5).decode_tokens).may_split
    assert leapt.cost_model.leaps(batch) and leapt.leaper.num_steps > 0


def test_r1_leaps_over_most_steps_with_the_same_result():
    scenario = load_scenario(ROOT / "scenarios" / "r1_qwen235b_ep64_decode.yaml")
    scenario = scenario.model_copy(update={"workload": scenario.workload.model_copy(
        update={"duration_s": 15.0})})
    runs = run_both(scenario)
    assert_same_runs(runs)
    assert runs[0][0].leaper.num_steps > 0.8 * runs[0][1].steps["step_us"].shape[0]


def test_a_run_with_an_observer_steps_one_at_a_time():
    # (an observer besides EPLB's window: it may read anything of each step)
    seen = []
    sim = Simulation(qwen_decode(), leap=True)
    sim.add_observer(lambda info: seen.append(info.index))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = sim.run()
    assert sim.leaper is None
    assert seen == list(range(result.steps["step_us"].shape[0]))
