"""EPLB page (AppTest): a shipped EPLB scenario run over time shows the rebalances epsim's own
run makes, the balance and step-time series, the load heatmaps per rank and per expert, and the
rebalance-interval sweep with the best interval `epsim.sim.eplb_sweep` picks."""

from __future__ import annotations

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
    assert list(events["at (s)"]) == [e["at_s"] for e in eplb["rebalances"]]


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
    from epsim.sim.eplb_sweep import sweep_rebalance_interval
    scenario = epsim.load_scenario(SCENARIO, {**SHORT, "deployment.enable_eplb": True, "workload.duration_s": 5.0})
    best = sweep_rebalance_interval(scenario, [4, 12]).best
    assert [s.value for s in app.success][0].startswith(f"best: rebalance every {best['interval']} forward passes")
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
