"""Held to silicon page (AppTest): the recorded whole-set run shows the headline `epsim validate
--silicon` computes from the same file, the filters narrow the predictions, the named-gap tables
are the generated docs', and a bad upload is one line."""

from __future__ import annotations

import gzip
import json

from app import silicon_data
from epsim.validate.silicon import report
from tests.app.apptest import errors, metrics, open_page


def _recorded() -> list[dict]:
    return json.loads(gzip.decompress(silicon_data.RECORDED.read_bytes()))["rows"]


def test_recorded_run_shows_the_headline_of_the_record(app):
    open_page(app, "silicon")
    assert not errors(app), errors(app)
    entries = _recorded()
    ours = [e for e in entries if report.status(e, "epsim") == "predicted"]
    both = [e for e in ours if report.status(e, "peer") == "predicted"]
    shown = metrics(app)
    assert shown["epsim predicts"] == f"{len(ours)} of {len(entries)}"
    assert shown["TPOT MAPE, rows both predict"] == f"{report.errors(both, 'epsim', 'tpot_ms')[1]:.1f} %"
    assert shown["TTFT MAPE, rows both predict"] == f"{report.errors(both, 'epsim', 'ttft_ms')[1]:.1f} %"
    markdown = "\n".join(m.value for m in app.markdown)
    assert "gaps" in entries[0], "the recorded run predates the named gaps: re-record it"
    assert "\n".join(report.gaps_table(entries)) in markdown
    assert "\n".join(report.targets_table(entries)) in markdown
    table = app.dataframe[0].value
    predictions = sum(report.status(e, who) in ("predicted", "approximated")
                      for e in entries for who in ("epsim", "peer"))
    assert len(table) == predictions


def test_filters_narrow_the_predictions(app):
    open_page(app, "silicon")
    pills = next(p for p in app.get("button_group") if p.key == "sil_f_system")
    pills.set_value(["h200_sxm"]).run()
    assert not app.exception and not errors(app)
    table = app.dataframe[0].value
    assert set(table["system"]) == {"h200_sxm"}
    assert len(table) == sum(report.status(e, who) in ("predicted", "approximated")
                             for e in _recorded() if e["bucket"]["system"] == "h200_sxm"
                             for who in ("epsim", "peer"))


def _upload(at, name: str, data: bytes) -> None:
    at.radio(key="sil_origin").set_value("upload a run")
    at.run()
    at.file_uploader(key="sil_upload").set_value((name, data, "application/json"))
    at.run()
    assert not at.exception, at.exception


def test_an_uploaded_run_shows_its_own_rows(app):
    open_page(app, "silicon")
    # a run made before epsim named its gaps: the page says so instead of tabling none
    entries = [{k: v for k, v in e.items() if k != "gaps"} for e in _recorded()
               if e["bucket"]["system"] == "b300_sxm"]
    _upload(app, "b300.json.gz", gzip.compress(json.dumps({"command": "epsim validate --silicon b300.csv",
                                                           "peer": None, "rows": entries}).encode()))
    assert not errors(app), errors(app)
    ours = sum(report.status(e, "epsim") == "predicted" for e in entries)
    assert metrics(app)["epsim predicts"] == f"{ours} of {len(entries)}"
    assert metrics(app)["the peer predicts"] == "not run"
    assert set(app.dataframe[0].value["system"]) == {"b300_sxm"}
    assert any("carry no named gaps" in c.value for c in app.caption)


def test_bad_upload_is_one_line(app):
    open_page(app, "silicon")
    for name, data, message in (
            ("rows.json", b"{not json", "rows.json: silicon rows (the JSON of `epsim validate --silicon "
                                        "--json`, or its silicon_rows.json.gz) must be JSON (line 1: "),
            ("rows.json", b'{"rows": []}', "must be a JSON object with a non-empty 'rows' list"),
            ("rows.json", b'{"rows": [{"id": 1}]}', "rows[0] must be a row entry with 'measured'"),
            ("rows.json.gz", b"not gzip", "must be a valid gzip file")):
        _upload(app, name, data)
        shown = errors(app)
        assert len(shown) == 1 and message in shown[0] and "\n" not in shown[0], shown
        assert not app.metric
