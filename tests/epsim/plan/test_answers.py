"""Answers per workload point (never one best across request rates) and `--max-rate`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from epsim.errors import SpecError
from epsim.plan import run_plan
from epsim.plan.max_rate import find_max_rates
from epsim.plan.select import parse_constraint, rejection
from tests.epsim.plan_fixtures import write_tiny_scenario

RATES = [100, 400]


@pytest.fixture(scope="module")
def per_rate(tmp_path_factory):
    out = tmp_path_factory.mktemp("answers")
    scenario = write_tiny_scenario(out)
    rates = f"workload.arrivals.rate_per_s={','.join(map(str, RATES))}"
    result = run_plan(scenario, ["deployment.ep_size=2,4,8", rates],
                      constraints=["tpot_ms.p99<=40"], workers=1, progress=False, out=out / "res")
    return scenario, out, result


def test_one_answer_per_workload_point(per_rate):
    _, out, result = per_rate
    assert [a.workload for a in result.answers] == [{"workload.arrivals.rate_per_s": r} for r in RATES]
    assert result.best is None                       # no single best across rates
    for answer in result.answers:
        rates = {result.rows[i]["workload.arrivals.rate_per_s"] for i in answer.rows}
        assert rates == set(answer.workload.values())
        feasible = [i for i in answer.rows if result.rows[i]["feasible"]]
        if feasible:                # the fewest GPUs among this rate's points, then the lowest TPOT
            assert answer.best == min(feasible, key=lambda i: (result.rows[i]["num_gpus"],
                                                               result.rows[i]["tpot_ms.p99"]))
        else:
            assert answer.best is None and answer.reason
    best_rows = [r for r in result.rows if r["best"]]
    assert len(best_rows) == sum(a.best is not None for a in result.answers)
    # the higher rate needs at least as many GPUs
    gpus = [result.rows[a.best]["num_gpus"] for a in result.answers if a.best is not None]
    assert gpus == sorted(gpus)
    meta = json.loads((out / "res" / "plan.json").read_text())
    assert len(meta["answers"]) == 2 and "poisson 170 req/s" in meta["workload"]
    assert all(" serves " in a["line"] or "no answer" in a["line"] for a in meta["answers"])


def test_frontier_is_within_each_workload_point(per_rate):
    _, _, result = per_rate
    for answer in result.answers:
        in_group = [i for i in result.frontier if i in answer.rows]
        assert in_group                               # every rate has its own frontier


def test_cli_prints_a_line_per_workload(per_rate):
    scenario, out, _ = per_rate
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", scenario, "--sweep",
                           "deployment.ep_size=2,4,8", "--sweep", "workload.arrivals.rate_per_s=100,400",
                           "--constraint", "tpot_ms.p99<=40", "--out", str(out / "res"), "--no-plots",
                           "--no-progress", "--workers", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "answers    one per workload point" in proc.stdout
    assert "  workload.arrivals.rate_per_s=100: " in proc.stdout
    assert "  workload.arrivals.rate_per_s=400: " in proc.stdout
    assert "\nbest " not in proc.stdout


def test_max_rate_brackets_the_slo_boundary(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    constraints = ["tpot_ms.p99<=40"]
    answers = find_max_rates(scenario, ["deployment.ep_size=4,8"], constraints=constraints,
                             workers=1, rel_tol=0.1, out=tmp_path / "res")
    parsed = [parse_constraint(c, ["tpot_ms.p99"]) for c in constraints]
    by = {a.deployment["deployment.ep_size"]: a for a in answers}
    for a in answers:
        assert a.rate_per_s is not None and a.fails_at_per_s is not None
        assert a.rate_per_s < a.fails_at_per_s <= a.rate_per_s * 1.1 + 1e-9
        assert rejection(a.row, parsed) == ""        # meets the SLO at its rate
        assert a.fails_because                        # and says why it fails above
        meets = [r for r, ok in a.tried if ok]
        assert max(meets) == a.rate_per_s
    assert by[8].rate_per_s > by[4].rate_per_s        # twice the GPUs serve more
    # a rerun comes from the results directory's cache: same answers
    again = find_max_rates(scenario, ["deployment.ep_size=4,8"], constraints=constraints,
                           workers=1, rel_tol=0.1, out=tmp_path / "res")
    assert [a.rate_per_s for a in again] == [a.rate_per_s for a in answers]


def test_max_rate_refuses_a_swept_workload_key(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    with pytest.raises(SpecError, match=r"--sweep key \(workload.arrivals.rate_per_s\) must not be a "
                                        r"workload key with --max-rate"):
        find_max_rates(scenario, ["workload.arrivals.rate_per_s=1,2"], workers=1)
