"""Predicted vs measured page (AppTest): uploaded real CPU (gloo) records and their profile give
the numbers `epsim.validate` gives; filters narrow them; the shipped profile and records load
by default when they ship; bad uploads show one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.profile import load_profile
from epsim.validate import validate
from tests.app.apptest import DATA, ROOT, button, count, errors, metrics, open_page

RECORDS = DATA / "gloo_records.jsonl"
PROFILE = DATA / "gloo_profile.json"


def _upload(at, records: tuple[str, bytes], profile: tuple[str, bytes]) -> None:
    at.radio(key="val_origin").set_value("upload records and a profile")
    at.run()
    at.file_uploader(key="val_records").set_value((records[0], records[1], "application/json"))
    at.file_uploader(key="val_profile").set_value((profile[0], profile[1], "application/json"))
    at.run()
    assert not at.exception, at.exception


@pytest.fixture(scope="module")
def expected():
    """What epsim.validate says about the same files."""
    return validate(load_profile(PROFILE), [RECORDS], plots=False).rows


def test_uploaded_records_match_epsim_validate(app, expected):
    open_page(app, "validation")
    _upload(app, (RECORDS.name, RECORDS.read_bytes()), (PROFILE.name, PROFILE.read_bytes()))
    assert not errors(app)
    shown = metrics(app)
    held = [r.ape for r in expected if r.split == "holdout"]
    fit = [r.ape for r in expected if r.split == "fit"]
    assert shown["records: held out + fit set"] == f"{len(held)} + {len(fit)}"
    assert shown["held-out MAPE"] == f"{np.mean(held):.1f} %"
    assert shown["fit-set MAPE (in-sample)"] == f"{np.mean(fit):.1f} %"
    assert shown["worst held-out error"] == f"{max(held):.1f} %"
    backends = sorted({r.backend for r in expected})
    assert count(app, "vega_lite_chart") == 1 + len(backends)     # scatter + curves per backend
    held_table, fit_table = app.dataframe[0].value, app.dataframe[1].value   # held out first
    assert int(held_table["records"].sum()) == len(held)
    assert int(fit_table["records"].sum()) == len(fit)
    assert "Measured on** 2x cpu (gloo), EP 2, 2026-11-29" in " ".join(i.value for i in app.info)
    key = app.dataframe[2].value                                    # the curves' short labels
    assert list(key["model"]) == sorted({r.model for r in expected})
    where = set(app.dataframe[3].value["where"])
    assert all(w.startswith("gloo_records.jsonl:") for w in where)  # no temporary paths leak


def test_filters_narrow_the_rows(app, expected):
    open_page(app, "validation")
    _upload(app, (RECORDS.name, RECORDS.read_bytes()), (PROFILE.name, PROFILE.read_bytes()))
    app.pills(key="val_f_backend").set_value(["torch"])
    app.pills(key="val_f_kind").set_value(["dispatch", "combine"])
    app.run()
    torch = [r for r in expected if r.backend == "torch" and r.kind in ("dispatch", "combine")]
    held = sum(r.split == "holdout" for r in torch)
    assert metrics(app)["records: held out + fit set"] == f"{held} + {len(torch) - held}"
    assert count(app, "vega_lite_chart") == 2
    app.pills(key="val_f_backend").set_value([])
    app.run()
    assert [w.value for w in app.warning] == ["No record matches the filters."]


def test_bad_uploads_show_one_line_errors(app):
    open_page(app, "validation")
    good_records = (RECORDS.name, RECORDS.read_bytes())
    good_profile = (PROFILE.name, PROFILE.read_bytes())
    cases = [
        (good_records, ("profile.json", b"{not json"),
         "profile.json: not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        (good_records, ("profile.json", b'{"schema": "other/9"}'),
         "profile.json: schema ('other/9') must be 'epsim.profile/1'"),
        (("records.jsonl", b"hello\n"), good_profile,
         "records (records.jsonl) must hold at least one valid record (first problem: "
         "records.jsonl:1: not valid JSON (Expecting value))"),
        (("records.jsonl", b"hello\n"), ("profile.json", b"{not json"),      # both, together
         "profile.json: not valid JSON (Expecting property name enclosed in double quotes at line 1)"
         "\n\nrecords (records.jsonl) must hold at least one valid record (first problem: "
         "records.jsonl:1: not valid JSON (Expecting value))"),
    ]
    for records, profile, message in cases:
        _upload(app, records, profile)
        assert errors(app) == [message]
        assert not app.metric


def test_shipped_profile_and_records_load_by_default(app):
    from epsim.calibrate import default_record_paths
    from epsim.profile import default_profile_path
    if not (default_record_paths() and default_profile_path().is_file()):
        pytest.skip("no measured profile and records ship in this checkout yet")
    open_page(app, "validation")
    assert app.radio(key="val_origin").value == "shipped profile and records (epsim/data)"
    assert not errors(app)
    assert int(metrics(app)["records: held out + fit set"].split()[0]) > 0
    info = " ".join(i.value for i in app.info)
    assert "Measured on** 1x NVIDIA H200, EP" in info and "2x NVIDIA H200, EP 1, 2" in info
    assert count(app, "vega_lite_chart") >= 2


def test_extrapolation_holdouts_are_judged_when_asked(app):
    """The refits wait for the button (the page shows without them), then give
    `epsim.validate.extrapolation`'s table and stay through a filter change."""
    from epsim.profile import default_profile_path
    from epsim.validate import extrapolation
    records = ROOT / "epsim" / "data" / "records" / "h200x2" / "bench_graph.jsonl.gz"   # tokens axis
    profile = default_profile_path()
    if not (records.is_file() and profile.is_file()):
        pytest.skip("no measured profile and records ship in this checkout yet")
    open_page(app, "validation")
    _upload(app, (records.name, records.read_bytes()), (profile.name, profile.read_bytes()))
    assert not errors(app) and metrics(app)
    assert not [d for d in app.dataframe if "skill" in d.value.columns]          # not yet judged
    button(app, "Judge the extrapolation hold-outs").click()
    app.run()
    assert not errors(app), errors(app)
    judged, _ = extrapolation.extrapolation([records])
    want = {(s.label, s.component): round(s.model_mape, 1) for s in extrapolation.stats(judged)}
    assert want, "the fixture must hold records on both sides of the tokens split"

    def shown():
        tables = [d.value for d in app.dataframe if "skill" in d.value.columns]
        assert len(tables) == 1
        return dict(zip(zip(tables[0]["axis"], tables[0]["component"]), tables[0]["model MAPE %"]))
    assert shown() == want
    app.pills(key="val_f_kind").set_value(["dispatch"])                    # a rerun keeps them
    app.run()
    assert shown() == want and not [b for b in app.button if b.label.startswith("Judge")]
