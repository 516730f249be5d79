"""The choosing rule (`epsim.plan.select`): among points that keep up and meet the SLO with their
p10-p90 band, fewest GPUs, then the largest margin to the latency SLO -- never throughput per
GPU at a fixed offered load; a point whose band crosses a bound is marginal, not feasible; the
rule is printed with the answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from epsim.plan import run_plan
from epsim.plan.results import choose
from epsim.plan.select import DEFAULT_OBJECTIVES, parse_constraint, rule_text, parse_objective
from epsim.plan.uncertainty import band, step_band
from tests.epsim.plan_fixtures import write_tiny_scenario


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    """The same EP size over two backends, both serving the tiny scenario's load."""
    out = tmp_path_factory.mktemp("rule")
    scenario = write_tiny_scenario(out)
    return run_plan(scenario, ["deployment.moe_a2a_backend=mooncake,deepep"], constraints=["tpot_ms.p99<=1000"],
                    workers=1, progress=False, plots=False, require_feasible=False)


def test_equal_gpus_go_to_the_lower_latency_not_the_higher_throughput(backends):
    result = backends
    rows = result.rows
    assert all(r["feasible"] for r in rows) and rows[0]["num_gpus"] == rows[1]["num_gpus"]
    by_tpot = min(range(2), key=lambda i: rows[i]["tpot_ms.p99"])
    assert result.best == by_tpot
    # margin to the SLO is what ranks them: (bound - value) / bound
    for row in rows:
        assert row["slo_margin"] == pytest.approx((1000 - row["tpot_ms.p99"]) / 1000)
    # the old rule (throughput per GPU) would be a different criterion; when it disagrees, the
    # latency wins -- checked on the same rows with the throughput of the other point raised
    rigged = [dict(r) for r in rows]
    other = 1 - by_tpot
    rigged[other]["throughput_tokens_per_s_per_gpu"] = rigged[by_tpot]["throughput_tokens_per_s_per_gpu"] * 1.07
    again = choose(rigged, result.columns, result.keys, ["tpot_ms.p99<=1000"])
    assert again.best == by_tpot


def test_rule_is_printed_with_the_answer(backends, tmp_path):
    import subprocess
    import sys
    scenario = write_tiny_scenario(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", scenario, "--sweep",
                           "deployment.moe_a2a_backend=mooncake,deepep", "--constraint", "tpot_ms.p99<=1000",
                           "--workers", "1", "--no-progress", "--no-plots"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rule = [line for line in proc.stdout.splitlines() if line.startswith("rule ")]
    assert rule and "fewest GPUs, then the largest margin to tpot_ms.p99<=1000" in rule[0]
    assert "not by throughput per GPU" in rule[0]
    frontier = proc.stdout.split("frontier", 1)[1]
    assert "status" in frontier.splitlines()[1]        # the frontier marks each point's status


def test_rule_text_names_a_user_objective():
    known = ["num_gpus", "cost_per_hour", "tpot_ms.p99", "ttft_ms.p99", "slo_margin"]
    objectives = [parse_objective(t, known) for t in DEFAULT_OBJECTIVES]
    text = rule_text(objectives, [parse_constraint("tpot_ms.p99<=50", known)], keep_up=True)
    assert text.startswith("among the points that keep up")
    assert "the largest margin to tpot_ms.p99<=50" in text
    assert rule_text([parse_objective("min:cost_per_hour", known)], [], keep_up=False).startswith(
        "among the points that meet every constraint with their p10-p90 band: lowest cost per hour")


def _row(point: int, gpus: float, tpot: float, p10: float, p90: float) -> dict:
    return {"point": point, "point_id": str(point), "deployment.ep_size": int(gpus), "num_gpus": gpus,
            "error": "", "tpot_ms.p99": tpot, "ttft_ms.p99": 100.0, "keep_up.ok": 1.0,
            "band.p10_ratio": p10, "band.p90_ratio": p90, "band.spread_share": 0.9,
            "throughput_tokens_per_s_per_gpu": 1000.0}


COLUMNS = ["point", "point_id", "deployment.ep_size", "num_gpus", "tpot_ms.p99", "ttft_ms.p99",
           "keep_up.ok", "band.p10_ratio", "band.p90_ratio", "band.spread_share",
           "throughput_tokens_per_s_per_gpu", "error", "feasible", "pareto", "best"]


def test_a_band_crossing_the_bound_is_marginal_not_feasible():
    rows = [_row(0, 8, 48.0, 0.9, 1.1),        # 48 ms, band up to 52.8: crosses 50
            _row(1, 16, 40.0, 0.9, 1.1)]       # 40 ms, band up to 44: meets 50 with its band
    result = choose(rows, COLUMNS, ["deployment.ep_size"], ["tpot_ms.p99<=50"])
    assert [r["marginal"] for r in result.rows] == [True, False]
    assert [r["feasible"] for r in result.rows] == [False, True]
    assert result.best == 1                    # more GPUs, but it surely meets the SLO
    assert band(result.rows[0], "tpot_ms.p99") == pytest.approx((43.2, 52.8))
    alone = choose(rows[:1], COLUMNS, ["deployment.ep_size"], ["tpot_ms.p99<=50"])
    assert alone.best is None
    assert "1 marginal" in alone.infeasible and "band 43.2-52.8 crosses it: marginal" in alone.infeasible


def test_step_band_weights_each_component_by_its_share():
    components = [{"share": 0.6, "p10_ratio": 0.9, "p90_ratio": 1.2},
                  {"share": 0.4, "p10_ratio": None, "p90_ratio": None}]    # datasheet: no spread
    got = step_band(components)
    assert got["band.p10_ratio"] == pytest.approx(0.6 * 0.9 + 0.4)
    assert got["band.p90_ratio"] == pytest.approx(0.6 * 1.2 + 0.4)
    assert got["band.spread_share"] == pytest.approx(0.6)
    assert all(math.isnan(v) for v in step_band([]).values())
    # a throughput's band runs the other way
    row = {"throughput_tokens_per_s_per_gpu": 1000.0, "band.p10_ratio": 0.8, "band.p90_ratio": 1.25}
    assert band(row, "throughput_tokens_per_s_per_gpu") == pytest.approx((800.0, 1250.0))
    assert band(row, "hbm_headroom_gib") is None
    assert np.isnan(choose([_row(0, 8, math.nan, 0.9, 1.1)], COLUMNS, ["deployment.ep_size"],
                           ["tpot_ms.p99<=50"]).rows[0]["slo_margin"])
