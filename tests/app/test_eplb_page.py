"""EPLB page (AppTest): a shipped EPLB scenario run over time shows the rebalances epsim's own
run makes, the balance and step-time series, the load heatmaps per rank and per expert, and the
rebalance-interval sweep with the best interval `epsim.plan.eplb_sweep` picks."""

from __future__ import annotations

import pytest

import epsim
from tests.app.apptest import ROOT, button, count, errors, metrics, open_page, submit

SCENARIO = ROOT / "scenarios" / "eplb_redundancy_32gpu.yaml"
SHORT = {"deployment.eplb_rebalance_num_iterations": 5, "workload.duration_s": 6.0,
         "workload.warmup_s": 1.0}


def _run(at) -> None:
    open_page(at, "eplb")
    assert at.selectbox(key="eplb_name").value == "eplb_redundancy_32gpu"
    submit(at, "Run with EPLB", _every=SHORT["deployment.eplb_rebalance_num_iterations"],
           _dur=SHORT["workload.duration_s"], _warm=SHORT["workload.warmup_s"])


def test_run_over_time_matches_epsim(app):
    _run(app)
    from epsim.report import summarize
    from epsim.sim import simulate
    summary = summarize(simulate(epsim.load_scenario(SCENARIO, {**SHORT, "deployment.enable_eplb": True})))
    eplb = summary["eplb"]
    assert eplb["num_rebalances"] >= 2
    shown = metrics(app)
    assert shown["rebalances"] == str(eplb["num_rebalances"])
    assert shown["stalled"] == f"{eplb['stall_us_total'] * 1e-6:.3f} s"
    assert shown["window balancedness after"] == f"{eplb['balancedness_after_mean']:.3f}"
    assert count(app, "vega_lite_chart") == 3            # balancedness, step time, heatmap
    events = app.dataframe[0].value                      # one row per rebalance
    assert len(events) == eplb["num_rebalances"]
    # shown to four significant digits of the column's largest value
    assert list(events["at (s)"]) == pytest.approx([e["at_s"] for e in eplb["rebalances"]], abs=1e-3)


def test_heatmap_per_expert_and_per_layer(app):
    _run(app)
    app.radio(key="eplb_per").set_value("per expert")
    app.selectbox(key="eplb_layer").set_value(0)
    app.run()
    assert not app.exception and not errors(app)
    assert count(app, "vega_lite_chart") == 3
    assert any("per expert over time" in m.value for m in app.markdown)


def test_interval_sweep_picks_epsims_best(app):
    _run(app)
    app.text_input(key="eplb_intervals").set_value("4, 12")
    app.number_input(key="eplb_sweep_dur").set_value(5.0)
    app.number_input(key="eplb_sweep_warm").set_value(1.0)
    app.number_input(key="eplb_workers").set_value(1)
    button(app, "Run interval sweep").click()
    app.run()
    assert not app.exception and not errors(app)
    from epsim.plan.eplb_sweep import sweep_rebalance_interval
    scenario = epsim.load_scenario(SCENARIO, {**SHORT, "deployment.enable_eplb": True, "workload.duration_s": 5.0})
    sweep = sweep_rebalance_interval(scenario, [4, 12])
    best, baseline = sweep.best, sweep.baseline
    if best["output_tokens_per_s_per_gpu"] > baseline["output_tokens_per_s_per_gpu"]:
        assert [s.value for s in app.success][0].startswith(f"best: rebalance every {best['interval']} forward passes")
    else:        # the app says what the scenario script says: no interval beats turning EPLB off
        assert any(w.value.startswith(f"turn EPLB off: no interval swept beats serving without it (the best, "
                                      f"every {best['interval']} forward passes") for w in app.warning)
    overloaded = [r for r in sweep.rows + [baseline] if not r["keeps_up"]]
    assert bool(overloaded) == any("do not keep up" in w.value for w in app.warning)
    assert count(app, "vega_lite_chart") == 6
    table = app.dataframe[-1].value
    assert list(table["rebalance"]) == ["every 4", "every 12", "no EPLB"]
    assert "output tokens/s per GPU" in table.columns               # human column names


def test_bad_interval_text_names_it(app):
    _run(app)
    app.text_input(key="eplb_intervals").set_value("ten")
    button(app, "Run interval sweep").click()
    app.run()
    assert not app.exception
    assert errors(app) == ["intervals ('ten') must be positive integers separated by commas, e.g. 25,50,100"]


def test_bad_upload_on_the_eplb_page(app):
    open_page(app, "eplb")
    app.radio(key="eplb_origin").set_value("upload a YAML file")
    app.run()
    app.file_uploader(key="eplb_upload").set_value(("x.yaml", b"model: Qwen3-30B-A3B\nworkload: {skew: {kind: zipf}}\n",
                                                     "application/x-yaml"))
    app.run()
    assert not app.exception
    assert errors(app) == ["x.yaml: workload.skew.alpha (missing) must be given"]


def test_changing_the_scenario_clears_the_run_and_the_sweep(app):
    # the stale-state fix: the interval sweep of the previous scenario no longer stays on screen
    _run(app)
    assert any(c.value.startswith("keep-up: ") for c in app.caption) or \
        any(w.value.startswith("keep-up: ") for w in app.warning)
    app.text_input(key="eplb_intervals").set_value("4, 12")
    app.number_input(key="eplb_sweep_dur").set_value(3.0)
    app.number_input(key="eplb_sweep_warm").set_value(1.0)
    app.number_input(key="eplb_workers").set_value(1)
    button(app, "Run interval sweep").click()
    app.run()
    assert not app.exception and not errors(app)
    assert app.success or any(w.value.startswith("turn EPLB off") for w in app.warning)
    assert count(app, "vega_lite_chart") == 6
    app.selectbox(key="eplb_name").set_value("eplb_interval_drift")
    app.run()
    assert not app.exception and not errors(app)
    assert any("scenario changed" in i.value for i in app.info)
    assert not app.success and not app.dataframe
    assert count(app, "vega_lite_chart") == 0
    assert not any(w.value.startswith("turn EPLB off") for w in app.warning)
    app.run()                                        # and it stays cleared on the next rerun
    assert not app.dataframe and count(app, "vega_lite_chart") == 0


def test_resilience_columns_match_the_plan_module(app):
    open_page(app, "eplb")
    app.number_input(key="eplb_failure_rate").set_value(1e-3)
    button(app, "Price").click()
    app.run()
    assert not app.exception and not errors(app)
    from epsim.plan.resilience import resilience_columns
    row = resilience_columns(epsim.load_scenario(SCENARIO, {"deployment.failures_per_gpu_hour": 1e-3}))
    shown = metrics(app)
    assert shown["rebalance stall"] == f"{row['rebalance_stall_s']:.2f} s"
    assert shown["interruption per GPU failure"] == f"{row['failure_interruption_s']:.1f} s"
    assert shown["goodput"] == f"{row['goodput_frac'] * 100:.2f} %"
