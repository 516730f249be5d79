"""Compare page (AppTest): two runs of the default scenario, Mooncake EP against DeepEP, shown
with the deltas and the why line `epsim.report.compare` gives for the same two runs; a bad
change line is one error."""

from __future__ import annotations

import epsim
from epsim.report import summarize
from epsim.report.compare import comparison
from epsim.sim import simulate
from tests.app.apptest import ROOT, button, errors, open_page


def test_default_comparison_is_epsims(app):
    open_page(app, "compare")
    button(app, "Compare").click()
    app.run()
    assert not app.exception, app.exception
    assert not errors(app), errors(app)
    runs = [summarize(simulate(epsim.load_scenario(ROOT / "scenarios" / "default.yaml",
                                                   {"deployment.moe_a2a_backend": backend})))
            for backend in ("mooncake", "deepep")]
    expected = comparison(*runs)
    assert [s.value for s in app.success] == [f"Why: {expected['why']}"]
    metrics = app.dataframe[0].value
    tpot = metrics[metrics[""] == "TPOT p99"].iloc[0]
    from epsim.report.compare import cell
    row = next(r for r in expected["metrics"] if r["label"] == "TPOT p99")
    assert (tpot["A"], tpot["B"]) == (cell(row["a"]), cell(row["b"]))
    layer = app.dataframe[1].value
    assert list(layer[""]) == [r["label"] for r in expected["layer_us"]]


def test_bad_change_is_one_line(app):
    open_page(app, "compare")
    app.text_area(key="cmp_b_changes").set_value("deployment.moe_a2a_backend")
    app.run()
    assert errors(app) == ["--set ('deployment.moe_a2a_backend') must look like key.path=value"]
