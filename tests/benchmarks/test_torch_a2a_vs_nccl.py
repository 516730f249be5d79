"""benchmarks/torch_a2a_vs_nccl.py without a GPU: the plan (grid, memory bounds, low-latency
cap), argument errors, the dry run, and a gloo run where the CUDA-only paths are listed as
skipped with their reasons and a zero budget skips every point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import torch_a2a_vs_nccl as bench  # noqa: E402  (a script folder, not a package)

H200_BYTES = 141 * 10**9


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "benchmarks/torch_a2a_vs_nccl.py", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def test_plan_covers_the_grid_in_order_and_skips_what_does_not_fit():
    items = bench.plan([4096, 7168], [1, 1024, 16384], list(bench.PATHS), 2, 128, H200_BYTES)
    assert len(items) == 2 * 3 * len(bench.PATHS)
    assert [(i["hidden"], i["tokens_per_rank"]) for i in items[::len(bench.PATHS)]] == [
        (7168, 1), (7168, 1024), (7168, 16384), (4096, 1), (4096, 1024), (4096, 16384)]   # largest first
    skip = {(i["hidden"], i["tokens_per_rank"], i["path"]): i["skip"] for i in items}
    # the torch layouts fit up to 16384 tokens at hidden 7168 (8 x 470 MB)
    assert all(skip[(7168, 16384, p)] == "" for p in ("normal", "static", "deepep"))
    assert skip[(7168, 16384, "deepep_ll")].startswith("tokens (16384) above --ll-max-tokens")
    assert skip[(7168, 1024, "mooncake")] == ""
    # with the cap lifted, the low-latency buffers (4 x experts x tokens x H x 2 bytes) do not fit
    lifted = bench.plan([7168], [16384], ["deepep_ll"], 2, 128, H200_BYTES, ll_max_tokens=16384)
    assert lifted[0]["skip"] == "memory: needs up to 113.8 GiB of 105.1 GiB usable"
    assert bench.plan([7168], [16384], ["deepep_ll"], 2, 128, None, 16384)[0]["skip"] == ""


def test_rows_sent_per_path_follow_the_copies_each_sends():
    import numpy as np
    ids = np.array([[0, 1, 5], [4, 6, -1]])             # 4 local experts per rank, 2 ranks
    assert bench._send_rows(ids, 4, 2, "rank", 2) == [1, 2]
    assert bench._send_rows(ids, 4, 2, "pair", 2) == [2, 3]
    assert bench._send_rows(ids, 4, 2, "padded", 2) == [2, 2]


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus (0) must be an integer >= 1"),
    (["--tokens", "4", "x"], "--tokens (x) must be an integer >= 1"),
    (["--experts", "7"], "--experts (7) must be divisible by --gpus (2)"),
    (["--paths", "nccl"], "invalid choice: 'nccl'"),
    (["--budget-s", "-1"], "--budget-s (-1.0) must be >= 0"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    proc = _run(*args, "--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1]


def test_dry_run_writes_the_plan_and_runs_nothing(tmp_path):
    proc = _run("--dry-run", "--hidden", "4096", "7168", "--tokens", "1", "16384", "--out",
                str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    items = [json.loads(line) for line in (tmp_path / "plan.jsonl").read_text().splitlines()]
    assert len(items) == 2 * 2 * len(bench.PATHS)
    assert f"{len(items)} path points, {sum(not i['skip'] for i in items)} to run" in proc.stdout
    assert not (tmp_path / "results.jsonl").exists()


@pytest.mark.slow
def test_gloo_run_times_the_torch_paths_and_lists_the_others_as_skipped(tmp_path):
    proc = _run("--cpu", "--gpus", "2", "--tokens", "1", "5", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(r["tokens_per_rank"], r["path"]) for r in rows] == [
        (t, p) for t in (1, 5) for p in bench.PATHS]
    for r in rows:
        if r["path"] in ("normal", "static"):
            assert r["path_us"] > 0 and r["raw_us"] > 0 and "graph_us" not in r   # no CUDA
            if r["path"] == "static":                  # capacity rows to every rank
                assert r["rows_sent"] == 2 * r["tokens_per_rank"]
            else:                                      # one row per (token, destination)
                assert 1 <= r["rows_sent"] <= 2 * r["tokens_per_rank"]
        else:                                          # DeepEP and Mooncake need CUDA, bf16
            assert "must" in r["skip"] and "path_us" not in r
    table = (tmp_path / "table.md").read_text()
    assert "| hidden | tokens/rank | path |" in table
    assert "- deepep at hidden 64, tokens/rank 1, 5: dtype (torch.float32) must be" in table
    # a zero budget: every point is listed, none is run
    proc = _run("--cpu", "--gpus", "2", "--tokens", "1", "--paths", "static", "--budget-s", "0",
                "--out", str(tmp_path / "zero"))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "zero" / "results.jsonl").read_text().splitlines()]
    assert rows == [dict(rows[0], skip="budget: started after --budget-s")] and "path_us" not in rows[0]


def test_two_gpu_script_dry_run_lists_its_parts_inside_the_call(tmp_path):
    """scripts/gpu_two_h200.sh --dry-run (no GPU): every part within the time it is given,
    the a2a grid with hidden 7168 and 16384 tokens; bad options exit 2 with one line."""
    env = dict(os.environ, OUT=str(tmp_path / "out"), WORK=str(tmp_path / "work"))
    proc = subprocess.run(["bash", "scripts/gpu_two_h200.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "out" / "parts.log").read_text().splitlines()
    assert [line.split(":")[0] for line in log[:4]] == ["a2a", "bench", "deepep_smoke", "rebalance"]
    assert "--graph-only --backends mooncake" in log[1]
    plan = [json.loads(line) for line in (tmp_path / "out" / "a2a" / "plan.jsonl").read_text().splitlines()]
    assert {(i["hidden"], i["tokens_per_rank"]) for i in plan if not i["skip"]} >= {(7168, 16384), (4096, 1)}
    assert {i["path"] for i in plan} == set(bench.PATHS)
    short = subprocess.run(["bash", "scripts/gpu_two_h200.sh", "--dry-run", "--total-s", "100"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert short.returncode == 0 and "bench: skipped" in short.stdout     # 90 s left < 120
    for bad, message in ((["--fast"], "unknown option --fast"),
                         (["--total-s", "ten"], "--total-s (ten) must be a whole number")):
        proc = subprocess.run(["bash", "scripts/gpu_two_h200.sh", *bad], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.slow
def test_bytes_table_regenerates_and_the_static_layout_moves_nothing_outside_collectives(tmp_path):
    """benchmarks/results/a2a_bytes/table.md is what benchmarks/a2a_bytes.py counts now (op by
    op on gloo ranks: deterministic), and in it the static layout reads and writes under a
    fifth of one `[ranks * tokens, H]` pass outside its collectives, the exact layout ~10."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-W", "ignore", "benchmarks/a2a_bytes.py", "--tokens",
                           "1", "64", "256", "4096", "--out", str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    committed = ROOT / "benchmarks" / "results" / "a2a_bytes" / "table.md"
    assert (tmp_path / "table.md").read_text() == committed.read_text()
    rows = [line.split(" | ") for line in committed.read_text().splitlines() if line.startswith("| ") and
            line[2].isdigit()]
    passes = {(int(r[0][2:]), r[1]): float(r[4]) for r in rows}
    assert all(v < 0.2 for (t, mode), v in passes.items() if mode == "static")
    assert all(9 < v < 11 for (t, mode), v in passes.items() if mode == "normal")
