"""Bad or partial records: every problem is reported with the file and line, never silently."""

from __future__ import annotations

import json

import pytest

from epsim.calibrate import Holdout, RecordWarning, calibrate, load_records
from epsim.calibrate.build import CalibrationWarning
from epsim.errors import RecordError
from epsim.records import write_records
from tests.epsim.calibrate_fixtures import synthetic_records


@pytest.fixture
def lines():
    """JSON lines of good torch records at the fit-set token counts."""
    recs = synthetic_records(tokens=(1, 4, 16, 64, 256), skews=({"kind": "uniform"},))
    return [r.to_json() for r in recs]


def _write(tmp_path, lines, name="r.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _edit(line: str, **changes) -> str:
    data = json.loads(line)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data)


def test_nan_timing_is_skipped_with_file_and_line(tmp_path, lines):
    lines[2] = _edit(lines[2], median_us=float("nan"))           # json.dumps writes NaN
    path = _write(tmp_path, lines)
    with pytest.warns(RecordWarning, match=rf"{path.name}:3: median_us \(nan\) must be a finite"):
        records, files = load_records([path])
    assert len(records) == len(lines) - 1 and files[0].num_records == len(lines) - 1
    with pytest.raises(RecordError, match=rf"{path.name}:3: median_us \(nan\)"):
        load_records([path], strict=True)


def test_missing_field_names_the_line_and_field(tmp_path, lines):
    lines[4] = _edit(lines[4], kind=None)
    path = _write(tmp_path, lines)
    with pytest.raises(RecordError, match=rf"{path.name}:5: .*kind"):
        calibrate([path], strict=True)


def test_times_in_wrong_units_are_skipped(tmp_path, lines):
    lines[1] = _edit(lines[1], median_us=0.0012, p10_us=0.001, p90_us=0.0013)   # seconds
    path = _write(tmp_path, lines)
    with pytest.warns(RecordWarning, match=rf"{path.name}:2: median_us \(0.0012\) must be >= 0.5 µs"):
        records, _ = load_records([path])
    assert all(r.line != 2 for r in records)


def test_counts_in_wrong_units_are_skipped(tmp_path, lines):
    data = json.loads(lines[0])
    lines[0] = _edit(lines[0], expert_tokens_per_rank=[v * 4096 for v in data["expert_tokens_per_rank"]])
    path = _write(tmp_path, lines)
    with pytest.warns(RecordWarning, match=rf"{path.name}:1: token-expert pairs .* must be <= "
                                           rf"ep_size x tokens x top_k"):
        load_records([path])


def test_missing_counts_skip_the_record_for_the_fit(tmp_path, lines):
    first_dispatch = next(i for i, l in enumerate(lines) if json.loads(l)["kind"] == "dispatch")
    lines[first_dispatch] = _edit(lines[first_dispatch], send_tokens_per_rank=[],
                                  recv_tokens_per_rank=[])
    path = _write(tmp_path, lines)
    with pytest.warns(RecordWarning, match=rf"{path.name}:{first_dispatch + 1}: "
                                           rf"send_tokens_per_rank \(empty\) must hold ep_size"):
        cal = calibrate([path])
    assert cal.fits["torch/dispatch"].residuals()["num_records"] == 9


def test_one_backend_absent_is_warned(tmp_path, lines):
    path = _write(tmp_path, lines)
    with pytest.warns(CalibrationWarning, match=r"backend 'mooncake': no records in .*r.jsonl"):
        cal = calibrate([path], backends=["torch", "mooncake"])
    assert not any(k.startswith("mooncake/") for k in cal.profile.components)


def test_nothing_fittable_is_an_error(tmp_path, lines):
    path = _write(tmp_path, [l for l in lines if json.loads(l)["num_tokens_per_rank"] == 1])
    with pytest.raises(RecordError, match=r"hold no dispatch, combine, experts or rebalance timing "
                                          r"in the fit set of holdout 'tokens=1'"):
        calibrate([path], holdout=Holdout.parse("tokens=1"))
    with pytest.raises(RecordError, match=r"records \(none given\) must name"):
        calibrate([])


def test_records_from_two_gpus_are_refused(tmp_path, lines):
    other = _edit(lines[0], provenance={"device": "2x NVIDIA H100", "hardware": "H100"})
    path = _write(tmp_path, lines + [other])
    from epsim.errors import ProfileError
    with pytest.raises(ProfileError, match=r"records come from several GPUs \(\['H100', 'H200'\]\)"):
        calibrate([path])


def test_rebalance_and_p2p_records_fit_any_rebalance(tmp_path, lines):
    base = json.loads(lines[0])
    prov = base["provenance"]
    extra = []
    for num_bytes, us in ((1 << 20, 30.0), (16 << 20, 70.0), (256 << 20, 700.0)):
        extra.append(json.dumps({"kind": "p2p_copy", "backend": "p2p", "ep_size": 2,
                                 "num_tokens_per_rank": 0, "hidden_size": 0, "bytes": num_bytes,
                                 "median_us": us, "provenance": prov}))
    expert = 3 * 4096 * 1536 * 2.0
    for moved, layers in ((4, 1), (16, 2), (64, 4), (8, 4)):
        link = moved * expert
        us = 500.0 + 20.0 * layers + link * 1e-3 / 380.0 + 26.0 * moved
        extra.append(json.dumps({
            "kind": "rebalance", "backend": "torch", "ep_size": 2, "num_tokens_per_rank": 0,
            "hidden_size": 4096, "num_layers": layers, "bytes": 2 * link, "median_us": us,
            "extra": {"send_bytes_per_rank": [link, link], "recv_bytes_per_rank": [link, link],
                      "transfers_per_rank": [moved, moved]}, "provenance": prov}))
    extra.append(json.dumps({"kind": "rebalance", "backend": "torch", "ep_size": 2,
                             "num_tokens_per_rank": 0, "hidden_size": 4096, "median_us": 900.0,
                             "provenance": prov}))
    path = _write(tmp_path, lines + extra)
    with pytest.warns(RecordWarning, match=rf"{path.name}:{len(lines) + len(extra)}: "
                                           rf"extra.send_bytes_per_rank \(missing\)"):
        comp = calibrate([path]).profile.components["any/rebalance"]
    assert comp.params["nvlink_gbps"] <= 450.0 and comp.residuals["num_records"] == 7
    assert comp.params["base_us"] == pytest.approx(500.0, rel=0.25)
    assert comp.params["nvlink_latency_us"] == pytest.approx(26.0, rel=0.25)


def test_write_and_read_roundtrip_keeps_line_numbers(tmp_path):
    recs = synthetic_records(tokens=(1,), skews=({"kind": "uniform"},))
    path = tmp_path / "r.jsonl"
    write_records(recs, path, append=False)
    loaded, files = load_records([path])
    assert [s.line for s in loaded] == list(range(1, len(recs) + 1))
    assert [s.record for s in loaded] == recs and files[0].num_records == len(recs)


def test_merged_passes_name_their_statistics_and_clamp_nothing(lines):
    """Three passes of one point: the merged record holds the medians of the passes' median,
    p10 and p90 (ordered without any clamping); the mean of the pass medians, which the fit and
    validation use, is carried under its own name and may lie outside that band."""
    from epsim.calibrate.inputs import SourcedRecord, merge_passes
    from epsim.records import MeasurementRecord

    base = json.loads(lines[0])
    passes = [(9.0, 10.0, 11.0), (10.0, 11.0, 12.0), (28.0, 30.0, 32.0)]    # (p10, median, p90)
    records = [SourcedRecord(MeasurementRecord.model_validate(
        {**base, "p10_us": p10, "median_us": med, "p90_us": p90,
         "extra": {**base.get("extra", {}), "pass": i}}), "r.jsonl", i + 1)
        for i, (p10, med, p90) in enumerate(passes)]
    (merged,) = merge_passes(records)
    r = merged.record
    assert (r.p10_us, r.median_us, r.p90_us) == (10.0, 11.0, 12.0)
    assert r.extra["pass_medians_us"] == [10.0, 11.0, 30.0] and r.extra["passes"] == 3
    assert merged.mean_of_pass_medians_us == pytest.approx(17.0) == merged.measured_us
    assert not r.p10_us <= merged.measured_us <= r.p90_us       # said, not clamped away
    single = merge_passes(records[:1])[0]
    assert single.measured_us == single.record.median_us == 10.0
