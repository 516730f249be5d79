"""The single-GPU component bench: its grid, its records (run for real on the CPU), and
`epsim calibrate --live` choosing it when one GPU is visible (device count faked) -- never a
silent fall back to CPU ranks."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import live.bench.components
import live.bench.sweep
from epsim.cli import main
from epsim.commands.calibrate import choose_live_bench
from epsim.errors import EpsimError
from epsim.records import read_records
from live.bench.component_ops import Point, expert_rows
from live.bench.components import EXPERT_MODELS, plan_components, run_components
from live.bench.op_timing import time_op
from live.errors import LiveError


def test_cpu_run_writes_every_component_as_valid_records(tmp_path):
    plan = plan_components("cpu", num_passes=2)
    result = run_components(plan, tmp_path / "c.jsonl", progress=False)
    records = read_records(tmp_path / "c.jsonl")
    assert result.num_records == len(records) == 2 * len(plan.points) == result.num_points
    assert {r.kind for r in records} == {"experts", "attention_prefill", "attention_decode",
                                         "dense_mlp", "block_ops"}
    assert {r.extra["pass"] for r in records} == {0, 1}
    for r in records:
        # on the CPU host and device are one: the only honest timing is the eager call's clock
        assert r.timing == "eager" and r.extra["method"] == "perf_counter"
        assert r.backend == "local" and r.provenance.device == "1x cpu"
        assert 0 < r.p10_us <= r.median_us <= r.p90_us and r.num_iters == plan.num_iters
    experts = [r for r in records if r.kind == "experts"]
    for r in experts:
        assert r.ep_size * r.num_local_experts == r.num_experts
        assert r.extra["rows"] == sum(r.local_expert_tokens[0]) == r.expert_tokens_per_rank[0]
    # the emulated group routes ep_size x tokens x top_k copies in all
    for r in experts:
        assert sum(r.expert_tokens_per_rank) == pytest.approx(
            r.ep_size * r.num_tokens_per_rank * r.top_k, abs=r.num_experts)
    decode = [r for r in records if r.kind == "attention_decode"]
    assert all(r.num_tokens_per_rank == r.num_seqs and r.extra["kernel"].startswith("sdpa/")
               for r in decode)


def test_hot_set_lands_on_the_measured_rank():
    shape = plan_components("cpu").points[0].shape             # 16 experts, top-2
    uniform = Point("experts", shape, 256, 4, (("kind", "uniform"),))
    hot = Point("experts", shape, 256, 4, tuple(sorted(
        {"kind": "hotset", "num_hot": 2, "hot_frac": 0.5, "shuffle_per_layer": False}.items())))
    rows_u, rows_h = expert_rows(uniform, 0), expert_rows(hot, 0)    # [ranks, local]
    assert rows_u.shape == rows_h.shape == (4, 4)
    assert rows_h[0].sum() > 1.5 * rows_u[0].sum()
    assert rows_h.sum(axis=1).argmax() == 0                     # the busiest rank is measured


def test_time_op_on_cpu_has_no_device_time():
    x = torch.randn(64, 64)
    times = time_op(lambda: x @ x, torch.device("cpu"), num_iters=4, num_warmup=1)
    assert times.device_us == [] and times.host_us == [] and len(times.eager_us) == 4
    assert set(times.summaries()) == {"eager"}


def test_gpu_grid_covers_the_issue():
    plan = plan_components("cuda")
    experts = [p for p in plan.points if p.kind == "experts"]
    assert {p.shape.name for p in experts} == {"Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3"}
    assert {p.num_local for p in experts} == {8, 16, 32, 64, 128}
    assert {p.tokens for p in experts} == {2 ** i for i in range(15)}      # 1 .. 16384
    assert {dict(p.skew)["kind"] for p in experts} == {"uniform", "zipf", "hotset"}
    attention = [p for p in plan.points if p.kind.startswith("attention")]
    assert {p.shape.num_kv_heads for p in attention} == {4}                # GQA shapes
    assert max(p.context_len for p in attention if p.kind == "attention_prefill") == 16384
    assert {p.shape.name for p in plan.points if p.kind == "dense_mlp"} >= {
        "DeepSeek-V3/dense", "DeepSeek-V3/shared_expert"}
    block = [p for p in plan.points if p.kind == "block_ops"]
    assert {p.shape.name for p in block} == set(EXPERT_MODELS)
    assert {p.tokens for p in block} == {2 ** i for i in range(15)}
    assert plan.dtype == "bfloat16" and plan.num_passes == 2
    assert any("needs two or more GPUs" in n for n in plan.notes)


def test_holdout_grid_reaches_what_the_calibration_grid_does_not():
    """`--grid holdout`: attention only, a GQA shape the calibration grid has not (8 KV heads),
    and decode batches above its 256 sequences for every attention shape."""
    calibration = plan_components("cuda").points
    holdout = plan_components("cuda", grid="holdout").points
    assert {p.kind for p in holdout} == {"attention_prefill", "attention_decode"}
    assert {p.shape.name for p in holdout if p.shape.num_kv_heads == 8} == {"Qwen3-Coder-480B-A35B"}
    seen = {(p.kind, p.shape.name, p.num_seqs, p.context_len) for p in calibration}
    assert not seen & {(p.kind, p.shape.name, p.num_seqs, p.context_len) for p in holdout}
    big = {(p.shape.name, p.num_seqs) for p in holdout if p.num_seqs >= 1024}
    assert {name for name, _ in big} == {"Qwen3-30B-A3B", "Qwen3-235B-A22B", "Qwen3-Coder-480B-A35B"}
    assert all(p.num_seqs * p.context_len <= live.bench.components.MAX_KV_TOKENS for p in holdout)


def test_bad_grid_on_the_command_line_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        live.bench.components.main(["--cpu", "--grid", "all"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and "argument --grid: invalid choice: 'all'" in err[-1]


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": ["router"]}, r"kind \('router'\) must be one of experts"),
    ({"grid": "all"}, r"grid \('all'\) must be 'calibration' or 'holdout'"),
    ({"num_iters": 0}, r"iters \(0\) must be >= 1"),
    ({"device": "tpu"}, r"device \('tpu'\) must be 'cuda' or 'cpu'"),
])
def test_bad_component_plans_name_the_value(kwargs, message):
    with pytest.raises(LiveError, match=message):
        plan_components(**kwargs)


@pytest.mark.parametrize("visible, gpus, cpu, expected", [
    (0, None, False, "cpu"), (1, None, False, "components"), (1, 1, False, "components"),
    (2, None, False, "ep"), (2, 1, False, "components"), (8, 4, False, "ep"),
    (1, None, True, "cpu"), (2, 2, True, "cpu"),
])
def test_choose_live_bench(visible, gpus, cpu, expected):
    assert choose_live_bench(visible, gpus, cpu) == expected


@pytest.mark.parametrize("visible, gpus", [(1, 2), (0, 2), (2, 0), (4, 8)])
def test_no_silent_cpu_fallback(visible, gpus):
    with pytest.raises(EpsimError, match=rf"--gpus \({gpus}\) must be"):
        choose_live_bench(visible, gpus, False)


@pytest.fixture
def one_gpu(monkeypatch):
    """A machine that shows one GPU: torch's device count faked; the EP bench must not run."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)

    def no_ep_bench(*args, **kwargs):
        raise AssertionError("the EP bench (CPU ranks) ran on a machine with a GPU")
    monkeypatch.setattr(live.bench.sweep, "run_bench", no_ep_bench)


def test_calibrate_live_on_one_gpu_times_gpu_components(one_gpu, monkeypatch, tmp_path, capsys):
    seen = {}

    def gpu_run(plan, records_path, budget_s=float("inf"), progress=True):
        seen["plan"] = plan          # no GPU here to time on: what matters is what was chosen
        return live.bench.components.ComponentResult(records_path)
    monkeypatch.setattr(live.bench.components, "run_components", gpu_run)
    records = tmp_path / "r.jsonl"
    code = main(["calibrate", "--live", "--no-progress", "--records-out", str(records),
                 "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    plan = seen["plan"]
    assert plan.device == "cuda" and plan.dtype == "bfloat16"
    assert {p.kind for p in plan.points} == {"experts", "attention_prefill", "attention_decode",
                                             "dense_mlp", "block_ops"}
    lines = err.splitlines()
    assert sum("needs two or more GPUs" in line for line in lines) == 1
    assert "on 1 GPU" in err and "CPU ranks" not in err
    # nothing was measured (the fake timed nothing): an error, not a CPU profile
    assert code == 2 and "measured nothing" in lines[-1]
    assert not (tmp_path / "p.json").exists()


def test_calibrate_live_refuses_more_gpus_than_visible(one_gpu, tmp_path, capsys):
    code = main(["calibrate", "--live", "--gpus", "2", "--records-out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--gpus (2) must be <= the 1 GPU(s) visible; pass --cpu" in err[0]
    assert not (tmp_path / "r.jsonl").exists()


def test_live_bench_refuses_cpu_ranks_when_a_gpu_is_visible(one_gpu, tmp_path):
    assert live.bench.sweep.main(["--out", str(tmp_path), "--quick", "--no-progress"]) == 2
    assert not (tmp_path / "bench.jsonl").exists()


def test_component_bench_cli_on_cpu(tmp_path):
    assert live.bench.components.main(["--cpu", "--out", str(tmp_path), "--kinds", "dense_mlp",
                                      "--iters", "2", "--no-progress"]) == 0
    summary = json.loads((tmp_path / "components_summary.json").read_text())
    assert summary["num_records"] == 3 and summary["provenance"]["device"] == "1x cpu"
    assert np.all([r.kind == "dense_mlp" for r in read_records(tmp_path / "components.jsonl")])


def test_rounded_sampled_counts_pass_the_plausibility_check():
    from epsim.calibrate.inputs import plausibility_problem
    from epsim.records import MeasurementRecord

    shape = plan_components("cpu").points[0].shape
    point = Point("experts", shape, 1 << 14, 4, (("kind", "uniform"),))   # normal approximation
    rows = expert_rows(point, 0)
    base = dict(kind="experts", timing="device", backend="local", ep_size=rows.shape[0],
                num_tokens_per_rank=point.tokens, hidden_size=shape.hidden_size,
                num_experts=shape.num_experts, top_k=shape.top_k, median_us=10.0,
                provenance={"device": "test"})
    total = rows.shape[0] * point.tokens * shape.top_k
    assert abs(int(rows.sum()) - total) <= shape.num_experts / 2
    record = MeasurementRecord(**base, local_expert_tokens=rows.astype(float).tolist(),
                               expert_tokens_per_rank=rows.sum(axis=1).astype(float).tolist())
    assert plausibility_problem(record) == ""
    scaled = record.model_copy(update={"expert_tokens_per_rank": [v * 2 for v in
                                                                  record.expert_tokens_per_rank]})
    assert "must be <= ep_size x tokens x top_k" in plausibility_problem(scaled)


def test_spent_budget_keeps_what_was_measured(tmp_path):
    plan = plan_components("cpu", kinds=["dense_mlp"], num_iters=2)
    result = run_components(plan, tmp_path / "c.jsonl", budget_s=-1.0, progress=False)
    assert result.num_points == result.num_records == 0
    assert result.skipped == [f"{len(plan.points)} points not started, time budget spent"]
    assert (tmp_path / "c.jsonl").read_text() == ""


def test_block_ops_times_the_live_blocks_own_work_and_its_parts(tmp_path):
    plan = plan_components("cpu", kinds=["block_ops"], num_iters=2)
    run_components(plan, tmp_path / "b.jsonl", progress=False)
    records = read_records(tmp_path / "b.jsonl")
    assert sorted(r.num_tokens_per_rank for r in records) == sorted(p.tokens for p in plan.points)
    for r in records:
        assert r.kind == "block_ops" and r.ep_size == 1 and r.backend == "local"
        assert r.extra["pairs"] == r.num_tokens_per_rank * r.top_k
        assert set(r.extra["parts"]) == {"router", "permute", "combine_weighting"}
        assert all(p["median_us"] > 0 for p in r.extra["parts"].values())


def test_block_ops_op_is_the_block_forward_without_experts():
    """The timed op is the live block itself: with identity experts its output is the input
    weighted by the renormalized routing weights, i.e. x (they sum to one per token)."""
    from live.bench.component_ops import WeightCache, build_op
    shape = plan_components("cpu").points[0].shape
    cache = WeightCache(torch.device("cpu"), torch.float32, 0)
    op, fields = build_op(Point("block_ops", shape, 32), cache, 0, 0)
    out = op()
    block = cache.block(("block_ops", shape), shape)
    x = torch.randn(32, shape.hidden_size, generator=torch.Generator().manual_seed(32))
    assert torch.allclose(block(x, expert_fn=lambda rows, counts: rows), x, atol=1e-5)
    assert out.shape == (32, shape.hidden_size)
    rows, (pair_row, pair_k, counts) = fields["parts"]["permute"]()
    assert rows.shape == (32 * shape.top_k, shape.hidden_size) and int(counts.sum()) == 32 * shape.top_k
    assert fields["parts"]["combine_weighting"]().shape == (32, shape.hidden_size)
