"""The scaling validation's live side on CPU ranks (gloo): the real bench at EP 4 records exactly
the counts `epsim.validate.scaling` redraws, the prediction grid is the bench's, and
scripts/gpu_scaling.sh runs end to end (bench -> predictions -> --compare)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import live.bench.sweep as bench
from epsim import vocab
from epsim.calibrate import grid
from epsim.validate import scaling as sc
from epsim.records import read_records
from epsim.routing import parse_skew

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from benchmarks import scaling_predict as sp  # noqa: E402  (a script folder, not a package)

SCRIPT = ROOT / "scripts" / "gpu_scaling.sh"


def test_prediction_grid_is_the_bench_grid():
    """One grid (`epsim.calibrate.grid`): what live.bench.sweep measures is what is predicted."""
    assert bench.GPU_TOKENS is grid.GPU_TOKENS and bench.GPU_MODELS is grid.GPU_MODELS
    assert set(map(str, sp.SKEWS)) <= set(map(str, bench.SKEWS))
    assert {name: (c.hidden_size, c.moe_intermediate_size, c.num_experts, c.top_k)
            for name, c in bench.CPU_MODELS.items()} == {
        s.name: (s.hidden_size, s.moe_intermediate_size, s.num_experts, s.top_k)
        for s in sc.cpu_shapes()}
    # the script asks for the hot set by name; live.bench.sweep puts it on rank 0 as predicted
    assert "--skews uniform hotset:16:0.5" in SCRIPT.read_text()
    assert {**parse_skew("hotset:16:0.5"), "shuffle_per_layer": False} == sp.SKEWS[1]
    assert {b for b, _ in sp.CASES} <= set(vocab.backends_with("fp8_dispatch")) | {"torch"}


@pytest.mark.slow
def test_bench_at_ep4_records_the_redrawn_counts(tmp_path):
    """Four gloo ranks run the real block through `live.bench.sweep`; every record's per-rank counts
    equal `bench_counts` for the same seed, tokens and skew."""
    skews = [{"kind": "uniform"}, {"kind": "hotset", "num_hot": 2, "hot_frac": 0.5,
                                   "shuffle_per_layer": False}]
    plan = bench.plan_sweep(backends=["torch"], models=["cpu-h256"], tokens=[3, 40], skews=skews,
                            cpu=True, world_size=4, num_iters=1, seed=5)
    result = bench.run_bench(plan, tmp_path / "r.jsonl", progress=False)
    assert not result.errors, result.errors
    records = read_records(tmp_path / "r.jsonl")
    assert len(records) == 2 * 2 * 4
    shape = next(s for s in sc.cpu_shapes() if s.name == "cpu-h256")
    for r in records:
        assert r.ep_size == 4 and r.seed == 5
        c = sc.bench_counts(r.skew, shape, 4, r.num_tokens_per_rank, "torch", seed=5)
        assert (r.send_tokens_per_rank, r.recv_tokens_per_rank) == (c.send_tokens_per_rank,
                                                                    c.recv_tokens_per_rank)
        assert r.expert_tokens_per_rank == c.expert_tokens_per_rank
        assert r.local_expert_tokens == c.local_expert_tokens


@pytest.mark.slow
def test_gpu_scaling_script_dry_run_on_cpu(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path))
    done = subprocess.run([str(SCRIPT), "--cpu", "--gpus", "2", "--tokens", "1,4"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    names = {p.name for p in tmp_path.iterdir()}
    assert {"bench_ep2.jsonl", "bench_summary.json", "predictions_ep2.jsonl",
            "compare_ep2.md"} <= names
    table = (tmp_path / "compare_ep2.md").read_text()
    assert "| 2 | torch | native | moe_layer | 4 |" in table     # 2 tokens x 2 skews
    assert "counts equal to the predicted ones: 16/16 records" in table
    passes = {r.extra.get("pass") for r in read_records(tmp_path / "bench_ep2.jsonl")}
    assert passes == {0, 1}                                      # merged by --compare


@pytest.mark.parametrize("args, message", [
    (["--gpus", "x"], "--gpus (x) must be an integer >= 2"),
    (["--cpu", "--gpus", "1"], "--gpus (1) must be >= 2"),
    (["--bogus"], "unknown option --bogus"),
])
def test_gpu_scaling_script_rejects_bad_options(tmp_path, args, message):
    done = subprocess.run([str(SCRIPT), *args], cwd=ROOT, env=dict(os.environ, OUT=str(tmp_path)),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and message in done.stderr
