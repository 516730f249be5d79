"""`epsim eplb` in a subprocess: every loads format, the maps, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tests.epsim.eplb.test_deepseek import README_LOG2PHY, README_LOGCNT, README_PHY2LOG, README_WEIGHT

README_ARGS = ["--replicas", "16", "--groups", "4", "--nodes", "2", "--gpus", "8"]


def epsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epsim.cli", "eplb", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def readme_json(tmp_path):
    path = tmp_path / "loads.json"
    path.write_text(json.dumps(README_WEIGHT.tolist()))
    return path


def test_json_output_reproduces_the_reference_example(readme_json):
    out = epsim(str(readme_json), *README_ARGS, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    np.testing.assert_array_equal(data["phy2log"], README_PHY2LOG)
    np.testing.assert_array_equal(data["log2phy"], README_LOG2PHY)
    np.testing.assert_array_equal(data["logcnt"], README_LOGCNT)
    assert data["balancedness_before"] is None          # 12 experts do not split over 8 GPUs
    assert len(data["balancedness_after"]) == 2 and min(data["balancedness_after"]) > 0.8


def test_text_output_shows_balance_not_maps(tmp_path):
    loads = np.zeros((2, 16))
    loads[:, 0] = 1000
    loads[:, 1:] = 10
    path = tmp_path / "loads.csv"
    np.savetxt(path, loads, delimiter=",", header="rows are layers")
    out = epsim("--loads", str(path), "--replicas", "24", "--gpus", "8", "--nodes", "2")
    assert out.returncode == 0, out.stderr
    assert "algorithm: deepseek (global: num_groups 1 % num_nodes 2 != 0)" in out.stdout
    before = next(line for line in out.stdout.splitlines() if line.startswith("balancedness before"))
    after = next(line for line in out.stdout.splitlines() if line.startswith("balancedness after"))
    assert float(before.split("mean ")[1].split(",")[0]) < float(after.split("mean ")[1].split(",")[0])
    # the maps go to --out (or --json), not the screen: a summary of a few lines
    assert "layer   1:" not in out.stdout and "logcnt:" not in out.stdout
    assert len(out.stdout.splitlines()) < 15 and max(map(len, out.stdout.splitlines())) < 200
    assert "--out DIR writes them" in out.stdout


@pytest.mark.parametrize("fmt", ["npy", "npy3d", "json_dict", "jsonl"])
def test_every_loads_format_gives_the_same_placement(fmt, tmp_path):
    if fmt == "npy":
        path = tmp_path / "loads.npy"
        np.save(path, README_WEIGHT)
    elif fmt == "npy3d":          # [steps, layers, experts]: summed over steps
        path = tmp_path / "loads.npy"
        np.save(path, np.stack([README_WEIGHT // 2, README_WEIGHT - README_WEIGHT // 2]))
    elif fmt == "json_dict":
        path = tmp_path / "loads.json"
        path.write_text(json.dumps({"loads": README_WEIGHT.tolist(), "note": "window 1"}))
    else:                         # our JSONL trace, one step per line
        path = tmp_path / "trace.jsonl"
        path.write_text("\n".join(json.dumps({"forward_pass_id": i, "loads": part.tolist()})
                                  for i, part in enumerate([README_WEIGHT - 1, np.ones_like(README_WEIGHT)])))
    out = epsim(str(path), *README_ARGS, "--json")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(json.loads(out.stdout)["phy2log"], README_PHY2LOG)


def test_sglang_stat_dump(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "expert_distribution.pt"
    torch.save({"logical_count": torch.tensor(np.stack([README_WEIGHT, README_WEIGHT]))}, path)
    out = epsim(str(path), *README_ARGS, "--json")
    assert out.returncode == 0, out.stderr
    np.testing.assert_array_equal(json.loads(out.stdout)["phy2log"], README_PHY2LOG)


def test_previous_placement_round_trips_for_sticky(readme_json, tmp_path):
    first = epsim(str(readme_json), *README_ARGS, "--algorithm", "sticky", "--json")
    assert first.returncode == 0, first.stderr
    previous = tmp_path / "previous.json"
    previous.write_text(first.stdout)
    again = epsim(str(readme_json), *README_ARGS, "--algorithm", "sticky", "--previous", str(previous), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["changed_slots"] == [0, 0]


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("make, args, message", [
    (lambda p: _write(p, "neg.json", "[[1, -3, 2, 4]]"), ["--replicas", "4", "--gpus", "2"],
     r"loads\[0, 1\] \(-3\) must be >= 0"),
    (lambda p: _write(p, "nan.csv", "1,2,nan,4\n"), ["--replicas", "4", "--gpus", "2"],
     r"loads\[0, 2\] \(nan\) must be finite"),
    (lambda p: _write(p, "ok.json", "[[1, 2, 3, 4]]"), ["--replicas", "6", "--gpus", "4"],
     r"num_replicas \(6\) must be a multiple of num_gpus \(4\)"),
    (lambda p: _write(p, "ok.json", "[[1, 2, 3, 4]]"), ["--replicas", "4", "--gpus", "2", "--groups", "3"],
     r"num_groups \(3\) must divide the logical experts \(4\)"),
    (lambda p: _write(p, "ok.json", "[[1, 2, 3, 4]]"), ["--replicas", "4", "--gpus", "4", "--nodes", "3"],
     r"num_nodes \(3\) must divide num_gpus \(4\)"),
    (lambda p: _write(p, "ok.json", "[[1, 2, 3, 4]]"), ["--replicas", "2", "--gpus", "2"],
     r"num_replicas \(2\) must be >= the logical experts \(4\)"),
    (lambda p: _write(p, "ok.json", "[[1, 2, 3, 4]]"), ["--replicas", "4", "--gpus", "2", "--algorithm", "best"],
     r"algorithm \('best'\) must be one of"),
    (lambda p: str(p / "missing.json"), ["--replicas", "4", "--gpus", "2"], r"loads file not found"),
    (lambda p: _write(p, "loads.txt", "1 2 3 4"), ["--replicas", "4", "--gpus", "2"],
     r"loads file suffix \('.txt'\) must be one of"),
    (lambda p: _write(p, "bad.json", "[[1, 2,"), ["--replicas", "4", "--gpus", "2"], r"not valid JSON"),
    (lambda p: _write(p, "ragged.json", "[[1, 2], [3]]"), ["--replicas", "4", "--gpus", "2"],
     r"loads must be a rectangular \[layers, experts\] list"),
    (lambda p: _write(p, "words.csv", "a,b\n"), ["--replicas", "4", "--gpus", "2"],
     r"loads must be numbers, one row per layer"),
    (lambda p: _write(p, "fake.npy", "not an array"), ["--replicas", "4", "--gpus", "2"],
     r"not a numeric .npy array"),
])
def test_bad_input_is_one_line_and_exit_2(make, args, message, tmp_path):
    out = epsim(make(tmp_path), *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("epsim eplb: error: ")
    assert re.search(message, lines[0]), lines[0]


def test_missing_loads_argument_is_one_line_and_exit_2():
    out = epsim("--replicas", "4", "--gpus", "2")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "loads (missing) must name a file" in out.stderr


def test_rebalance_cost_is_the_simulators_model(tmp_path):
    """What `epsim eplb` says a rebalance moves and costs is `epsim.eplb.rebalance_cost` from
    SGLang's trivial placement to the new one (stop-the-world, all layers in one chunk)."""
    from epsim.cost.tables import contiguous_placement
    from epsim.eplb import Placement, compute_placement, plan_moves, rebalance_cost, rebalance_params
    from epsim.profile import load_profile
    from epsim.spec.hardware import ClusterSpec
    from epsim.zoo import get_model
    loads = np.random.default_rng(1).zipf(1.4, (3, 128)).astype(float)     # [layers, experts]
    path = tmp_path / "loads.npy"
    np.save(path, loads)
    out = epsim(str(path), "--replicas", "144", "--gpus", "8", "--model", "Qwen3-30B-A3B", "--json")
    assert out.returncode == 0, out.stderr
    cost = json.loads(out.stdout)["rebalance"]
    new = compute_placement("deepseek", loads, 144, 1, 1, 8)
    old = Placement.from_physical_to_logical(contiguous_placement(3, 128, 8, 16), 128, 8, 1)
    expert_bytes = get_model("Qwen3-30B-A3B").expert_bytes
    params = rebalance_params(load_profile(), ClusterSpec(gpu="H200", gpus_per_node=8))
    expected = rebalance_cost(old, new, expert_bytes, params, algorithm="deepseek")
    assert cost["stall_us_stop_the_world"] == pytest.approx(expected.stall_us)
    assert cost["slowest_rank_transfer_us"] == pytest.approx(float(expected.chunk_us[0]))
    assert cost["moved_bytes"] == pytest.approx(expected.moved_bytes)
    plan = plan_moves(old, new, expert_bytes=expert_bytes)
    assert cost["recv_bytes_per_rank"] == pytest.approx(plan.bytes_by_pair().sum(axis=0).tolist())
    assert sum(cost["recv_bytes_per_rank"]) + cost["local_copy_bytes"] == pytest.approx(cost["moved_bytes"])
    text = epsim(str(path), "--replicas", "144", "--gpus", "8").stdout    # two zoo models have 128 experts
    assert "rebalance from trivial" in text and "give --model" in text


@pytest.mark.parametrize("scale", [1e-50, 1e40])
def test_the_placement_does_not_depend_on_the_loads_unit(readme_json, tmp_path, scale):
    base = json.loads(epsim(str(readme_json), *README_ARGS, "--json").stdout)
    path = tmp_path / "scaled.json"
    path.write_text(json.dumps((README_WEIGHT * scale).tolist()))
    out = epsim(str(path), *README_ARGS, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["phy2log"] == base["phy2log"]
    assert data["balancedness_after"] == pytest.approx(base["balancedness_after"], rel=1e-12)


def test_all_zero_loads_move_nothing(tmp_path):
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(np.zeros((2, 128)).tolist()))
    out = epsim(str(path), "--replicas", "160", "--gpus", "8", "--model", "Qwen3-30B-A3B", "--json")
    assert out.returncode == 0, out.stderr
    cost = json.loads(out.stdout)["rebalance"]
    assert cost["changed_slots"] == 0 and cost["moved_bytes"] == 0
