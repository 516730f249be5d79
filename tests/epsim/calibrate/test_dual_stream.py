"""`any/dual_stream`: the dual-stream shared expert's overlap carried into a profile from its
GPU record (`epsim.calibrate.dual_stream`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from epsim.calibrate.dual_stream import PLATEAU_TOKENS, KEY, component_of, main, overlap_of
from epsim.cost.dual_stream import PARAM, param_name
from epsim.profile import Profile, default_profile_path

ROOT = Path(__file__).resolve().parents[3]
RESULT = ROOT / "benchmarks/results/dual_stream_gpu/dual_stream.json"


def _row(tokens, tp, shared, routed, serial, dual):
    return {"tokens": tokens, "tp": tp, "shared_us": shared, "routed_us": routed,
            "serial_us": serial, "dual_us": dual}


def _result(rows):
    return {"device": "GPU", "torch": "2", "date_utc": "2026-12-06T00:00:00Z", "bursts": 15,
            "shapes": {"dtype": "bf16"}, "rows": rows}


def test_counts_pool_their_passes_into_the_hidden_share_of_the_shorter_branch_in_0_1():
    rows = [_row(1, 8, 10.0, 40.0, 50.0, 44.0),       # 6 of the shorter 10 hidden
            _row(4, 4, 20.0, 60.0, 80.0, 72.0),       # 8 of 20: up to 128 tokens one overlap,
                                                      # pooled (6 10 + 8 20) / 500
            _row(256, 8, 10.0, 40.0, 50.0, 39.0),     # under the longer alone: noise, 1
            _row(1024, 8, 10.0, 40.0, 50.0, 52.0)]    # over the two in series: 0
    comp = component_of(_result(rows), "r.json")
    assert overlap_of(rows[0]) == pytest.approx(0.6)
    assert comp.params[param_name(1)] == pytest.approx(0.44) == comp.params[param_name(4)]
    assert comp.params[param_name(256)] == 1.0 and comp.params[param_name(1024)] == 0.0
    assert comp.residuals["num_points_outside_0_1"] == 2
    assert comp.valid_range == {"num_tokens_per_rank": [1.0, 1024.0], "tp_size": [4.0, 8.0]}
    assert "extrapolated" in comp.note


def test_the_heldout_errors_judge_the_curve_against_the_bound():
    # overlap 0.5 at every count and split: the curve of the others, and the other split,
    # predict a point left out exactly; the bound and none miss half the shorter branch
    rows = [_row(t, tp, 10.0, 40.0, 50.0, 45.0) for t in (1, 2, 4, 8) for tp in (4, 8)]
    residuals = component_of(_result(rows), "r.json").residuals
    for name in ("interp", "plateau", "interp_own_tp", "constant", "tp"):
        assert residuals[f"heldout_{name}_us"] == pytest.approx(0.0, abs=1e-12)
    assert residuals["heldout_bound_us"] == pytest.approx(5.0)
    assert residuals["heldout_none_us"] == pytest.approx(5.0)


def test_the_cli_writes_the_component_in_place_and_refuses_a_bad_record(tmp_path, capsys):
    profile = tmp_path / "p.json"
    shutil.copy(default_profile_path(), profile)
    result = tmp_path / "r.json"
    result.write_text(json.dumps(_result([_row(1, 8, 10.0, 40.0, 50.0, 44.0)])))
    assert main([str(result), "--profile", str(profile)]) == 0
    data = json.loads(profile.read_text())
    assert data["components"][KEY]["params"] == {param_name(1): pytest.approx(0.6)}
    assert data["provenance"]["records"][-1]["path"] == str(result)
    result.write_text(json.dumps(_result([{"tokens": 1, "tp": 8}])))
    assert main([str(result), "--profile", str(profile)]) == 2
    assert "'rows[0].shared_us' is missing" in capsys.readouterr().err
    assert main([str(tmp_path / "none.json"), "--profile", str(profile)]) == 2


def test_the_shipped_profile_carries_the_record_as_measured():
    if Profile.load(default_profile_path()).component("any", "dual_stream") is None:
        pytest.skip("the shipped profile holds no any/dual_stream")
    result = json.loads(RESULT.read_text())
    params = Profile.load(default_profile_path()).params("any", "dual_stream")
    tokens = sorted({row["tokens"] for row in result["rows"]})
    assert sorted(int(PARAM.match(k)[1]) for k in params if PARAM.match(k)) == tokens
    for t in tokens:        # pooled as measured: each count's passes, up to 128 tokens all of them
        rows = [row for row in result["rows"]
                if row["tokens"] == t or max(row["tokens"], t) <= PLATEAU_TOKENS]
        raw = [overlap_of(row) for row in rows]
        assert min(max(min(raw), 0.0), 1.0) <= params[param_name(t)] <= min(max(max(raw), 0.0), 1.0)
    assert len({params[param_name(t)] for t in tokens if t <= PLATEAU_TOKENS}) == 1
    data = json.loads(default_profile_path().read_text())
    entry = next(e for e in data["provenance"]["records"] if e["path"].endswith(RESULT.name))
    assert entry["sha256"] == hashlib.sha256(RESULT.read_bytes()).hexdigest()
    assert result["device"] in data["components"][KEY]["note"]


def test_cross_check_judges_the_curve_and_baselines_on_another_kernels_record(capsys):
    from epsim.calibrate.dual_stream import cross_kernel_us
    # the record: overlap 0.5 at 1 token, 1.0 at 4 (shorter branch 10 us each); the other
    # kernel's: 0.8 at 2 tokens (shorter 10 us, 8 us hidden)
    result = _result([_row(1, 8, 10.0, 40.0, 50.0, 45.0), _row(4, 8, 10.0, 40.0, 50.0, 40.0)])
    other = _result([_row(2, 8, 10.0, 30.0, 40.0, 32.0)])
    errors = cross_kernel_us(result, other)
    assert errors["cross_kernel_curve_us"] == pytest.approx(0.5)       # 0.75 x 10 against 8
    assert errors["cross_kernel_plateau_us"] == pytest.approx(0.5)     # both <= 128: pooled 0.75
    assert errors["cross_kernel_constant_us"] == pytest.approx(0.5)    # pooled 0.75
    assert errors["cross_kernel_constant_same_counts_us"] == pytest.approx(3.0)   # 1 token: 0.5
    assert errors["cross_kernel_bound_us"] == pytest.approx(2.0)
    assert errors["cross_kernel_none_us"] == pytest.approx(8.0)


def test_cross_check_writes_nothing_and_a_missing_profile_is_one_line(tmp_path, capsys):
    other = tmp_path / "dense.json"
    other.write_text(json.dumps(_result([_row(2, 8, 10.0, 30.0, 40.0, 32.0)])))
    assert main([str(RESULT), "--cross-check", str(other)]) == 0
    assert "cross_kernel_curve_us" in capsys.readouterr().out
    assert main([str(RESULT)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["--profile: required (or --cross-check OTHER.json)"]
