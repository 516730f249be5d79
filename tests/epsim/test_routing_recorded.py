"""Recorded expert loads: SGLang's `{"logical_count": ...}` JSON as a trace, the shipped
recordings and the nearest-lengths rule that picks one."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from epsim.eplb.loads import read_loads
from epsim.errors import SpecError
from epsim.routing import read_trace, skew_from_dict
from epsim.routing.recorded import RECORDINGS, nearest

# 3 layers x 4 experts, SGLang-style: layer 0 dense (zeros), then two MoE layers
LOGICAL_COUNT = [[0, 0, 0, 0], [6, 2, 0, 0], [1, 1, 1, 1]]


def test_logical_count_json_reads_as_one_step(tmp_path):
    path = tmp_path / "loads.json"
    path.write_text(json.dumps({"logical_count": LOGICAL_COUNT}))
    packed = tmp_path / "loads.json.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    for file in (path, packed):
        np.testing.assert_array_equal(read_trace(file), [LOGICAL_COUNT])    # [steps, layers, experts]
    np.testing.assert_array_equal(read_loads(packed), LOGICAL_COUNT)     # the EPLB reader: one owner


def test_skew_drops_the_dense_layers(tmp_path):
    path = tmp_path / "loads.json"
    path.write_text(json.dumps({"logical_count": LOGICAL_COUNT}))
    skew = skew_from_dict({"kind": "trace", "path": "loads.json"}, num_layers=2, num_experts=4,
                          top_k=1, base_dir=tmp_path)
    np.testing.assert_allclose(skew.mean_popularity(), [[0.75, 0.25, 0, 0], [0.25] * 4])


def test_one_recorded_pass_is_a_fixed_popularity(tmp_path):
    """One pass (SGLang's loads) draws as a static skew (pooled by the simulator); several
    passes change popularity every step."""
    (tmp_path / "one.json").write_text(json.dumps({"logical_count": LOGICAL_COUNT}))
    (tmp_path / "two.jsonl").write_text("".join(
        json.dumps({"loads": loads}) + "\n" for loads in (LOGICAL_COUNT[1:], LOGICAL_COUNT[:0:-1])))
    one, two = (skew_from_dict({"kind": "trace", "path": name}, 2, 4, 1, base_dir=tmp_path)
                for name in ("one.json", "two.jsonl"))
    assert not one.per_step and two.per_step
    np.testing.assert_allclose(one.popularity(step=1), one.popularity(step=0))
    np.testing.assert_allclose(two.popularity(step=1)[0], [0.25] * 4)


@pytest.mark.parametrize("text, match", [
    ('{"counts": [[1, 2]]}', r"bad.json: loads \(missing\) must be a \[layers, experts\] list "
                             r"under 'loads' or 'logical_count' \(keys found: \['counts'\]\)"),
    ('{"logical_count": [[1, 2], [3]]}', r"bad.json: loads must be a rectangular"),
    ('{"logical_count": [[1, -2]]}', r"bad.json: loads\[0, 1\] \(-2\) must be >= 0"),
    ('{"logical_count": [[1, NaN]]}', r"bad.json: loads\[0, 1\] \(nan\) must be finite"),
    ('{"logical_count": [[1, 2]', r"bad.json"),
])
def test_malformed_json_is_one_line(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SpecError, match=match) as info:
        read_trace(path)
    assert "\n" not in str(info.value)


def test_shipped_recordings_are_deepseek_v3_shaped():
    for recording in RECORDINGS:
        trace = read_trace(recording.path)
        assert trace.shape == (1, 61, 256) and not trace[0, :3].any() and trace[0, 3:].all(axis=1).any()


@pytest.mark.parametrize("isl, osl, decode, prefill", [
    (1024, 1024, "decode_in1000out1000", "prefill_in1024"),
    (8192, 1024, "decode_in1000out1000", "prefill_in4096"),
    (1024, 8192, "decode_in500out1500", "prefill_in1024"),
    (2000, 100, "decode_in2000out100", "prefill_in2048"),
])
def test_nearest_recorded_lengths(isl, osl, decode, prefill):
    assert nearest("decode", isl, osl).name == decode
    assert nearest("prefill", isl, osl).name == prefill
    with pytest.raises(ValueError, match=r"phase \('verify'\) must be one of"):
        nearest("verify", isl, osl)
