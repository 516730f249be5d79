"""The point cache (`epsim.plan.store.PointCache`): a damaged line is never a finished point;
it is reported once, dropped from the file and recomputed. A point's key covers the files its
scenario references (`epsim.plan.points`)."""

from __future__ import annotations

import json
import os
import warnings

import pytest

from epsim.plan.store import PointCache, entry_problem

METRICS = ("a", "b")
GOOD = {"key": "k1", "metrics": {"a": 1.0, "b": float("nan")}, "warnings": []}


@pytest.mark.parametrize("entry, problem", [
    ({}, "no key"),
    ({"key": "k"}, "no metrics"),
    ({"key": "k", "metrics": {}}, "no metrics"),
    ({"key": "k", "metrics": [1, 2]}, "metrics are a list"),
    ({"key": "k", "metrics": "fast"}, "metrics are a str"),
    ({"key": "k", "metrics": {"a": "1", "b": 2}}, "metric a is not a number"),
    ({"key": "k", "metrics": {"a": True, "b": 2}}, "metric a is not a number"),
    ({"key": "k", "metrics": {"a": 1}}, "1 metric(s) missing (b, ...)"),
    ({"key": 5, "metrics": {"a": 1, "b": 2}}, "no key"),
    ([1, 2], "a JSON list, not an object"),
    ({"key": "k", "metrics": {"a": 1, "b": None}, "warnings": "x"}, "warnings are not a list"),
])
def test_what_is_not_a_finished_point(entry, problem):
    assert entry_problem(entry, METRICS) == problem


def test_damaged_lines_are_dropped_reported_once_and_recomputed(tmp_path):
    good = json.dumps(GOOD)
    lines = [good, "{}", json.dumps({**GOOD, "key": "k2", "metrics": "x"}), "[" * 50_000 + "]" * 50_000,
             json.dumps({**GOOD, "key": "k3"}), good[: len(good) // 2]]
    (tmp_path / "points.jsonl").write_text("\n".join(lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = PointCache(tmp_path, required=METRICS)
    assert sorted(cache.entries) == ["k1", "k3"]
    assert [str(w.message) for w in caught] == [
        f"{tmp_path / 'points.jsonl'}: 4 damaged line(s) dropped (line 2: no key and 3 more); "
        f"their points are recomputed"]
    assert cache.damaged[1:] == ["line 3: metrics are a str", "line 4: not valid JSON (a line cut short?)",
                                 "line 6: not valid JSON (a line cut short?)"]
    # the file keeps the whole points only, and a resumed point starts on a line of its own
    cache.add("k4", {"metrics": {"a": 2.0, "b": 3.0}})
    cache.close()
    keys = [json.loads(line)["key"] for line in (tmp_path / "points.jsonl").read_text().splitlines()]
    assert keys == ["k1", "k3", "k4"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                        # nothing damaged now: no note
        assert sorted(PointCache(tmp_path, required=METRICS).entries) == ["k1", "k3", "k4"]


def test_a_point_key_covers_the_files_its_scenario_references(tmp_path):
    from epsim.plan.points import content_digest, point_key
    from epsim.spec import scenario_from_dict
    from tests.epsim.bad_input_cases import SCENARIO
    trace = tmp_path / "arrivals.csv"
    trace.write_text("arrival_s\n0.01\n0.02\n")
    data = {**SCENARIO, "workload": {**SCENARIO["workload"],
                                     "arrivals": {"kind": "trace", "path": "arrivals.csv"}}}
    scenario = scenario_from_dict(data, base_dir=tmp_path)
    first = point_key(scenario, None)
    os.utime(trace, ns=(1, 1))                                  # touched: same bytes, same key
    assert point_key(scenario, None) == first
    trace.write_text("arrival_s\n0.01\n0.015\n")                # edited: another key
    assert point_key(scenario, None) != first
    loads = tmp_path / "loads"                                  # a folder of recorded loads
    loads.mkdir()
    (loads / "a.jsonl").write_text("1\n")
    before = content_digest(loads)
    (loads / "b.jsonl").write_text("2\n")
    assert content_digest(loads) != before
