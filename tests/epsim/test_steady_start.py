"""`workload.initial_running_per_rank: steady`: a decode run starts at its own screen's steady
batch, resolved per run (the rule `epsim plan --warm-start` uses), and says what it started from."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from epsim.errors import SpecError
from epsim.plan.columns import derived_columns
from epsim.sim.steady import steady_running_per_rank
from epsim.report.summary import summarize
from epsim.report.table import format_table
from epsim.sim import Simulation
from epsim.spec import scenario_from_dict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "scenarios" / "default.yaml"


def default(**workload):
    data = yaml.safe_load(DEFAULT.read_text())
    data["workload"].update({"duration_s": 6.0, "warmup_s": 1.0, **workload})
    return scenario_from_dict(data, where="default.yaml")


def run(scenario):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulation(scenario)
        return sim, sim.run()


def test_steady_starts_at_the_screens_batch_and_equals_that_number():
    steady = default()
    assert steady.workload.initial_running_per_rank == "steady"
    per_rank = steady_running_per_rank(steady)
    assert 1 <= per_rank <= steady.deployment.max_running_requests
    sim, result = run(steady)
    assert sim.initial_running_per_rank == per_rank == result.initial_running_per_rank
    assert int(result.is_initial.sum()) == per_rank * steady.dp_size
    _, explicit = run(default(initial_running_per_rank=per_rank))
    for name in ("step_us", "num_running", "itl_mean_us"):
        assert np.array_equal(result.steps[name], explicit.steps[name])
    assert derived_columns(steady)["initial_running_per_rank"] == per_rank
    summary = summarize(result)
    assert summary["initial_running_per_rank"] == per_rank
    assert (f"started with {per_rank} running per rank (steady: the screen's steady batch)"
            in format_table(summary))


def test_each_rate_starts_at_its_own_steady_batch():
    slow, fast = (steady_running_per_rank(default(arrivals={"kind": "poisson", "rate_per_s": r}))
                  for r in (20.0, 60.0))
    assert slow < fast                      # Little's law: fewer requests in flight at 20 req/s
    started = run(default(arrivals={"kind": "poisson", "rate_per_s": 20.0}))[1]
    assert started.initial_running_per_rank == slow


@pytest.mark.parametrize("change, message", [
    ({"workload": {"initial_running_per_rank": "warm"}},
     r"workload\.initial_running_per_rank.*must be an integer >= 0 or 'steady'"),
    ({"workload": {"initial_running_per_rank": -3}},
     r"workload\.initial_running_per_rank.*must be an integer >= 0 or 'steady'"),
    ({"deployment": {"disaggregation_mode": "prefill"}},
     r"initial_running_per_rank \('steady'\) needs deployment\.disaggregation_mode: decode or "
     r"null \(it starts decoding requests; a prefill instance has none\)"),
])
def test_bad_steady_starts_name_the_field(change, message):
    data = yaml.safe_load(DEFAULT.read_text())
    for section, values in change.items():
        data[section].update(values)
    with pytest.raises(SpecError, match=message):
        scenario_from_dict(data, where="default.yaml")


def test_a_steady_start_needs_arrivals_with_a_rate(tmp_path):
    (tmp_path / "arrivals.csv").write_text("arrival_s\n0.1\n0.2\n")
    data = yaml.safe_load(DEFAULT.read_text())
    data["workload"]["arrivals"] = {"kind": "trace", "path": "arrivals.csv"}
    with pytest.raises(SpecError, match=r"initial_running_per_rank \('steady'\) needs arrivals "
                                        r"with a rate_per_s \(poisson or bursty\)"):
        scenario_from_dict(data, where="default.yaml", base_dir=tmp_path)


def test_a_bad_start_is_one_line_and_exit_2_on_the_cli():
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "epsim.cli", "simulate", str(DEFAULT), "--set",
                           "workload.initial_running_per_rank=warm"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "workload.initial_running_per_rank ('warm') must be an integer " \
                                ">= 0 or 'steady'" in lines[0]
