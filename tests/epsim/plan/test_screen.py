"""The analytic screen, two-tier plans and fleet sizing (epsim.plan.screen, .tiers, .fleet) and
the KV-cache transfer component."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from epsim.cost.kv_transfer import kv_bytes_per_request, kv_transfer
from epsim.errors import SpecError
from epsim.plan import run_plan
from epsim.plan.answers import answer_line
from epsim.plan.fleet import size_fleet
from epsim.plan.screen import screen_metrics
from epsim.report.summary import summarize
from epsim.sim import simulate
from epsim.spec import scenario_from_dict
from epsim.zoo import get_model
from tests.epsim.plan_fixtures import TINY_PLAN_SCENARIO, write_tiny_scenario


def tiny(**workload):
    data = json.loads(json.dumps(TINY_PLAN_SCENARIO))
    data["workload"].update(workload)
    return scenario_from_dict(data)


def test_screen_keeps_up_below_capacity_and_not_above():
    low, high = screen_metrics(tiny()), screen_metrics(tiny(arrivals={"kind": "poisson",
                                                                       "rate_per_s": 1e6}))
    assert low["keep_up"] == 1.0 and high["keep_up"] == 0.0
    assert high["ttft_ms"] == np.inf and high["requests_per_s"] < 1e6
    # keeping up, the instance serves its offered load: 170 req/s x 20 output tokens on 8 GPUs
    assert low["output_tokens_per_s_per_gpu"] == pytest.approx(170 * 20 / 8)
    more = screen_metrics(tiny(arrivals={"kind": "poisson", "rate_per_s": 2000}))
    assert more["tpot_ms"] >= low["tpot_ms"] and more["running_per_rank"] > low["running_per_rank"]


def test_steady_decode_batch_solves_littles_law_whatever_the_batch_limit():
    # near capacity a rank's batch grows almost one for one with its step time, where iterating
    # B <- lam * O * t(B) from the limit converges slowly: the answer must not depend on a limit
    # that does not bind, and must be the least whole batch b with lam * O * t(b) <= b
    from epsim.sim.steady import steady_model
    rate = 0.9 * _max_keep_up_rate(cap=64)
    states = []
    for cap in (64, 128, 256):
        sc = tiny(arrivals={"kind": "poisson", "rate_per_s": rate})
        sc = sc.model_copy(update={"deployment": sc.deployment.model_copy(
            update={"max_running_requests": cap})})
        model = steady_model(sc)
        s = model.steady(rate)
        assert s.keep_up and s.running_per_rank < 64
        b = math.ceil(s.running_per_rank)
        needed = lambda n: model.rate_per_rank * model.output_len * model.decode_s(n)  # noqa: E731
        assert s.tpot_s == model.decode_s(b) and s.running_per_rank == pytest.approx(needed(b))
        assert needed(b) <= b and needed(b - 1) > b - 1
        states.append((s.tpot_s, s.running_per_rank))
    assert states[0] == states[1] == states[2]


def _max_keep_up_rate(cap: int) -> float:
    """The highest arrival rate the tiny decode instance keeps up with at batch limit `cap`."""
    from epsim.plan.screen import max_rate
    from epsim.sim.steady import steady_model
    sc = tiny()
    sc = sc.model_copy(update={"deployment": sc.deployment.model_copy(
        update={"max_running_requests": cap})})
    return max_rate(steady_model(sc), lambda s: s.keep_up, 1e6)[0]


def test_screen_tracks_the_simulated_steady_decode_step():
    # a decode instance that reaches its steady batch within the run (outputs of 20 tokens)
    sc = tiny(duration_s=3.0, warmup_s=1.0, arrivals={"kind": "poisson", "rate_per_s": 800})
    screen = screen_metrics(sc)
    sim = summarize(simulate(sc))
    assert screen["keep_up"] == 1.0 and sim["keep_up"]["ok"]
    assert screen["tpot_ms"] == pytest.approx(sim["tpot_ms"]["mean"], rel=0.05)
    assert screen["throughput_tokens_per_s_per_gpu"] == pytest.approx(
        sim["throughput_tokens_per_s_per_gpu"], rel=0.05)


def test_screen_needs_a_mean_rate():
    data = json.loads(json.dumps(TINY_PLAN_SCENARIO))
    data["workload"]["arrivals"] = {"kind": "trace", "path": "x.jsonl"}
    with pytest.raises((SpecError, Exception)):
        screen_metrics(scenario_from_dict(data))


SWEEP = ["deployment.ep_size=2,4,8", "deployment.max_running_requests=4,8,16,32,64",
         "workload.arrivals.rate_per_s=100,2000"]


def test_two_tier_plan_simulates_fewer_points_and_writes_screen_columns(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    common = dict(constraints=["tpot_ms.p99<=40"], workers=1, progress=False, plots=False,
                  require_feasible=False)
    two = run_plan(scenario, SWEEP, screen=True, out=tmp_path / "two", **common)
    tiers = [row["tier"] for row in two.rows]
    assert 0 < tiers.count("simulated") < len(two.rows) == 30
    assert two.num_computed == tiers.count("simulated")
    assert np.isfinite(two.column("screen.tpot_ms")).all()
    unsimulated = [r for r in two.rows if r["tier"] == "screened"]
    assert all(np.isnan(r["tpot_ms.p99"]) and not r["feasible"] for r in unsimulated)
    for answer in two.answers:                          # the answer is a simulated point
        assert answer.best is None or two.rows[answer.best]["tier"] == "simulated"
    header = (tmp_path / "two" / "results.csv").read_text().splitlines()[0]
    assert "screen.tpot_ms" in header and "tier" in header
    assert (tmp_path / "two" / "screen.jsonl").is_file()
    # resumable: a second run screens nothing and simulates nothing anew
    again = run_plan(scenario, SWEEP, screen=True, out=tmp_path / "two", **common)
    assert again.num_computed == 0
    full = run_plan(scenario, SWEEP, out=tmp_path / "two", **common)    # the rest, simulated
    assert [a.best for a in full.answers] == [a.best for a in two.answers]


def test_warm_start_begins_decode_points_at_the_screens_steady_batch(tmp_path):
    # 400-token answers at 120 and 140 req/s on EP 8: started empty, 3 s end while the batch
    # still fills; started at the screen's steady batch (~100 and ~120 a rank), each window is
    # steady. Both batches lie between the attention kernel's wave edges (66 -> 67 and
    # 132 -> 133 a rank: 4 KV heads' CTAs per sequence over H200's 264 slots), where the
    # screen's least fixed point is the one a run settles at (test_keep_up's comment says
    # why 100 req/s is not); at 50 req/s the batch is small enough that a filling run's TPOT
    # is within 10 % of the steady one's (step 8.9 ms at 8 a rank, 10.1 at 26)
    data = json.loads(json.dumps(TINY_PLAN_SCENARIO))
    data["deployment"]["max_running_requests"] = 256
    data["workload"].update(output_len={"kind": "fixed", "value": 400}, duration_s=3.0,
                            warmup_s=1.0)
    sweep = ["workload.arrivals.rate_per_s=120,140"]
    cold = run_plan(data, sweep, workers=1, progress=False, screen=True)
    warm = run_plan(data, sweep, workers=1, progress=False, screen=True, warm_start=True,
                    out=tmp_path / "warm")
    for c, w in zip(cold.rows, warm.rows):
        assert c["initial_running_per_rank"] == 0.0 and c["keep_up.settled"] == 0.0
        assert w["initial_running_per_rank"] == round(w["screen.running_per_rank"]) > 0
        assert w["keep_up.settled"] == 1.0 and w["keep_up.ok"] == 1.0
        assert w["tpot_ms.mean"] == pytest.approx(w["screen.tpot_ms"], rel=0.05)
        assert c["tpot_ms.mean"] < 0.9 * w["tpot_ms.mean"]
    assert "not steady" in answer_line(cold, cold.answers[1])
    assert "not steady" not in answer_line(warm, warm.answers[1])
    # the CLI flag reaches the same plan (its results directory holds the simulations)
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", write_tiny_scenario(tmp_path),
                           "--sweep", "workload.arrivals.rate_per_s=140", "--warm-start",
                           "--set", "deployment.max_running_requests=256",
                           "--set", "workload.output_len.value=400", "--set", "workload.duration_s=3",
                           "--set", "workload.warmup_s=1", "--no-progress", "--no-plots",
                           "--out", str(tmp_path / "cli")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    row = next(csv.DictReader((tmp_path / "cli" / "results.csv").open()))
    assert float(row["initial_running_per_rank"]) == warm.rows[1]["initial_running_per_rank"]


def test_kv_transfer_bytes_follow_the_kv_layout():
    qwen = get_model("Qwen3-235B-A22B")     # GQA: 4 KV heads x 128 dims, K and V, BF16
    assert kv_bytes_per_request(qwen, 1000) == 1000 * qwen.num_layers * 4 * 128 * 2 * 2
    tr = kv_transfer(qwen, scenario_from_dict(TINY_PLAN_SCENARIO).cluster, "mooncake", 2048)
    assert tr.source == "datasheet"
    assert tr.transfer_us == pytest.approx(tr.latency_us + tr.bytes_per_request / (tr.gbps * 1e3))
    with pytest.raises(SpecError, match=r"kv transfer path \('tcp'\) must be one of"):
        kv_transfer(qwen, scenario_from_dict(TINY_PLAN_SCENARIO).cluster, "tcp", 2048)


FLEET_SLO = ["ttft_ms.p99<=1000", "tpot_ms.p99<=40"]


def test_fleet_sizes_both_pools_and_verifies_them_by_simulation(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    fleet = size_fleet(scenario, ["deployment.ep_size=2,4,8"], FLEET_SLO, workers=1,
                       out=tmp_path / "fleet", overrides=["workload.arrivals.rate_per_s=1000"])
    assert fleet.prefill.instances >= 1 and fleet.decode.instances >= 1
    assert fleet.num_gpus == (fleet.prefill.instances * fleet.prefill.ep_size
                              + fleet.decode.instances * fleet.decode.ep_size)
    assert set(fleet.verified) == {"prefill", "decode"} and fleet.rounds >= 1
    if fleet.meets_slo:
        assert fleet.verified["decode"]["tpot_ms.p99"] <= 40
        assert fleet.request_ttft_p99_ms <= 1000
    saved = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    assert saved["num_gpus"] == fleet.num_gpus and saved["kv_transfer"]["source"] == "datasheet"
    assert (tmp_path / "fleet" / "pools.csv").read_text().count("\n") == 7   # header + 6 options


def test_fleet_bad_input_is_one_line(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    with pytest.raises(SpecError, match=r"--fleet needs --constraint 'ttft_ms.p99<=MS'"):
        size_fleet(scenario, ["deployment.ep_size=2,4"], ["tpot_ms.p99<=40"], verify=False)
    with pytest.raises(SpecError, match=r"--sweep key \(workload.arrivals.rate_per_s\) must be a "
                                        r"deployment\.\* key"):
        size_fleet(scenario, ["workload.arrivals.rate_per_s=1,2"], FLEET_SLO, verify=False)
    out = subprocess.run([sys.executable, "-m", "epsim.cli", "plan", scenario, "--fleet",
                          "--constraint", "tpot_ms.p99<=40"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
