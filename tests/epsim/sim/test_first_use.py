"""First-use compiles in a run: each prefill step of a shape key the server has not met waits
for its kernels once; a warm-up that met the run's keys leaves the run untouched."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.first_use import KERNELS_PER_KEY, fused_moe_key
from epsim.errors import SpecError
from epsim.sim import Simulation
from tests.epsim.sim.test_engine import tiny_scenario

COMPILE_S = 0.02


def _run(warmup_batches, clients=3, input_len=None, gpu="H200"):
    lengths = input_len or {"kind": "random", "value": 1024, "range_ratio": 0.8}
    sc = tiny_scenario(
        cluster={"gpu": gpu},
        deployment={"disaggregation_mode": "null", "chunked_prefill_size": 8192,
                    "first_use_compile": {"compile_s": COMPILE_S, "warmup_batches": warmup_batches}},
        workload={"arrivals": {"kind": "concurrency", "clients": clients, "num_requests": 10 * clients},
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
