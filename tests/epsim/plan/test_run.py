"""run_plan end to end on a small scenario: table, skipped points, choice, files, resuming,
and the local process pool against in-process execution."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.plan import InfeasibleError, run_plan
from epsim.plan.select import pareto_mask
from tests.epsim.plan_fixtures import TINY_PLAN_SCENARIO, write_tiny_scenario

SWEEP = ["deployment.ep_size=2,4,8,12", "deployment.moe_a2a_backend=deepep,none"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """One in-process run of the sweep (8 points, 2 skipped) into a results directory, at a
    load EP 2 cannot serve (its batch bound caps it near 200 req/s) while its TPOT meets the
    SLO: keep-up, not the SLO, rejects it."""
    out = tmp_path_factory.mktemp("plan")
    scenario = write_tiny_scenario(out, rate_per_s=260)
    result = run_plan(scenario, SWEEP, constraints=["tpot_ms.p99<=30"], workers=1,
                      out=out / "res", progress=False)
    return scenario, out / "res", result, (out / "res" / "results.csv").read_bytes()


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_table_rows_skipped_and_columns(planned):
    _, out, result, _ = planned
    assert len(result.rows) == 6 and len(result.skipped) == 2
    assert {s.values["deployment.ep_size"] for s in result.skipped} == {12}
    assert all("must be a multiple of gpus_per_node" in s.reason for s in result.skipped)
    assert [r["point"] for r in result.rows] == [0, 1, 2, 3, 4, 5]     # sweep order
    row = result.rows[2]
    assert row["deployment.ep_size"] == 4 and row["deployment.moe_a2a_backend"] == "deepep"
    assert row["num_gpus"] == 4 and row["cost_per_hour"] == 8.0
    assert row["throughput_tokens_per_s_per_gpu"] > 0 and row["error"] == ""
    # derived per-GPU expert memory halves as EP doubles
    assert result.rows[0]["expert_weights_gib_per_gpu"] == \
        pytest.approx(2 * result.rows[2]["expert_weights_gib_per_gpu"])
    table = read_csv(out / "results.csv")
    assert [r["point_id"] for r in table] == [r["point_id"] for r in result.rows]
    skipped = read_csv(out / "skipped.csv")
    assert [r["deployment.ep_size"] for r in skipped] == ["12", "12"]


def test_best_is_the_feasible_point_the_objectives_prefer(planned):
    _, _, result, _ = planned
    tpot = result.column("tpot_ms.p99")
    keeps_up = result.column("keep_up.ok") == 1.0
    feasible = (tpot <= 30) & keeps_up
    assert [r["feasible"] for r in result.rows] == feasible.tolist()
    assert feasible.any() and not keeps_up.all()      # keep-up rejects a point the SLO alone keeps
    gpus, tput = result.column("num_gpus"), result.column("throughput_tokens_per_s_per_gpu")
    candidates = [i for i in np.flatnonzero(feasible)]
    ttft = result.column("ttft_ms.p99")
    # the documented rule (epsim.plan.select): fewest GPUs, then the largest margin to the TPOT
    # SLO (with one bound: the lowest TPOT p99), then TPOT p99 and TTFT p99 -- not throughput
    expected = min(candidates, key=lambda i: (gpus[i], -(30 - tpot[i]) / 30, tpot[i], ttft[i]))
    assert result.best == expected and result.rows[expected]["best"]
    costs = np.stack([gpus, np.where(np.isfinite(tpot), tpot, np.inf), -tput], axis=1)
    assert result.frontier == np.flatnonzero(pareto_mask(costs)).tolist()


def test_files_written(planned):
    _, out, result, _ = planned
    meta = json.loads((out / "plan.json").read_text())
    assert meta["counts"] == {"points": 8, "valid": 6, "skipped": 2, "computed": 6, "cached": 0, "errors": 0}
    assert meta["best"]["point_id"] == result.best_row["point_id"]
    assert set(meta["files"]) == {"results.csv", "results.parquet", "skipped.csv", "pareto.png", "sweep.png"}
    for name in ("pareto.png", "sweep.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pandas as pd
    frame = pd.read_parquet(out / "results.parquet")
    assert frame["point_id"].tolist() == [r["point_id"] for r in result.rows]
    np.testing.assert_array_equal(frame["tpot_ms.p99"].to_numpy(), result.column("tpot_ms.p99"))


def test_rerun_resumes_without_recomputing(planned):
    scenario, out, _, before = planned
    again = run_plan(scenario, SWEEP, constraints=["tpot_ms.p99<=30"], workers=1, out=out, progress=False)
    assert again.num_computed == 0 and again.num_cached == 6
    assert (out / "results.csv").read_bytes() == before
    # a wider sweep computes only its new points; the cache keeps every point it has seen
    wider = run_plan(scenario, ["deployment.ep_size=2,4,8,16", "deployment.moe_a2a_backend=deepep,none"],
                     workers=1, out=out, progress=False, plots=False)
    assert wider.num_computed == 2 and wider.num_cached == 6
    assert len((out / "points.jsonl").read_text().splitlines()) == 8


def test_interrupted_cache_line_is_ignored_and_recomputed(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    out = tmp_path / "res"
    run_plan(scenario, ["deployment.ep_size=2,4"], workers=1, out=out, progress=False, plots=False)
    first_csv = (out / "results.csv").read_bytes()
    lines = (out / "points.jsonl").read_text().splitlines()
    (out / "points.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])   # cut mid-line
    second = run_plan(scenario, ["deployment.ep_size=2,4"], workers=1, out=out, progress=False, plots=False)
    assert (second.num_computed, second.num_cached) == (1, 1)
    assert (out / "results.csv").read_bytes() == first_csv


def test_process_pool_gives_the_same_table(planned, tmp_path):
    scenario, _, _, inline_csv = planned
    pooled = run_plan(scenario, SWEEP, constraints=["tpot_ms.p99<=30"], workers=2, out=tmp_path / "pool",
                      progress=False, plots=False)
    assert pooled.num_computed == 6
    assert (tmp_path / "pool" / "results.csv").read_bytes() == inline_csv


def test_seed_changes_results_and_keys(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    a = run_plan(scenario, ["deployment.ep_size=4"], workers=1, progress=False)
    b = run_plan(scenario, ["deployment.ep_size=4"], workers=1, progress=False, seed=11)
    assert a.rows[0]["point_id"] != b.rows[0]["point_id"]
    assert a.rows[0]["step_ms.p50"] != b.rows[0]["step_ms.p50"]


def test_infeasible_constraints_raise_after_writing(tmp_path):
    out = tmp_path / "res"
    with pytest.raises(InfeasibleError, match=r"closest is tpot_ms.p99<=0.5, best value [\d.]+ at "
                                              r"deployment.ep_size=8"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.ep_size=4,8"], constraints=["tpot_ms.p99<=0.5"],
                 workers=1, out=out, progress=False, plots=False)
    meta = json.loads((out / "plan.json").read_text())
    assert meta["best"] is None and meta["infeasible"].startswith("no configuration meets")
    result = run_plan(TINY_PLAN_SCENARIO, ["deployment.ep_size=4,8"], constraints=["tpot_ms.p99<=0.5"],
                      workers=1, out=out, progress=False, plots=False, require_feasible=False)
    assert result.best is None and result.num_computed == 0


def test_bad_inputs_fail_before_running(tmp_path):
    with pytest.raises(SpecError, match=r"'epsize' is not a field of deployment"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.epsize=4"], progress=False)
    with pytest.raises(SpecError, match=r"unknown metric \(p99\)"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.ep_size=4"], constraints=["p99<=3"], progress=False)
    with pytest.raises(SpecError, match=r"no valid configuration among the 2 sweep point\(s\): 2 like "
                                        r"deployment.ep_size \(3\) must divide experts"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.ep_size=3,6"], progress=False)
    with pytest.raises(SpecError, match=r"--executor \('dask'\) must be one of"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.ep_size=4"], executor="dask", progress=False)
    with pytest.raises(SpecError, match=r"--workers \(0\) must be >= 1"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.ep_size=4"], workers=0, progress=False)
    with pytest.raises(SpecError, match=r"min:deployment.moe_a2a_backend names a swept key whose values "
                                        r"are not all numbers \(deployment.moe_a2a_backend = 'deepep'\)"):
        run_plan(TINY_PLAN_SCENARIO, ["deployment.moe_a2a_backend=deepep,none"],
                 objectives=["min:deployment.moe_a2a_backend"], progress=False)


def test_model_fields_sweep_and_dict_sweeps():
    result = run_plan(TINY_PLAN_SCENARIO, {"model.num_layers": [4, 8]}, workers=1, progress=False)
    layers = result.column("layer_us.mean_over_layers")
    assert result.column("model.num_layers").tolist() == [4.0, 8.0]
    assert np.isfinite(layers).all()
    assert result.rows[0]["other_weights_gib_per_gpu"] < result.rows[1]["other_weights_gib_per_gpu"]


def test_eplb_and_elastic_columns_come_from_the_summary():
    # the failed rank is detected after 10 ms (not SGLang's 10 s) in this 1-s run; a rebalance
    # every 20 passes of a tiny model costs more than it serves (SGLang's host terms do not
    # shrink with the model), so keeping up is not asked: the columns are
    result = run_plan(TINY_PLAN_SCENARIO, {
        "workload.arrivals.rate_per_s": [150],
        "deployment.enable_eplb": [True], "deployment.ep_num_redundant_experts": [24],
        "deployment.eplb_rebalance_num_iterations": [20],
        "deployment.failures": [[], [{"at_s": 0.5, "rank": 3}]]}, workers=1, progress=False,
        overrides=["deployment.moe_dispatch_timeout_s=0.01"], keep_up=False)
    healthy, failing = result.rows
    assert healthy["eplb.num_rebalances"] >= 1 and healthy["eplb.stall_us_total"] > 0
    assert np.isnan(healthy["elastic.lost_requests"])
    assert failing["elastic.lost_requests"] >= 0 and failing["deployment.failures"] == '[{"at_s": 0.5, "rank": 3}]'


def test_layout_and_format_fields_are_swept(tmp_path):
    """tp_size, dp_size, moe_tp_size, quantization and kv_cache_dtype sweep like any field; a
    point SGLang cannot serve is skipped with its one-line reason, the others priced (TP
    attention and MoE-TP on the `none` backend: 8 GPUs each)."""
    scenario = write_tiny_scenario(tmp_path)
    result = run_plan(scenario, ["deployment.moe_a2a_backend=none",
                                 "deployment.ep_size=2,8", "deployment.tp_size=8",
                                 "deployment.dp_size=1,8", "deployment.quantization=fp8",
                                 "deployment.kv_cache_dtype=auto,fp8_e4m3"],
                      workers=1, progress=False, plots=False, require_feasible=False)
    assert len(result.rows) == 8 and not result.skipped
    assert {r["num_gpus"] for r in result.rows} == {8.0}
    by = {(r["deployment.ep_size"], r["deployment.dp_size"], r["deployment.kv_cache_dtype"]): r
          for r in result.rows}
    # MoE-TP 4 x EP 2: a quarter of each expert's weights per GPU, twice the slots
    assert by[(2, 8, "auto")]["expert_weights_gib_per_gpu"] == pytest.approx(
        by[(8, 8, "auto")]["expert_weights_gib_per_gpu"])
    # one attention group of 8 GPUs: the KV cache of every request, KV heads split
    assert by[(8, 1, "fp8_e4m3")]["kv_cache_gib_per_gpu"] == pytest.approx(
        by[(8, 1, "auto")]["kv_cache_gib_per_gpu"] / 2)
    bad = run_plan(scenario, ["deployment.tp_size=8,16"], workers=1, progress=False, plots=False,
                   require_feasible=False)
    assert [s.values["deployment.tp_size"] for s in bad.skipped] == [16]
    assert "moe_tp_size (2 = tp_size 16 / ep_size 8) must be 1 with moe_a2a_backend 'deepep'" \
        in bad.skipped[0].reason
