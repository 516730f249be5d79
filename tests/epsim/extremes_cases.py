"""The valid-extremes campaign's cases, generated: legal scenarios at the edges of every axis a
demanding user pushes (window sizes, rates, lengths, batch limits, network speeds, EPLB sizes
and intervals, failures, backends by serving mode), each run by `epsim simulate --out` (and a
sample by `epsim plan` and the app's loaders). A legal scenario must run, or be refused up front
in one line; when it runs, its results directory must be complete (`manifest.json` says so and
every file's sha256 matches), whatever the run measured.

`tests/epsim/bad_input_runner.py` runs them (`check` is called on the case's directory after a
run that finished); `test_faults_campaign.py` and docs/bad_input.md report the counts.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from tests.epsim import bad_input_cases
from tests.epsim.bad_input_cases import SCENARIO

OUT = "{d}/out"


@dataclass(frozen=True)
class Case(bad_input_cases.Case):
    """A legal input (`bad_input_cases.Case`) whose finished run leaves files to judge:
    `check(case directory)` names what is wrong with them (None when nothing is)."""

    check: Callable[[Path], str | None] | None = field(default=None, compare=False)


def _yaml(data) -> bytes:
    return yaml.safe_dump(data, sort_keys=False).encode()


def _set(tree: dict, dotted: str, value) -> dict:
    data = copy.deepcopy(tree)
    node = data
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return data


def complete_run(folder: Path, out: str = "out") -> str | None:
    """What is wrong with a finished run's results directory: no manifest, not complete, a
    file missing or changed since (None: nothing)."""
    from epsim.errors import SpecError
    from epsim.io.rundir import check_complete, read_manifest
    path = folder / out
    manifest = read_manifest(path)
    if manifest is None:
        return f"{path}: no manifest.json after a finished run"
    try:
        check_complete(path, list(manifest.get("files", {})))
    except SpecError as exc:
        return str(exc)
    if not manifest.get("files"):
        return f"{path}: the manifest lists no file"
    return None


# -- the axes: (dotted key, legal extreme values), each applied alone to the tiny scenario -------
FAST = {"workload.duration_s": 0.2}
AXES: dict[str, list] = {
    "workload.duration_s": [1e-6, 1e-3, 0.02, 1.0],
    "workload.warmup_s": [0.0, 0.1999, 0.2, 0.5, 1e6],
    "workload.arrivals.rate_per_s": [1e-9, 1e-3, 1.0, 2000.0],
    "workload.input_len": [{"kind": "fixed", "value": v} for v in (1, 2, 8192, 1_000_000)],
    "workload.output_len": [{"kind": "fixed", "value": v} for v in (1, 2, 100_000_000)],
    "workload.initial_running_per_rank": [0, 1, 8, 1000],
    "deployment.max_running_requests": [1, 2, 4096],
    "deployment.chunked_prefill_size": [1, 16, 1_000_000],
    "deployment.cuda_graph_max_bs": [1, 1_000_000],
    "cluster.rdma_gbps": [1e-6, 1e-3, 1e5],
    "cluster.nvlink_gbps": [1e-6, 1e-3, 1e5],
    "cluster.price_per_gpu_hour": [0.0, 1e9],
    "workload.skew": [{"kind": "zipf", "alpha": 1e-6}, {"kind": "zipf", "alpha": 100.0},
                      {"kind": "uniform", "layer_variation": 10.0, "drift_rate_per_s": 100.0},
                      {"kind": "hotset", "num_hot": 1, "hot_frac": 0.12}],
    "seed": [0, 2**63 - 1],
}
# several keys at once: serving modes by backend, EPLB sizes and intervals, failures
COMBOS: dict[str, dict] = {}
for backend in ("none", "torch", "deepep", "mooncake"):
    for mode in ("null", "prefill", "decode"):
        COMBOS[f"backend={backend},mode={mode}"] = {"deployment.moe_a2a_backend": backend,
                                                    "deployment.disaggregation_mode": mode}
COMBOS["mode=yaml-null"] = {"deployment.disaggregation_mode": None}
COMBOS["tbo,eager"] = {"deployment.enable_two_batch_overlap": True,
                       "deployment.disable_cuda_graph": True}
COMBOS["tp-attention"] = {"deployment.enable_dp_attention": False}
for redundant in (0, 2, 126, 8190):
    for every in (1, 10, 1_000_000):
        for algorithm in ("deepseek", "sticky"):
            COMBOS[f"eplb,redundant={redundant},every={every},{algorithm}"] = {
                "deployment.enable_eplb": True, "deployment.ep_num_redundant_experts": redundant,
                "deployment.eplb_rebalance_num_iterations": every,
                "deployment.expert_distribution_recorder_buffer_size": max(1, min(every, 100)),
                "deployment.eplb_algorithm": algorithm}
COMBOS["eplb,chunked,1-layer"] = {"deployment.enable_eplb": True,
                                  "deployment.eplb_rebalance_num_iterations": 5,
                                  "deployment.eplb_stop_the_world": False,
                                  "deployment.eplb_rebalance_layers_per_chunk": 1}
COMBOS["eplb,chunk>layers"] = {"deployment.enable_eplb": True,
                               "deployment.eplb_rebalance_num_iterations": 5,
                               "deployment.eplb_rebalance_layers_per_chunk": 1000}
COMBOS["eplb,from_skew"] = {"deployment.enable_eplb": True,
                            "deployment.init_expert_location": "from_skew",
                            "deployment.ep_num_redundant_experts": 2}
FAILURES = {
    "rank0-at-0-forever": [{"at_s": 0.0, "rank": 0}],
    "rank1-at-end": [{"at_s": 0.2, "rank": 1}],
    "rank0-after-end": [{"at_s": 1e6, "rank": 0}],
    "rank0-recovers-in-1us": [{"at_s": 0.0, "rank": 0, "recover_after_s": 1e-6}],
    "one-then-the-other": [{"at_s": 0.0, "rank": 0, "recover_after_s": 0.05},
                           {"at_s": 0.1, "rank": 1, "recover_after_s": 0.05}],
}
for name, failures in FAILURES.items():
    for recovery in ("replicas", "reload"):
        if recovery == "reload" and any("recover_after_s" not in f for f in failures):
            continue                                   # refused: reload waits for the rank
        COMBOS[f"failures={name},{recovery}"] = {
            "deployment.failures": failures, "deployment.elastic_recovery": recovery,
            "deployment.ep_num_redundant_experts": 128 if recovery == "replicas" else 0,
            "deployment.enable_eplb": recovery == "replicas"}
for speed in (1e-9, 1e-3, 1e5):
    COMBOS[f"failure,reload_gbps={speed:g}"] = {
        "deployment.failures": [{"at_s": 0.05, "rank": 1, "recover_after_s": 0.05}],
        "deployment.elastic_recovery": "reload", "deployment.reload_gbps": speed}
# every rank lost at once: cannot run, must be refused up front
MUST_REFUSE: dict[str, dict] = {
    "all-ranks-lost,ep1,reload": {"deployment.ep_size": 1, "deployment.elastic_recovery": "reload",
                                  "deployment.failures": [{"at_s": 0, "rank": 0, "recover_after_s": 1}]},
    "all-ranks-lost,ep2,overlapping": {
        "deployment.elastic_recovery": "reload",
        "deployment.failures": [{"at_s": 0.0, "rank": 0, "recover_after_s": 0.1},
                                {"at_s": 0.05, "rank": 1, "recover_after_s": 0.1}]},
    "sticky-8192-every-10": {"model": "DeepSeek-V3", "deployment.ep_size": 8,
                             "deployment.enable_eplb": True, "deployment.eplb_algorithm": "sticky",
                             "deployment.ep_num_redundant_experts": 8192 - 256,
                             "deployment.eplb_rebalance_num_iterations": 10,
                             "workload.duration_s": 60.0},
}


def _maker(data: bytes):
    """A file maker returning `data` (bound now, not when the loop ends)."""
    return lambda: data


def _shown(value) -> str:
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _simulate(name: str, tree: dict, must_refuse: bool = False) -> Case:
    return Case(f"extreme/{name}", "simulate",
                ("simulate", "{d}/s.yaml", "--out", OUT, "--timeline", "--no-progress"),
                (("s.yaml", _maker(_yaml(tree))),), must_refuse=must_refuse,
                check=None if must_refuse else complete_run)


def _tree(values: dict) -> dict:
    tree = copy.deepcopy(SCENARIO)
    for key, value in values.items():
        tree = _set(tree, key, value)
    return tree


def simulate_cases() -> list[Case]:
    cases = []
    for key, values in AXES.items():
        for value in values:
            cases.append(_simulate(f"{key}={_shown(value)}", _tree({key: value})))
    for name, values in COMBOS.items():
        cases.append(_simulate(name, _tree(values)))
    for name, values in MUST_REFUSE.items():
        cases.append(_simulate(name, _tree(values), must_refuse=True))
    return cases


def plan_cases() -> list[Case]:
    """Sweeps across an axis's extremes: a plan finishes, and a point where nothing was measured
    is never feasible, never best."""
    cases = []
    for key in ("workload.duration_s", "workload.warmup_s", "workload.arrivals.rate_per_s",
                "cluster.rdma_gbps"):
        values = ",".join(f"{v:g}" for v in AXES[key])
        cases.append(Case(f"extreme-plan/{key}", "plan",
                          ("plan", "{d}/s.yaml", "--sweep", f"{key}={values}", "--workers", "1",
                           "--no-keep-up", "--out", OUT),
                          (("s.yaml", lambda: _yaml(SCENARIO)),), must_finish=True,
                          check=_plan_check))
    return cases


def _plan_check(folder: Path) -> str | None:
    problem = complete_run(folder)
    if problem:
        return problem
    import csv
    with open(folder / "out" / "results.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            if row["num_measured_steps"] in ("", "0", "0.0") and row["feasible"] == "True":
                return f"point {row['point']}: nothing measured, yet feasible"
    return None


def app_cases() -> list[Case]:
    """The app's upload path on extremes (the CLI runs them, so the app must too)."""
    cases = []
    for key, values in AXES.items():
        value = values[0]
        cases.append(Case(f"extreme-app/{key}={value}", "app", ("scenario", "{d}/s.yaml"),
                          (("s.yaml", _maker(_yaml(_tree({key: value})))),)))
    return cases


def all_cases() -> list[Case]:
    return simulate_cases() + plan_cases() + app_cases()


CI_AXES = ("workload.duration_s", "workload.warmup_s", "workload.arrivals.rate_per_s",
           "workload.output_len", "cluster.rdma_gbps")


def ci_cases() -> list[Case]:
    """The subset CI runs on every change (a few minutes on 2 cores): the first and last value
    of the window, rate, length and network axes, one backend per serving mode, the largest
    EPLB sizes, the failures, every must-refuse case, one plan and the app's smallest values."""
    keep = []
    for case in all_cases():
        name = case.name.split("/", 1)[1]
        key = name.split("=", 1)[0]
        if case.command == "simulate" and key in CI_AXES:
            values = AXES[key]
            ends = {_shown(values[0]), _shown(values[-1])}
            if name.split("=", 1)[1] in ends:
                keep.append(case)
        elif case.command == "simulate" and (
                case.must_refuse or name in (
                    "backend=none,mode=prefill", "backend=deepep,mode=decode", "mode=yaml-null",
                    "eplb,redundant=8190,every=1,deepseek", "eplb,redundant=126,every=10,sticky",
                    "failures=rank0-at-0-forever,replicas", "failures=one-then-the-other,reload",
                    "failure,reload_gbps=1e-09")):
            keep.append(case)
        elif case.command == "plan" and key == "workload.warmup_s":
            keep.append(case)
        elif case.command == "app" and key in ("workload.arrivals.rate_per_s", "workload.duration_s"):
            keep.append(case)
    return keep
