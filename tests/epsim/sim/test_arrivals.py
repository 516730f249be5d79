"""Arrival processes and request lengths reproduce their parameters; trace files read or fail clearly."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.sim.arrivals import read_arrival_trace, sample_lengths, sample_requests
from epsim.spec.workload import LogNormalLength, UniformLength, WorkloadSpec


def test_poisson_rate_and_exponential_gaps():
    w = WorkloadSpec(arrivals={"kind": "poisson", "rate_per_s": 200.0}, duration_s=100.0)
    reqs = sample_requests(w, seed=3)
    expected = 200.0 * 100.0
    assert abs(len(reqs) - expected) < 5 * np.sqrt(expected)
    gaps = np.diff(reqs.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    assert (np.diff(reqs.arrival_s) >= 0).all() and reqs.arrival_s[-1] < 100.0


def test_bursty_arrivals_keep_the_rate_and_reach_the_cv():
    w = WorkloadSpec(arrivals={"kind": "bursty", "rate_per_s": 100.0, "cv": 3.0}, duration_s=400.0)
    reqs = sample_requests(w, seed=5)
    gaps = np.diff(reqs.arrival_s)
    assert len(reqs) / 400.0 == pytest.approx(100.0, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_same_seed_same_requests_other_seed_differs():
    w = WorkloadSpec(arrivals={"kind": "poisson", "rate_per_s": 50.0}, duration_s=10.0,
                     input_len={"kind": "lognormal", "mean": 500})
    a, b, c = sample_requests(w, 1), sample_requests(w, 1), sample_requests(w, 2)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.input_len, b.input_len)
    assert not np.array_equal(a.input_len[:20], c.input_len[:20])


def test_length_distributions():
    rng = np.random.default_rng(0)
    lengths = sample_lengths(LogNormalLength(mean=1000.0, sigma=0.5, max=100000), 200_000, rng)
    assert lengths.mean() == pytest.approx(1000.0, rel=0.01)
    capped = sample_lengths(LogNormalLength(mean=1000.0, sigma=2.0, max=1500), 1000, rng)
    assert capped.max() <= 1500 and capped.min() >= 1
    uniform = sample_lengths(UniformLength(low=3, high=5), 30_000, rng)
    assert set(np.unique(uniform).tolist()) == {3, 4, 5}


def test_trace_files_csv_and_jsonl(tmp_path):
    csv_file = tmp_path / "arrivals.csv"
    csv_file.write_text("arrival_s,input_len,output_len\n0.5,100,10\n0.1,200,20\n9.0,5,5\n")
    w = WorkloadSpec(arrivals={"kind": "trace", "path": "arrivals.csv"}, duration_s=5.0)
    reqs = sample_requests(w, seed=0, base_dir=tmp_path)
    assert reqs.arrival_s.tolist() == [0.1, 0.5]                       # sorted, cut at 5 s
    assert reqs.input_len.tolist() == [200, 100] and reqs.output_len.tolist() == [20, 10]
    jsonl = tmp_path / "arrivals.jsonl"
    jsonl.write_text('{"arrival_s": 0.25}\n\n{"arrival_s": 0.75}\n')
    w2 = WorkloadSpec(arrivals={"kind": "trace", "path": "arrivals.jsonl"}, duration_s=5.0,
                      output_len={"kind": "fixed", "value": 7})
    reqs2 = sample_requests(w2, seed=0, base_dir=tmp_path)
    assert reqs2.arrival_s.tolist() == [0.25, 0.75] and reqs2.output_len.tolist() == [7, 7]


@pytest.mark.parametrize("text, suffix, message", [
    ("input_len\n5\n", ".csv", r"arrivals.csv:2: arrival_s \(missing\) must be given on every row"),
    ("arrival_s\nsoon\n", ".csv", r"arrivals.csv:2: arrival_s \('soon'\) must be a number"),
    ("arrival_s\n-1\n", ".csv", r"arrivals.csv:2: arrival_s \('-1'\) must be a finite number >= 0"),
    ("arrival_s,input_len\n1,5\n2,\n", ".csv", r"input_len must be given on every row or on none"),
    ('{"arrival_s": 1}\n{oops\n', ".jsonl", r"arrivals.jsonl:2: not valid JSON"),
    ("arrival_s\n", ".csv", r"no arrival rows found"),
])
def test_bad_trace_rows_fail_with_file_and_line(tmp_path, text, suffix, message):
    path = tmp_path / f"arrivals{suffix}"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        read_arrival_trace(path)
