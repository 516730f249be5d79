"""First-use compiles in a run: each prefill step of a shape key the server has not met waits
for its kernels once; a warm-up that met the run's keys leaves the run untouched. The FMHA module
variant builds once, on the first step attending to a prefix."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.first_use import KERNELS_PER_KEY, fused_moe_key
from epsim.errors import SpecError
from epsim.sim import Simulation
from epsim.sim.first_use import splits_a_prompt
from tests.epsim.sim.test_engine import tiny_scenario

COMPILE_S = 0.02


def _run(warmup_batches, clients=3, input_len=None, gpu="H200", num_requests=None, **compile_fields):
    """A closed loop of `clients` on one aggregated server whose deployment carries a
    `first_use_compile` of `warmup_batches` (and `compile_fields`), its results."""
    lengths = input_len or {"kind": "random", "value": 1024, "range_ratio": 0.8}
    deployment = {"disaggregation_mode": "null", "chunked_prefill_size": 8192,
                  "first_use_compile": {"compile_s": COMPILE_S,
                                        "warmup_batches": list(warmup_batches), **compile_fields}}
    if compile_fields:          # the FMHA variant: one scheduler, so one chunk a step
        deployment.update(enable_dp_attention=False, dp_size=1)
    sc = tiny_scenario(
        cluster={"gpu": gpu},
        deployment=deployment,
        workload={"arrivals": {"kind": "concurrency", "clients": clients,
                               "num_requests": num_requests or 10 * clients},
                  "input_len": lengths, "output_len": {"kind": "fixed", "value": 16},
                  "duration_s": 3.0, "warmup_s": 0.0})
    sim = Simulation(sc)
    return sim, sim.run()


def test_each_new_key_stalls_its_first_prefill_step_once():
    sim, result = _run([])
    fu = sim.first_use
    steps = result.steps
    prefill = np.flatnonzero(steps["prefill_tokens"] > 0)
    keys = [fused_moe_key(int(round(steps["prefill_tokens"][i])), fu.num_experts, fu.top_k,
                          fu.tiles) for i in prefill]
    first_of_key = {k: i for i, k in reversed(list(zip(prefill, keys)))}
    compile_us = COMPILE_S * 1e6 * KERNELS_PER_KEY
    assert fu.num_compiles == KERNELS_PER_KEY * len(first_of_key) > 0
    assert fu.stalled_us == pytest.approx(compile_us * len(first_of_key))
    for i in prefill:        # the first step of each key waits for the compile, no other step does
        waited = steps["extra_us"][i] >= compile_us - 1e-6
        assert waited == (i in first_of_key.values())


def test_a_warm_up_that_met_the_runs_shape_adds_nothing():
    # one client, one fixed prompt length: every prefill is one prompt, the warm-up's shape
    fixed = {"kind": "fixed", "value": 900}
    sim, result = _run([1], clients=1, input_len=fixed)
    assert sim.first_use.num_compiles == 0
    assert result.steps["extra_us"].sum() == 0
    cold, _ = _run([], clients=1, input_len=fixed)
    assert cold.first_use.num_compiles == KERNELS_PER_KEY


def test_a_gpu_without_a_tuned_table_is_refused():
    with pytest.raises(SpecError, match=r"first_use_compile .* no tuned table for cluster.gpu"):
        _run([], gpu="B200")


def _fmha_run(clients, warmup_batches=(), input_len=None):
    return _run(warmup_batches, clients, input_len, gpu="B200", num_requests=4 * clients,
                kernel="flashinfer_cutlass_fmha")


def test_the_fmha_module_builds_once_on_the_first_step_with_a_prefix():
    # 12 prompts of 820-1024 tokens arrive at once: the first step's 8192-token chunk ends inside
    # one, which the second prefill step finishes, attending to its prefix
    sim, result = _fmha_run(12)
    steps = result.steps
    prefill = np.flatnonzero(steps["prefill_tokens"] > 0)
    assert steps["prefill_tokens"][prefill[0]] == 8192
    stalled = np.flatnonzero(steps["extra_us"] >= COMPILE_S * 1e6 - 1e-6)
    assert list(stalled) == [prefill[1]] and sim.first_use.num_compiles == 1
    assert sim.first_use.stalled_us == pytest.approx(COMPILE_S * 1e6)


def test_prompts_that_fit_a_chunk_never_build_it():
    sim, result = _fmha_run(3)
    assert result.steps["prefill_tokens"].max() < 8192
    assert sim.first_use.num_compiles == 0 and result.steps["extra_us"].sum() == 0


def test_a_warm_up_batch_straddling_a_chunk_built_it_before_the_run():
    fixed = {"kind": "fixed", "value": 1000}
    sim, result = _fmha_run(12, warmup_batches=[12, 12], input_len=fixed)
    assert sim.first_use.num_compiles == 0 and result.steps["extra_us"].sum() == 0


@pytest.mark.parametrize("copies, prompt, chunk, splits", [
    (12, 1000, 8192, True),       # 12000 tokens: the chunk ends 192 tokens into the 9th prompt
    (16, 1024, 8192, False),      # 16384: both chunks end on a prompt's end
    (8, 1024, 8192, False),       # one chunk
    (1, 9000, 8192, True),        # one prompt longer than a chunk
])
def test_a_batch_splits_a_prompt_where_a_chunk_ends_inside_one(copies, prompt, chunk, splits):
    assert splits_a_prompt(copies, prompt, chunk) is splits


def test_the_fmha_build_and_the_paged_allocators_compiles_add_up_on_one_server():
    # the same 12 prompts: the allocator's first extend and decode keys are new (a cold server),
    # the module builds on the second prefill step, and each step waits for what it meets
    alloc_s = 0.003
    sim, result = _run([], 12, None, gpu="B200", num_requests=48,
                       kernel="flashinfer_cutlass_fmha", alloc_compile_s=alloc_s,
                       decode_compile_s=alloc_s / 2, page_size=64)
    fu = sim.first_use
    assert fu.build.num_compiles == 1 and fu.alloc.num_compiles > 1
    assert fu.num_compiles == fu.build.num_compiles + fu.alloc.num_compiles
    extend = sum(key[0] == "extend" for key in fu.alloc.compiled)
    decode = sum(key[0] == "decode" for key in fu.alloc.compiled)
    assert fu.alloc.stalled_us == pytest.approx((extend * alloc_s + decode * alloc_s / 2) * 1e6)
    assert fu.stalled_us == pytest.approx(COMPILE_S * 1e6 + fu.alloc.stalled_us)
    assert result.steps["extra_us"].sum() >= fu.stalled_us - 1e-3
    only_build, _ = _fmha_run(12)
    assert only_build.first_use.stalled_us == pytest.approx(fu.build.stalled_us)


def test_prompts_that_fit_a_chunk_still_meet_the_allocators_new_keys():
    sim, result = _run([], 3, None, gpu="B200", num_requests=12,
                       kernel="flashinfer_cutlass_fmha", alloc_compile_s=0.003, page_size=64)
    assert sim.first_use.build.num_compiles == 0
    assert sim.first_use.alloc.num_compiles > 0
    assert result.steps["extra_us"].sum() >= sim.first_use.alloc.stalled_us - 1e-3 > 0
