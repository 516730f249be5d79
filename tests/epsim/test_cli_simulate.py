"""`epsim simulate` and `epsim cost` end to end: outputs, determinism, every shipped scenario,
and bad input as one line with exit code 2."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from epsim.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
# short requests so that some finish within the short run (the default is a decode instance)
SHORT = ["--set", "workload.duration_s=1.5", "--set", "workload.warmup_s=0.3",
         "--set", "workload.output_len={kind: fixed, value: 16}", "--no-progress"]


def _epsim(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epsim.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_simulate_writes_summary_timeseries_and_figures(tmp_path):
    out = tmp_path / "run"
    proc = _epsim("simulate", "scenarios/default.yaml", "--out", str(out), "--timeline", *SHORT)
    assert proc.returncode == 0, proc.stderr
    assert "throughput" in proc.stdout and "tpot" in proc.stdout
    names = {p.name for p in out.iterdir()}
    assert {"summary.json", "timeseries.csv", "latency_cdf.png", "time_breakdown.png",
            "rank_load.png", "timeline.json"} <= names
    summary = json.loads((out / "summary.json").read_text())
    for key in ("throughput_tokens_per_s_per_gpu", "sim_seconds", "wall_seconds",
                "imbalance_max_over_mean"):
        assert isinstance(summary[key], float)
    for key in ("ttft_ms", "tpot_ms"):
        assert set(summary[key]) >= {"p50", "p90", "p99"} and summary[key]["p50"] > 0
    for key in ("dispatch_us", "experts_us", "combine_us"):
        assert len(summary[key]) == 48 and min(summary[key]) > 0      # Qwen3-30B-A3B MoE layers
    assert summary["scenario"]["model"]["name"] == "Qwen3-30B-A3B"
    assert set(summary["profile"]) >= {"name", "path", "records_sha256"}
    rows = list(csv.DictReader((out / "timeseries.csv").open()))
    assert len(rows) == summary["num_steps"] and float(rows[-1]["t_s"]) < 1.5
    trace = json.loads((out / "timeline.json").read_text())
    assert sum(e.get("name") == "dispatch" for e in trace["traceEvents"]) == 48


def test_same_seed_same_summary_except_wall_seconds(tmp_path, capsys):
    summaries = []
    for run, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        assert main(["simulate", str(ROOT / "scenarios/default.yaml"), "--out", str(tmp_path / run),
                     "--no-plots", "--seed", seed, *SHORT]) == 0
        summary = json.loads((tmp_path / run / "summary.json").read_text())
        summary.pop("wall_seconds")
        summaries.append(summary)
    capsys.readouterr()
    assert summaries[0] == summaries[1]
    assert summaries[0]["seed"] == 3 and summaries[2]["seed"] == 4
    assert summaries[0]["ttft_ms"] != summaries[2]["ttft_ms"]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_runs_at_a_small_size(path, capsys):
    assert main(["simulate", str(path), "--set", "workload.duration_s=1.0", "--set",
                 "workload.warmup_s=0.2", "--no-progress"]) == 0
    assert "throughput" in capsys.readouterr().out


def test_default_scenario_is_found_from_the_repository_root_only(tmp_path):
    from epsim.commands.simulate import DEFAULT_SCENARIO, resolve_scenario_path
    assert (ROOT / DEFAULT_SCENARIO).is_file()
    proc = _epsim("simulate", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "scenarios/default.yaml does not exist" in lines[0]
    assert "Traceback" not in proc.stderr
    assert resolve_scenario_path("x.yaml") == Path("x.yaml")


def test_cost_prints_one_layer(capsys):
    assert main(["cost", "--model", "Qwen3-235B-A22B", "--backend", "deepep", "--deepep-mode",
                 "low_latency", "--ep", "64", "--tokens-per-rank", "128", "--skew", "zipf:0.4",
                 "--dispatch-dtype", "fp8", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["num_nodes"] == 8 and result["mode"] == "low_latency"
    assert result["layer_us"] == pytest.approx(result["dispatch_us"] + result["experts_us"]
                                               + result["combine_us"] + result["block_ops_us"])
    assert result["busiest_rdma_copies"] > 0
    assert main(["cost", "--model", "Qwen3-30B-A3B", "--backend", "torch", "--ep", "8",
                 "--tokens-per-rank", "256"]) == 0
    text = capsys.readouterr().out
    assert "dispatch" in text and "MoE layer" in text and " µs" in text


@pytest.mark.parametrize("args, message", [
    (["--backend", "nccl", "--ep", "8"], r"^epsim cost: error: --backend \('nccl'\) must be one of"),
    (["--backend", "torch", "--ep", "12"], r"--ep \(12\) must be <= 8 or a multiple of 8"),
    (["--backend", "torch", "--ep", "3"], r"--ep \(3\) must divide the model's experts \(128\)"),
    (["--backend", "torch", "--ep", "8", "--skew", "zipf"], r"skew \('zipf'\) must be one of"),
    (["--backend", "torch", "--ep", "8", "--tokens-per-rank", "-1"],
     r"--tokens-per-rank \(-1\) must be >= 0"),
    (["--backend", "torch", "--ep", "8", "--model", "GPT-5"], r"--model \('GPT-5'\) must be one of"),
    (["--backend", "torch", "--ep", "8", "--cluster", "A100"], r"gpu \('A100'\) must be one of"),
])
def test_cost_bad_input_is_one_line_exit_2(args, message, capsys):
    full = ["cost", "--model", "Qwen3-30B-A3B", "--tokens-per-rank", "64", *args]
    if full.count("--model") > 1:
        i = full.index("--model")
        del full[i:i + 2]
    if "--tokens-per-rank" in args:
        i = full.index("--tokens-per-rank")
        del full[i:i + 2]
    assert main(full) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert re.search(message, err[0]), err[0]


@pytest.mark.parametrize("args, message", [
    (["--profile", "missing.json"], r"missing.json: cannot read profile"),
    (["--set", "deployment.ep_size"], r"--set \('deployment.ep_size'\) must look like key.path=value"),
    (["--set", "deployment.ep_size=0"], r"deployment.ep_size \(0\) must be > 0"),
    (["--out", "{file}"], r"--out \('.*'\) must be a writable directory"),
])
def test_simulate_bad_options_are_one_line_exit_2(tmp_path, args, message, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    args = [a.format(file=a_file) for a in args]
    assert main(["simulate", str(ROOT / "scenarios/default.yaml"), "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0]), err
