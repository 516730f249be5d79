"""Validation on extrapolation hold-outs (tokens above the fit, an unseen shape, another run)
against the two baselines, on synthetic records whose truth is known."""

from __future__ import annotations

import json

import numpy as np
import pytest

from epsim.cli import main
from epsim.records import write_records
from epsim.validate.extrapolation import RunPair, extrapolation, loglog, markdown, stats
from tests.epsim.calibrate_fixtures import SHAPES, synthetic_records

TOKENS = (1, 4, 16, 64, 256, 1024, 2048, 8192)
UNIFORM = ({"kind": "uniform"},)


def test_loglog_interpolates_and_extrapolates_from_the_nearest_points():
    points = [(1.0, 10.0), (10.0, 100.0), (100.0, 400.0)]
    assert loglog(points, 10.0) == pytest.approx(100.0)
    assert loglog(points, np.sqrt(10.0)) == pytest.approx(np.sqrt(1000.0))    # midway in log-log
    slope = np.log(4.0) / np.log(10.0)                                       # last segment
    assert loglog(points, 1000.0) == pytest.approx(400.0 * 10.0 ** slope)
    assert loglog(points, 0.1) == pytest.approx(1.0)                          # first segment
    assert loglog([(5.0, 7.0), (5.0, 9.0)], 50.0) == pytest.approx(8.0)       # duplicates averaged


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("extrapolation")
    shapes = {**SHAPES, "DeepSeek-V3": (7168, 2048)}
    a = synthetic_records(noise=0.02, seed=1, tokens=TOKENS, skews=UNIFORM, shapes=shapes)
    b = synthetic_records(noise=0.02, seed=2, tokens=TOKENS, skews=UNIFORM, shapes=SHAPES,
                          scale=1.1)
    write_records(a, d / "run_a.jsonl", append=False)
    write_records(b, d / "run_b.jsonl", append=False)
    return d / "run_a.jsonl", d / "run_b.jsonl"


def test_every_axis_is_judged_with_both_baselines(files):
    a, b = files
    rows, notes = extrapolation([a], [RunPair((a,), (b,))])
    assert {r.axis for r in rows} == {"tokens", "shape", "run"}
    tokens = [r for r in rows if r.axis == "tokens"]
    assert {r.tokens for r in tokens} == {2048, 8192}                 # only above the fitted 1024
    assert {r.model for r in rows if r.axis == "shape"} == {"DeepSeek-V3"}
    assert "fit" in notes["run"] and "run_b.jsonl" in notes["run"]
    by = {(s.axis, s.component): s for s in stats(rows)}
    # the truth has the model's form: it extrapolates in tokens and shape within the noise,
    # where a constant cannot and log-log lines drift
    for axis in ("tokens", "shape"):
        for kind in ("experts", "dispatch", "moe_layer"):
            s = by[(axis, f"torch/{kind}")]
            assert s.model_mape < 5.0 and s.beats_both and s.skill > 0, s
    # another machine 10% slower: every prediction is ~10% low, as is the other run's own data
    run = by[("run", "torch/experts")]
    assert 7.0 < run.model_mape < 13.0 and 7.0 < run.loglog_mape < 13.0
    table = markdown(rows, notes)
    assert "| tokens | torch/experts |" in table and "skill" in table


def test_a_component_that_loses_to_a_baseline_is_flagged(files):
    a, b = files
    rows, notes = extrapolation([a], [RunPair((a,), (b,))])
    lines = [l for l in markdown(rows, notes).splitlines() if l.startswith("| run |")]
    beaten = [s for s in stats(rows) if s.axis == "run" and not s.beats_both]
    assert beaten and all(any(f"| {s.component} |" in l and "**no**" in l for l in lines)
                          for s in beaten)


def test_validate_command_reports_extrapolation_and_checks_run_files(files, tmp_path, capsys):
    a, b = files
    profile = tmp_path / "p.json"
    assert main(["calibrate", "--records", str(a), "--out", str(profile)]) == 0
    capsys.readouterr()
    assert main(["validate", "--profile", str(profile), "--records", str(a), "--run-fit", str(a),
                 "--run-judged", str(b), "--no-plots", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    axes = {e["axis"] for e in data["extrapolation"]}
    assert axes == {"tokens", "shape", "run"}
    assert all({"model_mape", "constant_mape", "loglog_mape", "skill", "beats_both"} <= set(e)
               for e in data["extrapolation"])
    assert main(["validate", "--profile", str(profile), "--records", str(a), "--run-fit",
                 str(a), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--run-fit and --run-judged must be given together" in err[0]


def test_named_run_pairs_are_judged_each_on_its_own_refit(files):
    """Two pairs: their rows are labelled apart, and a pair's numbers do not depend on the
    other pair (each has its own refit)."""
    a, b = files
    alone, _ = extrapolation([a], [RunPair((a,), (b,))])
    both, notes = extrapolation([a], [RunPair((a,), (b,)), RunPair((b,), (a,), "b -> a")])
    assert list(notes)[-2:] == ["run", "run (b -> a)"] and "run_a.jsonl" in notes["run (b -> a)"]
    by = {(s.label, s.component): s for s in stats(both)}
    for s in stats(alone):
        if s.axis == "run":
            assert by[("run", s.component)] == s
    # machine b is 10% slower: fitted on b, a's points are predicted ~10% high
    reverse = by[("run (b -> a)", "torch/experts")]
    assert reverse.pair == "b -> a" and 6.0 < reverse.model_mape < 12.0
    assert "| run (b -> a) | torch/experts |" in markdown(both, notes)
