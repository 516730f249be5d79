"""A plan's results.csv read back (`epsim.plan.results`): the same rows and the same choice as
`run_plan` made, new constraints without simulating again, clear errors for other tables."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from epsim.errors import SpecError
from epsim.plan import run_plan
from epsim.plan.results import choose, load_results, read_rows

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "default.yaml"
SWEEPS = ["deployment.ep_size=2,4,8", "deployment.moe_a2a_backend=torch,deepep"]
OVERRIDES = ["workload.duration_s=2", "workload.warmup_s=0.5"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    result = run_plan(SCENARIO, SWEEPS, overrides=OVERRIDES, constraints=["tpot_ms.p99<=1e6"],
                      out=out, workers=1, progress=False, plots=False, require_feasible=False)
    return out, result


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_rows_round_trip(planned):
    out, result = planned
    rows, columns, keys = read_rows(out / "results.csv")
    assert columns == result.columns and keys == result.keys
    assert len(rows) == len(result.rows) == 6
    for got, want in zip(rows, result.rows):
        assert all(_same(got[c], want[c]) for c in columns), [c for c in columns if not _same(got[c], want[c])]


def test_load_results_chooses_as_run_plan(planned):
    out, result = planned
    loaded = load_results(out, constraints=["tpot_ms.p99<=1e6"])
    assert loaded.best == result.best and loaded.frontier == result.frontier
    assert [r["feasible"] for r in loaded.rows] == [r["feasible"] for r in result.rows]


def test_new_constraints_match_a_new_run_plan(planned):
    out, result = planned
    values = sorted(r["throughput_tokens_per_s_per_gpu"] for r in result.rows)
    bound = values[len(values) // 2]                       # half the points meet it
    constraints = [f"throughput_tokens_per_s_per_gpu>={bound!r}"]
    objectives = ["min:num_gpus", "min:tpot_ms.p99"]
    fresh = run_plan(SCENARIO, SWEEPS, overrides=OVERRIDES, constraints=constraints, objectives=objectives,
                     out=out, workers=1, progress=False, plots=False, require_feasible=False)
    assert fresh.num_computed == 0                         # all from the results directory
    loaded = load_results(out / "results.csv", constraints=constraints, objectives=objectives)
    assert loaded.best == fresh.best
    assert [r["feasible"] for r in loaded.rows] == [r["feasible"] for r in fresh.rows]
    nothing = choose(*read_rows(out / "results.csv"), constraints=["tpot_ms.p99<=0"])
    assert nothing.best is None and nothing.infeasible.startswith(
        ("no configuration meets all constraints", "no configuration that keeps up meets all constraints"))


@pytest.mark.parametrize("text, message", [
    ("a,b\n1,2\n", r"t.csv: columns \(point, point_id, num_gpus, error missing\) must include"),
    ("point,point_id,num_gpus,error\n", r"t.csv: rows \(none\) must hold at least one sweep point"),
    ("point,point_id,num_gpus,error\n0,x,8\n", r"t.csv:2: cells \(3\) must match the header's 4 columns"),
    ("point,point_id,num_gpus,error\n0,x,eight,\n", r"t.csv:2: num_gpus \('eight'\) must be a number"),
])
def test_bad_tables_fail_with_one_line(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        load_results(path)


def test_unknown_metric_is_named(planned):
    out, _ = planned
    with pytest.raises(SpecError, match=r"--constraint \('tpot<=3'\) names an unknown metric \(tpot\)"):
        load_results(out, constraints=["tpot<=3"])
