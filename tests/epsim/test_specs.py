"""Malformed scenario files through the real CLI: each fails with exit code 2 and one line that
names the file, the field path, the bad value and what is allowed; never a traceback."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from epsim.zoo import model_names

pytestmark = pytest.mark.slow        # 30+ CLI processes: ~10-20 s on a 2-core machine

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "scenarios" / "default.yaml").read_text())
INLINE_MODEL = {"name": "tiny", "num_layers": 4, "hidden_size": 64, "moe_intermediate_size": 32,
                "num_experts": 8, "top_k": 2, "num_attention_heads": 4, "num_key_value_heads": 2}

# (id, {dotted.path: value} applied to the default scenario, or raw file text,
#  the one-line message must contain each of these)
CASES = [
    ("ep_size_zero", {"deployment.ep_size": 0}, ["deployment.ep_size (0)", "must be > 0"]),
    ("unknown_backend", {"deployment.moe_a2a_backend": "nccl"},
     ["deployment.moe_a2a_backend ('nccl')", "must be one of 'none', 'torch', 'deepep' or 'mooncake'"]),
    ("deepep_mode", {"deployment.deepep_mode": "fast"},
     ["deployment.deepep_mode ('fast')", "must be one of 'auto', 'normal' or 'low_latency'"]),
    ("dispatch_dtype", {"deployment.dispatch_dtype": "int8"},
     ["deployment.dispatch_dtype ('int8')", "must be one of 'bf16', 'fp8' or 'nvfp4'"]),
    ("nvfp4_dispatch_needs_deepep_ll", {"deployment.dispatch_dtype": "nvfp4"},
     ["dispatch_dtype (nvfp4) needs moe_a2a_backend deepep with deepep_mode low_latency"]),
    ("disaggregation", {"deployment.disaggregation_mode": "both"},
     ["deployment.disaggregation_mode ('both')", "must be one of 'null', 'prefill' or 'decode'"]),
    ("max_running_negative", {"deployment.max_running_requests": -5},
     ["deployment.max_running_requests (-5)", "must be > 0"]),
    ("chunk_not_integer", {"deployment.chunked_prefill_size": "lots"},
     ["deployment.chunked_prefill_size ('lots')", "must be an integer"]),
    ("tbo_not_bool", {"deployment.enable_two_batch_overlap": "maybe"},
     ["deployment.enable_two_batch_overlap ('maybe')", "must be true or false"]),
    ("replica_selection", {"deployment.ep_dispatch_algorithm": "nearest"},
     ["deployment.ep_dispatch_algorithm ('nearest')", "must be one of 'static', 'random' or 'round_robin'"]),
    ("ep_larger_than_cluster", {"deployment.ep_size": 16},
     ["deployment.ep_size (16)", "must be <= the cluster's GPUs (1 nodes x 8 = 8)"]),
    ("redundant_not_multiple", {"deployment.ep_num_redundant_experts": 4, "deployment.enable_eplb": True},
     ["deployment.ep_num_redundant_experts (4)", "must be a multiple of ep_size (8)"]),
    ("redundant_without_eplb", {"deployment.ep_num_redundant_experts": 8},
     ["deployment.ep_num_redundant_experts (8)", "needs deployment.enable_eplb: true"]),
    ("failure_rank", {"deployment.failures": [{"at_s": 1.0, "rank": 9}]},
     ["deployment.failures.0.rank (9)", "must be < ep_size (8)"]),
    ("unknown_field", {"deployment.turbo": True},
     ["deployment.turbo (True)", "is not a known field; allowed: block_kernels, chunked_prefill_size"]),
    ("unknown_gpu", {"cluster.gpu": "A100"},
     ["cluster.gpu ('A100')", "must be one of ['B200', 'B300', 'GB200', 'GB300', 'H100', 'H200', 'H800']"]),
    ("network_kind", {"cluster.network": "ethernet"},
     ["cluster.network.kind ('ethernet')", "must be one of 'infiniband', 'roce', 'efa' or 'nvl72'"]),
    ("network_nic_speed", {"cluster.network": {"kind": "efa", "nic_gbit_per_s": -100}},
     ["cluster.network.nic_gbit_per_s (-100)", "must be > 0"]),
    ("network_nvl72_on_h200", {"cluster.network": "nvl72"},
     ["cluster.network.kind ('nvl72')", "must go with an NVL72 GPU ['GB200', 'GB300']"]),
    ("network_unknown_field", {"cluster.network": {"kind": "roce", "nics": 8}},
     ["cluster.network.nics (8)", "is not a known field; allowed: kind, nic_gbit_per_s, nics_per_node"]),
    ("zero_nodes", {"cluster.num_nodes": 0}, ["cluster.num_nodes (0)", "must be > 0"]),
    ("unknown_model", {"model": "GPT-5"},
     ["model ('GPT-5')", f"must be one of {model_names()}"]),
    ("model_missing_field", {"model": {"name": "x", "num_layers": 4}},
     ["model.hidden_size (missing)", "must be given"]),
    ("model_top_k", {"model": {**INLINE_MODEL, "top_k": 10}, "deployment.ep_size": 8},
     ["model.top_k (10)", "must be <= num_experts (8)"]),
    ("skew_kind", {"workload.skew.kind": "pareto"},
     ["workload.skew.kind ('pareto')", "must be one of 'uniform', 'zipf', 'hotset', 'trace'"]),
    ("zipf_alpha", {"workload.skew.alpha": -1.0}, ["workload.skew.alpha (-1.0)", "must be > 0"]),
    ("drift_negative", {"workload.skew.drift_rate_per_s": -0.1},
     ["workload.skew.drift_rate_per_s (-0.1)", "must be >= 0"]),
    ("hotset_fraction", {"workload.skew": {"kind": "hotset", "num_hot": 4, "hot_frac": 1.5}},
     ["workload.skew.hot_frac (1.5)", "must be < 1"]),
    ("hotset_over_top_k", {"workload.skew": {"kind": "hotset", "num_hot": 2, "hot_frac": 0.5}},
     ["workload.skew.hot_frac (0.5)", "must be <= num_hot / top_k (2/8 = 0.250)"]),
    ("skew_trace_missing", {"workload.skew": {"kind": "trace", "path": "nowhere.jsonl"}},
     ["workload.skew.path ('nowhere.jsonl')", "must be an existing file"]),
    ("arrival_rate_zero", {"workload.arrivals.rate_per_s": 0},
     ["workload.arrivals.rate_per_s (0)", "must be > 0"]),
    ("length_order", {"workload.input_len": {"kind": "uniform", "low": 5, "high": 1}},
     ["workload.input_len.high (1)", "must be >= low (5)"]),
    ("warmup_too_long", {"workload.warmup_s": 30}, ["workload.warmup_s (30", "must be < duration_s (20"]),
    ("duration_text", {"workload.duration_s": "ten"}, ["workload.duration_s ('ten')", "must be a number"]),
    ("negative_seed", {"seed": -1}, ["seed (-1)", "must be >= 0"]),
    ("top_level_list", "- model: Qwen3-30B-A3B\n",
     ["(top level) (list)", "must be a mapping of scenario fields"]),
    ("bad_yaml", "model: [Qwen3\nseed: 1\n", ["not valid YAML at line", "column"]),
]


def _apply(data: dict, dotted: str, value) -> None:
    node = data
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def _write(tmp_path: Path, name: str, change) -> Path:
    path = tmp_path / f"{name}.yaml"
    if isinstance(change, str):
        path.write_text(change)
        return path
    data = copy.deepcopy(BASE)
    for dotted, value in change.items():
        _apply(data, dotted, value)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def cli_results(tmp_path_factory):
    """Run every malformed file through `epsim simulate` at once (the CLI starts in ~0.5 s)."""
    tmp = tmp_path_factory.mktemp("bad_scenarios")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = {}
    for name, change, _ in CASES:
        path = _write(tmp, name, change)
        procs[name] = (path, subprocess.Popen(
            [sys.executable, "-m", "epsim.cli", "simulate", str(path), "--no-progress"],
            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results = {}
    for name, (path, proc) in procs.items():
        out, err = proc.communicate(timeout=120)
        results[name] = (path, proc.returncode, out, err)
    return results


def test_at_least_twenty_cases():
    assert len(CASES) >= 20
    assert len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize("name, change, expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_scenario_is_one_line_exit_2(cli_results, name, change, expected):
    path, code, out, err = cli_results[name]
    assert code == 2, (out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"epsim simulate: error: {path}"), line
    for fragment in expected:
        assert fragment in line, f"{fragment!r} not in {line!r}"
