"""The input layer (`epsim.io`): size caps, UTF-8, nesting, alias budget, duplicate keys,
output paths — each refusal one line naming the file and the rule."""

from __future__ import annotations

import gzip
import os
import re
import time

import pytest

from epsim.errors import RecordError, SpecError
from epsim.io import (MAX_DEPTH, MAX_YAML_NODES, check_output_dir, check_output_file, load_json,
                      load_yaml, loads_json, read_bytes, read_text)
from epsim.spec.numbers import check_numbers
from epsim.spec.scenario import Scenario


def test_size_cap_stops_reading_at_the_cap(tmp_path):
    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"/dev/zero: scenario file must be at most 1 MiB"):
        read_bytes("/dev/zero", "scenario file", max_bytes=2**20)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("data, rule", [
    ("café: 1\n".encode("latin-1"), r"byte 3 \(0xe9\) is not \(Latin-1"),
    ("a: 1\n".encode("utf-16"), r"it is UTF-16"),
    (b"a: 1\x00\n", r"byte 4 is NUL"),
])
def test_text_that_is_not_utf8_is_refused(tmp_path, data, rule):
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    with pytest.raises(SpecError, match=rf"s.yaml: scenario must be UTF-8 text; {rule}"):
        read_text(path, "scenario")


def test_utf8_bom_is_dropped(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_text(path, "scenario") == "a: 1\n"


def test_corrupt_and_oversized_gzip(tmp_path):
    good = gzip.compress(b'{"a": 1}\n' * 1000)
    bad = tmp_path / "r.jsonl.gz"
    bad.write_bytes(good[:20] + b"\xff" * 30 + good[50:])
    with pytest.raises(RecordError, match=r"r.jsonl.gz: records must be a valid gzip file"):
        read_text(bad, "records", error=RecordError)
    bomb = tmp_path / "b.jsonl.gz"
    bomb.write_bytes(gzip.compress(b" " * (3 * 2**20)))
    with pytest.raises(RecordError, match=r"must decompress to at most 2 MiB"):
        read_text(bomb, "records", max_bytes=2 * 2**20, error=RecordError)


def test_named_pipe_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match=r"s.yaml: scenario must be a regular file, not a named pipe"):
        read_bytes(fifo, "scenario")


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SpecError, match=r"nope.json: cannot read loads \(No such file"):
        read_bytes(tmp_path / "nope.json", "loads")
    with pytest.raises(SpecError, match=r"cannot read loads \(Is a directory\)"):
        read_bytes(tmp_path, "loads")


def test_deep_nesting_is_refused_without_recursion():
    deep = "[" * 50_000 + "]" * 50_000
    with pytest.raises(SpecError, match=rf"f.json: nesting must be at most {MAX_DEPTH} levels"):
        loads_json(deep, "f.json")
    with pytest.raises(SpecError, match=rf"s.yaml: nesting must be at most {MAX_DEPTH} levels"):
        load_yaml("a: " + deep, "s.yaml")
    assert loads_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "ok.json") is not None


def test_billion_laughs_is_refused_quickly():
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    start = time.perf_counter()
    with pytest.raises(SpecError, match=rf"bomb.yaml: aliases must expand to at most "
                                        rf"{MAX_YAML_NODES} nodes; the one at line \d+"):
        load_yaml("\n".join(lines), "bomb.yaml")
    assert time.perf_counter() - start < 2
    assert load_yaml("base: &b {x: 1}\nother: *b\n", "ok.yaml") == {"base": {"x": 1}, "other": {"x": 1}}


def test_duplicate_keys_are_refused_merge_keys_are_not():
    with pytest.raises(SpecError, match=r"s.yaml: key 'seed' appears twice at line 3 \(first at "
                                        r"line 1\); each key must be given once"):
        load_yaml("seed: 1\nname: x\nseed: 2\n", "s.yaml")
    assert load_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\n", "m.yaml")["b"] == {"x": 1, "y": 3}


def test_yaml_errors_are_one_line():
    with pytest.raises(SpecError) as info:
        load_yaml("a: [1, 2\nb: {", "s.yaml")
    assert "\n" not in str(info.value) and str(info.value).startswith("s.yaml: not valid YAML at line")


def test_json_file_reads_through_the_caps(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"a": [1, 2]}')
    assert load_json(path, "config") == {"a": [1, 2]}


@pytest.mark.parametrize("data, path, rule", [
    ({"seed": float("inf")}, "seed", r"\(inf\) must be a finite number"),
    ({"workload": {"arrivals": {"kind": "poisson", "rate_per_s": float("nan")}}},
     "workload.arrivals.rate_per_s", r"\(nan\) must be a finite number"),
    ({"workload": {"output_len": {"kind": "fixed", "value": 10**30}}},
     "workload.output_len.value", r"\(1e\+30\) must be at most 1e\+15 in magnitude"),
    ({"deployment": {"ep_size": True}}, "deployment.ep_size", r"\(true\) must be an integer"),
    ({"workload": {"skew": {"kind": "zipf", "alpha": False}}}, "workload.skew.alpha",
     r"\(false\) must be a number"),
])
def test_numbers_are_finite_bounded_and_not_bools(data, path, rule):
    where, message = check_numbers(data, Scenario)
    assert where == path
    assert re.match(rule, message), message


def test_bools_stay_allowed_for_bool_fields():
    assert check_numbers({"deployment": {"enable_eplb": True}}, Scenario) is None


def test_output_paths(tmp_path):
    with pytest.raises(SpecError, match=r"--out \('/dev/null/x'\) must be a writable directory "
                                        r"\(it exists and is not a directory\)|Not a directory"):
        check_output_dir("/dev/null/x")
    with pytest.raises(SpecError, match=r"--out \('/dev/null/p.json'\) must be in a writable directory"):
        check_output_file("/dev/null/p.json")
    with pytest.raises(SpecError, match=r"--doc \('.*x.md'\) must be an existing file"):
        check_output_file(tmp_path / "x.md", "--doc", must_exist=True)
    with pytest.raises(SpecError, match=r"must be a file, not a directory"):
        check_output_file(tmp_path)
    assert check_output_dir(tmp_path / "a" / "b").is_dir()
