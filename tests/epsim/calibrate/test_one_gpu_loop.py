"""The loop a user with one GPU runs (issue 40): calibrate on one GPU's op-level records, then
simulate a one-GPU instance (`ep_size: 1`), and the simulated layer is the whole layer the GPU
measured (the layer bench's `decoder_layer` records, never fitted)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from epsim.calibrate import default_record_paths
from epsim.cli import main
from epsim.records import read_records
from epsim.validate.composition import default_composition_paths

SCENARIO = """name: one_gpu
description: Qwen3-30B-A3B decode on one H200 holding every expert
model: Qwen3-30B-A3B
cluster: {{gpu: H200, num_nodes: 1}}
deployment:
  ep_size: 1
  moe_a2a_backend: {backend}
  block_kernels: transformers     # the measured layer is transformers' eager block
  disaggregation_mode: decode
  max_running_requests: {batch}
workload:
  arrivals: {{kind: poisson, rate_per_s: 1}}
  input_len: {{kind: fixed, value: {prompt}}}
  output_len: {{kind: fixed, value: 128}}
  skew: {{kind: uniform}}
  initial_running_per_rank: {batch}
  duration_s: 0.5
  warmup_s: 0.0
seed: 0
"""
# (requests, context): the two points; prompts of context - 64 so that the running
# requests' contexts (prompt + tokens so far, spread over 128 outputs) average the context
POINTS = ((64, 512), (8, 8192))


@pytest.mark.slow
def test_calibrate_on_one_gpu_then_simulate_one_gpu_predicts_the_measured_layer(tmp_path, capsys):
    single = [p for p in default_record_paths() if "h200_single" in p.parts]
    assert any(p.name.startswith("layer_parts") for p in single)    # the layer run's parts
    profile = tmp_path / "one_gpu.json"
    assert main(["calibrate", "--records", *map(str, single), "--out", str(profile)]) == 0
    capsys.readouterr()
    fitted = json.loads(profile.read_text())["components"]
    assert {"any/experts/graph", "any/attention_decode/graph", "any/attention_ops/graph",
            "any/block_ops/graph"} <= set(fitted)
    wholes = [p for p in default_composition_paths() if "h200_layer" in p.parts]
    measured = {(r.num_seqs, r.context_len): r.median_us for p in wholes for r in read_records(p)
                if r.kind == "decoder_layer" and r.timing == "device" and r.ep_size == 1
                and r.model == "Qwen3-30B-A3B"}
    for backend in ("none", "mooncake"):        # no backend runs at EP 1: the same layer
        for batch, context in POINTS:
            scenario = tmp_path / f"{backend}_{batch}.yaml"
            scenario.write_text(SCENARIO.format(backend=backend, batch=batch,
                                                prompt=context - 64))
            out = tmp_path / f"run_{backend}_{batch}"
            assert main(["simulate", str(scenario), "--out", str(out), "--no-plots",
                         "--no-progress", "--set", f"profile={profile}"]) == 0
            summary = json.loads((out / "summary.json").read_text())
            layer = float(np.mean(summary["layer_us"]))
            assert summary["dispatch_us"] == summary["combine_us"] == [0.0] * 48
            assert layer == pytest.approx(measured[(batch, context)], rel=0.10), (backend, batch)
    capsys.readouterr()


def test_the_loop_reads_no_whole_layer():
    """The one-GPU records the loop calibrates on hold none of the wholes it is judged on."""
    single = [p for p in default_record_paths() if "h200_single" in p.parts]
    assert single and not any(Path(p).parent.name == "h200_layer" for p in single)
    assert all(r.kind not in ("decoder_layer", "layer_stack")
               for p in single if p.name.startswith("layer_parts") for r in read_records(p))
