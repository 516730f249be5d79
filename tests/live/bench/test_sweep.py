"""live.bench.sweep on CPU ranks (gloo): the sweep plan, the budget, records with real counts,
and the whole loop `epsim calibrate --live --quick` -> profile -> `epsim validate`, plus the GPU
script's CPU switch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import live.bench.sweep as bench
from epsim.cli import main
from epsim.records import read_records
from live.bench.sweep import BenchPlan, plan_sweep, run_bench
from live.bench.sweep_case import BenchSettings
from live.errors import LiveError

ROOT = Path(__file__).resolve().parents[3]


def test_gpu_plan_orders_cases_and_notes_what_cannot_run():
    plan = plan_sweep(cpu=False)                     # no GPU here: mooncake/deepep noted
    labels = [c.label for c in plan.cases]
    if not any(n.startswith("mooncake") for n in plan.notes):
        pytest.skip("mooncake is available here")
    assert any("mooncake: not measured" in n for n in plan.notes)
    assert labels == ["torch/Qwen3-30B-A3B/bf16", "torch/Qwen3-235B-A22B/bf16",
                      "none/Qwen3-30B-A3B/bf16", "none/Qwen3-235B-A22B/bf16"]
    torch_case, none_case = plan.cases[0], plan.cases[2]
    assert torch_case.token_counts == tuple(2 ** i for i in range(13))
    assert torch_case.config.hidden_size == 2048 and plan.cases[1].config.hidden_size == 4096
    hot = [s for s in torch_case.skews if s["kind"] == "hotset"]
    assert hot == [{"kind": "hotset", "num_hot": 16, "hot_frac": 0.5, "shuffle_per_layer": False}]
    assert none_case.token_counts == (1, 8, 64, 512, 4096)
    assert {s["kind"] for s in none_case.skews} == {"uniform", "hotset"}
    assert plan.settings.device == "cuda" and plan.dist_backend == "nccl"


def test_low_latency_backends_split_large_batches_into_a_later_case():
    real = bench._available
    bench._available = lambda name, cpu: ""            # pretend mooncake imports
    try:
        plan = plan_sweep(backends=["mooncake", "torch"], models=["Qwen3-30B-A3B"], cpu=False)
    finally:
        bench._available = real
    labels = [(c.label, c.token_counts[-1]) for c in plan.cases]
    assert labels == [("mooncake/Qwen3-30B-A3B/bf16", 512), ("mooncake/Qwen3-30B-A3B/fp8", 512),
                      ("torch/Qwen3-30B-A3B/bf16", 4096), ("mooncake/Qwen3-30B-A3B/bf16", 4096),
                      ("mooncake/Qwen3-30B-A3B/fp8", 4096)]


@pytest.mark.parametrize("kwargs, message", [
    ({"backends": ["nccl"]}, r"backend \('nccl'\) must be one of none, torch, deepep, mooncake"),
    ({"tokens": [0, 4]}, r"tokens \(\[0, 4\]\) must be positive counts"),
    ({"dtypes": ["fp16"]}, r"dispatch dtype \('fp16'\) must be one of \['bf16', 'fp8'\]"),
    ({"models": ["tiny"], "cpu": True}, r"models \(\['tiny'\]\) must be among"),
])
def test_bad_plans_name_the_value(kwargs, message):
    with pytest.raises(LiveError, match=message):
        plan_sweep(**kwargs)


@pytest.mark.slow
def test_spent_budget_stops_cleanly(tmp_path):
    plan = plan_sweep(cpu=True, quick=True, tokens=[1, 2])
    result = run_bench(plan, tmp_path / "r.jsonl", budget_s=0.0, progress=False)
    assert result.num_points == 0 and result.skipped == plan.num_points
    assert result.num_records == 0 and (tmp_path / "r.jsonl").read_text() == ""


@pytest.mark.slow
def test_calibrate_live_quick_on_cpu_end_to_end(tmp_path, capsys):
    records, profile = tmp_path / "records.jsonl", tmp_path / "profile.json"
    assert main(["calibrate", "--live", "--quick", "--cpu", "--no-progress",
                 "--records-out", str(records), "--out", str(profile)]) == 0
    out = capsys.readouterr()
    assert "torch/dispatch" in out.out and "live bench: 280 records from 70 points" in out.err
    recs = read_records(records)
    assert {r.kind for r in recs} == {"dispatch", "experts", "combine", "moe_layer"}
    for r in recs:
        assert r.provenance.device == "2x cpu (gloo)" and r.num_iters == 10
        assert r.p10_us <= r.median_us <= r.p90_us and len(r.per_rank_median_us) == 2
        # counts from the dispatch itself: every pair computed once; copies sent are received
        assert sum(r.expert_tokens_per_rank) == 2 * r.num_tokens_per_rank * r.top_k
        assert sum(r.send_tokens_per_rank) == sum(r.recv_tokens_per_rank)
        if r.backend == "none":
            assert r.recv_tokens_per_rank == [float(r.num_tokens_per_rank)] * 2
    hot = [r for r in recs if r.skew["kind"] == "hotset" and r.kind == "experts"
           and r.num_tokens_per_rank == 64]
    # two hot experts (half the traffic) on rank 0: rank 0 computes more pairs
    assert hot and all(r.expert_tokens_per_rank[0] > 1.5 * r.expert_tokens_per_rank[1] for r in hot)
    data = json.loads(profile.read_text())
    assert data["hardware"] == "cpu"
    # no grouped GEMM timed alone and no device-only timing on the CPU: the backends' eager
    # experts stages fit the kernel model, pooled (`any/experts`, host overhead inside)
    for key in ("torch/dispatch", "torch/combine", "any/experts", "torch/moe_layer",
                "none/allgather", "none/allreduce"):
        assert data["components"][key]["source"] == "fit", key
    assert not any(k.endswith("/experts") and not k.startswith("any/") for k in data["components"])
    assert data["provenance"]["records"][0]["num_records"] == 280
    val = tmp_path / "val"
    assert main(["validate", "--profile", str(profile), "--records", str(records), "--out",
                 str(val), "--no-plots"]) == 0
    table = (val / "validation.md").read_text()
    assert "| torch | moe_layer |" in table and "| none | combine |" in table


@pytest.mark.slow
def test_gpu_calibrate_script_cpu_switch(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    # the CPU switch with two token counts (the full quick grid runs in the test above)
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_calibrate.sh"), "--cpu", "--",
                           "--tokens", "1,4"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert {"bench.jsonl", "bench.log", "bench_summary.json"} <= set(files)
    assert len(files) <= 8 and all(f.count("/") <= 1 for f in files)      # what $OUT may return
    summary = json.loads((out / "bench_summary.json").read_text())
    # 20 points: torch 2 shapes x 2 tokens x 3 skews, none the same without Zipf
    assert summary["num_records"] == len(read_records(out / "bench.jsonl")) == 80
    assert summary["errors"] == [] and summary["skipped"] == 0


def test_settings_of_the_cpu_plan():
    plan = plan_sweep(cpu=True)
    assert isinstance(plan, BenchPlan) and plan.dist_backend == "gloo" and plan.world_size == 2
    assert plan.settings == BenchSettings(device="cpu", dtype="float32", num_iters=20,
                                          num_warmup=2, seed=0, device_only=False)
    assert [c.label for c in plan.cases] == ["torch/cpu-h256/bf16", "torch/cpu-h512/bf16",
                                             "none/cpu-h256/bf16", "none/cpu-h512/bf16"]
    assert np.all(np.diff(plan.cases[0].token_counts) > 0)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch", "mooncake"])
def test_bench_on_two_gpus(backend, tmp_path):
    """A few points on 2 GPUs (skipped without them): records with device time of the GEMM,
    and for Mooncake two buffer layouts (8 and 64 tokens) in one run, FP8 included."""
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 CUDA GPUs; {torch.cuda.device_count()} visible")
    if backend == "mooncake":
        pytest.importorskip("mooncake.mooncake_ep_buffer", reason="Mooncake EP is not installed")
    plan = plan_sweep(backends=[backend], models=["Qwen3-30B-A3B"], tokens=[4, 64],
                      skews=[{"kind": "uniform"}], num_iters=5)
    result = run_bench(plan, tmp_path / "r.jsonl", progress=False)
    assert result.errors == [] and result.num_points == plan.num_points
    recs = read_records(tmp_path / "r.jsonl")
    experts = [r for r in recs if r.kind == "experts"]
    assert all(r.extra["timer"] == "cuda_events" and r.extra.get("device_us", 0) > 0
               for r in experts)
    assert {r.dispatch_dtype for r in recs} == ({"bf16", "fp8"} if backend == "mooncake" else {"bf16"})
