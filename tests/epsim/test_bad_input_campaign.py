"""The bad-input campaign: every generated case (`bad_input_cases.py`, > 1000 of them across
simulate, cost, eplb, calibrate --records, validate, plan and the app's upload loaders) ends
in a one-line refusal (exit 2) or a normal finish, within its time and memory limits; never a
traceback, a hang or a blow-up. A sample also goes through the real `python -m epsim.cli`.
A plan goes on past a failing point, and its pool workers die with it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.epsim.bad_input_cases import SCENARIO, all_cases
from tests.epsim.bad_input_runner import (ADDRESS_SPACE_MB, FAILURES, LIMIT_S, _write_files, classify,
                                          run_campaign, summary)
from tests.epsim.faults_harness import alive, descendants

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("simulate", "cost", "eplb", "calibrate", "validate", "plan", "app")
NUM_CLI_SAMPLES = 20


def test_cases_are_generated_and_cover_every_command():
    cases = all_cases()
    counts = Counter(c.command for c in cases)
    assert len(cases) >= 300
    assert all(counts[c] >= 30 for c in COMMANDS), counts
    assert sum(c.must_refuse for c in cases) >= 300


def test_every_case_is_refused_in_one_line_or_finishes_within_limits(tmp_path):
    results = run_campaign(tmp_path, num_workers=2)
    print(summary(results))
    assert len(results) == len(all_cases())
    failed = [r for r in results if r["outcome"] in FAILURES]
    assert not failed, "\n".join(f"{r['outcome']}: {r['name']}: {r['error']} {r.get('traceback') or ''}"
                                 for r in failed[:20])
    refused = Counter(r["command"] for r in results if r["outcome"] == "refused")
    assert all(refused[c] >= 20 for c in COMMANDS), refused


def _limit_child() -> None:
    limit = ADDRESS_SPACE_MB * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_sample_through_the_real_cli(tmp_path):
    """Every k-th command-line case, run as `python -m epsim.cli ...` in its own process."""
    from concurrent.futures import ThreadPoolExecutor
    cases = [c for c in all_cases() if c.command != "app"]
    step = max(1, len(cases) // NUM_CLI_SAMPLES)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(item) -> str | None:
        index, case = item
        folder = tmp_path / str(index)
        folder.mkdir()
        _write_files(case, folder)
        argv = [a.replace("{d}", str(folder)) for a in case.argv]
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "epsim.cli", *argv], capture_output=True, text=True,
                                  env=env, timeout=LIMIT_S + 30, preexec_fn=_limit_child)
        except subprocess.TimeoutExpired:
            return f"timeout: {case.name}"
        seconds = time.perf_counter() - start - 5.0          # interpreter start and imports
        result = classify(case, proc.returncode, proc.stderr, max(seconds, 0.0), None)
        if result["outcome"] in FAILURES:
            return f"{result['outcome']}: {case.name}: {proc.stderr[-600:]}"
        return None

    with ThreadPoolExecutor(2) as pool:
        failed = [f for f in pool.map(run, enumerate(cases[::step][:NUM_CLI_SAMPLES])) if f]
    assert not failed, "\n".join(failed)


# -- plans: a failing point is a row, and the workers die with the plan ---------------------------
def _scenario(tmp_path: Path, **workload) -> Path:
    data = {**SCENARIO, "workload": {**SCENARIO["workload"], **workload}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_point_that_fails_to_simulate_is_a_failed_row_and_the_sweep_goes_on(tmp_path):
    from epsim.plan import run_plan
    scenario = _scenario(tmp_path, arrivals={"kind": "poisson", "rate_per_s": 2})
    result = run_plan(str(scenario), ["workload.arrivals.rate_per_s=2,1e-30"], workers=1,
                      progress=False, plots=False, require_feasible=False, keep_up=False)
    assert len(result.rows) == 2
    good, bad = result.rows
    assert good["error"] == "" and good["throughput_tokens_per_s_per_gpu"] > 0
    assert bad["error"].startswith("workload (tiny) must bring at least one request")
    assert "\n" not in bad["error"]


def test_sweep_size_is_the_product_of_its_axes(tmp_path):
    from epsim.budget import MAX_SWEEP_POINTS
    from epsim.errors import SpecError
    from epsim.plan import run_plan
    with pytest.raises(SpecError, match=rf"--sweep \(1e\+08 points, the product of every axis\) must "
                                        rf"have at most {MAX_SWEEP_POINTS} points"):
        run_plan(str(_scenario(tmp_path)), ["seed=0:9999:+1", "workload.duration_s=1:10000:+1"],
                 workers=1, progress=False, plots=False)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_kill_9_of_a_plan_leaves_no_workers_and_the_rerun_resumes(tmp_path):
    scenario = _scenario(tmp_path, duration_s=1.0)
    out = tmp_path / "plan"
    argv = [sys.executable, "-m", "epsim.cli", "plan", str(scenario), "--sweep", "seed=0:6:+1",
            "--workers", "2", "--no-plots", "--no-keep-up", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    cache = out / "points.jsonl"
    children: set[int] = set()
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        children |= descendants(proc.pid)
        if cache.is_file() and cache.read_text().count("\n") >= 1 and len(children) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the plan finished before it could be killed; make it longer"
    children |= descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(c) for c in children):
        time.sleep(0.2)
    survivors = [c for c in children if alive(c)]
    for pid in survivors:                       # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"{len(survivors)} of {len(children)} pool processes outlived kill -9"
    done_before = sum(1 for line in cache.read_text().splitlines() if line.strip())
    rerun = subprocess.run(argv[:-2] + ["--out", str(out), "--json"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-800:]
    meta = json.loads((out / "plan.json").read_text())
    assert meta["counts"]["points"] == 7 and meta["counts"]["cached"] >= done_before >= 1
