"""`epsim compare RUN_A RUN_B` (`epsim.report.compare`): two runs side by side, the deltas
B - A from their own summaries, what differs between the scenarios and where the MoE layer's
time moved; runs given as results directories, summary.json files or scenario YAMLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epsim.cli import main
from epsim.report.compare import layer_means_us, metric_rows, scenario_diff, why_line

ROOT = Path(__file__).resolve().parents[2]
SHORT = ["--set", "workload.duration_s=4", "--set", "workload.warmup_s=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    for name, backend in (("a", "mooncake"), ("b", "deepep")):
        assert main(["simulate", str(ROOT / "scenarios" / "default.yaml"), *SHORT, "--set",
                     f"deployment.moe_a2a_backend={backend}", "--out", str(out / name), "--no-plots",
                     "--quiet"]) == 0
    return out


def test_deltas_are_the_summaries_differences(runs, capsys):
    assert main(["compare", str(runs / "a"), str(runs / "b" / "summary.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    a = json.loads((runs / "a" / "summary.json").read_text())
    b = json.loads((runs / "b" / "summary.json").read_text())
    assert data["differs"] == [{"field": "deployment.moe_a2a_backend", "a": "mooncake", "b": "deepep"}]
    tpot = next(r for r in data["metrics"] if r["label"] == "TPOT p99")
    assert tpot["a"] == a["tpot_ms"]["p99"] and tpot["b"] == b["tpot_ms"]["p99"]
    assert tpot["delta"] == pytest.approx(b["tpot_ms"]["p99"] - a["tpot_ms"]["p99"])
    served = next(r for r in data["metrics"] if r["label"] == "served")
    assert served["a"] == a["serving"]["served_rps"]
    layer = {r["label"]: r for r in data["layer_us"]}
    means = layer_means_us(b)
    assert layer["dispatch"]["b"] == pytest.approx(means["dispatch"])
    assert layer["MoE layer"]["delta"] == pytest.approx(means["layer"] - layer_means_us(a)["layer"])
    assert data["why"].startswith(f"MoE layer {layer['MoE layer']['delta']:+.1f} µs")


def test_text_table_and_a_yaml_run(runs, capsys):
    assert main(["compare", str(runs / "a"), str(ROOT / "scenarios" / "default.yaml"),
                 "--set-b", "workload.duration_s=4", "--set-b", "workload.warmup_s=1",
                 "--set-b", "deployment.moe_a2a_backend=deepep", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "differs    deployment.moe_a2a_backend: mooncake -> deepep" in text
    for label in ("TPOT p99", "TTFT p99", "throughput per GPU", "dispatch", "combine", "MoE layer"):
        assert any(line.startswith(label) for line in text.splitlines()), label
    assert "why        MoE layer" in text and "keep-up    A: " in text


def test_the_same_run_twice_has_no_deltas(runs):
    a = json.loads((runs / "a" / "summary.json").read_text())
    assert scenario_diff(a, a) == []
    assert all(r.delta in (0.0, None) for r in metric_rows(a, a))
    assert "no part moved" in why_line(a, a)


@pytest.mark.parametrize("args, message", [
    (["nope"], r"run \('nope'\) must be a results directory"),
    (["{a}", "--set-b", "seed=1"], r"--set-a/--set-b \('seed=1'\) change a scenario YAML"),
])
def test_bad_runs_are_one_line(runs, capsys, args, message):
    import re
    argv = ["compare", str(runs / "a")] + [x.format(a=runs / "a") for x in args]
    assert main(argv) == 2
    assert re.search(message, capsys.readouterr().err)
