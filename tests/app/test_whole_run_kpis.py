"""Scenario page (AppTest): a run through the form shows the KPIs of epsim's own summary of the
same scenario, and its charts and downloads.

Kept in its own file, the last of tests/app: after this app has run the whole results page in
this process, Streamlit's testing runtime (1.67) leaves its layout stack inside the page's form,
and the pages of a later AppTest in the same process fail with "Forms cannot be nested".
"""

from __future__ import annotations

import epsim
from tests.app.apptest import ROOT, count, metrics, submit

from app.ui import fmt


def test_run_shows_kpis_charts_and_downloads_from_epsim(app):
    submit(app, "Run simulation")
    shown = metrics(app)
    # the same scenario through epsim's API gives the numbers the page shows
    from epsim.report import summarize
    from epsim.sim import simulate
    summary = summarize(simulate(epsim.load_scenario(ROOT / "scenarios" / "default.yaml")))
    assert shown["throughput / GPU"] == f"{summary['throughput_tokens_per_s_per_gpu']:.0f} tok/s"
    assert shown["balancedness (mean/max)"] == f"{summary['balancedness']:.3f}"
    serving = summary["serving"]          # epsim.report.serving's numbers, as the CLI says them
    assert shown["served / offered (req/s)"] == f"{serving['served_rps']:.1f} / {serving['offered_rps']:.1f}"
    assert shown["finished in the window"] == f"{serving['finished_rps']:.1f} req/s"
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        for q in ("p50", "p90", "p99", "mean"):
            assert shown[f"{label} {q}"] == fmt(summary[name][q], ".2f", " ms")
    assert summary["ttft_ms"]["count"] > 0 and shown["TTFT p50"].endswith(" ms")
    # TTFT and TPOT CDFs, provenance bands, per layer, per rank, step time
    assert count(app, "vega_lite_chart") == 6
    # where the numbers come from: the same line as summary.json's, and the band per part
    info = " ".join(i.value for i in app.info)
    assert summary["provenance"]["line"] in info and "device time + host overhead" in info
    from app.pages.scenario import provenance_frame
    frame = provenance_frame(summary, {f"{p}_us": [100.0] for p in ("attention", "dispatch",
                                                                    "experts", "combine")})
    assert list(frame["part"]) == ["attention", "dispatch", "experts", "combine"]
    banded = frame.dropna()
    assert len(banded) and ((banded["p10 µs"] < 100.0) & (banded["p90 µs"] > 100.0)).all()
    assert [b.label for b in app.get("download_button")] == ["summary.json", "timeseries.csv"]
    assert "Results: default" in [s.value for s in app.subheader]
