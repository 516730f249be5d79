"""Profiles are input too: parameters within physical bounds, fitted ranges `[low, high]`."""

from __future__ import annotations

import json

import pytest

from epsim.errors import ProfileError
from epsim.physical import param_problem
from epsim.profile import Profile, default_profile_path


def _shipped() -> dict:
    return json.loads(default_profile_path().read_text())


@pytest.mark.parametrize("param, value, rule", [
    ("nvl_gbps", -1.0, r"must be > 0 and <= 100000 \(GB/s\)"),
    ("nvl_gbps", 0.0, r"must be > 0 and <= 100000 \(GB/s\)"),
    ("base_us", -5.0, r"must be >= 0 and <= 1e\+07 \(µs\)"),
    ("base_us", 1e9, r"must be >= 0 and <= 1e\+07 \(µs\)"),
    ("tflops", 1e9, r"must be > 0 and <= 100000 \(TFLOP/s\)"),
])
def test_unphysical_parameters_are_refused(param, value, rule):
    data = _shipped()
    key = next(k for k, c in data["components"].items() if param in c["params"])
    data["components"][key]["params"][param] = value
    with pytest.raises(ProfileError, match=rf"p.json: components\.{key}\.params\.{param} \(.*\) {rule}"):
        Profile.from_dict(data, where="p.json")


def test_non_finite_parameters_name_the_field():
    data = _shipped()
    key = next(iter(data["components"]))
    name = next(iter(data["components"][key]["params"]))
    data["components"][key]["params"][name] = float("nan")
    with pytest.raises(ProfileError, match=rf"components\.{key}\.params\.{name} \(nan\) must be a finite"):
        Profile.from_dict(data, where="p.json")


def test_signed_sync_term_is_allowed_within_bounds():
    assert param_problem("sync_us", -98.8) is None
    assert param_problem("sync_us", -1e5) is not None


@pytest.mark.parametrize("bounds, rule", [([1.0], r"must be \[low, high\] \(two numbers\)"),
                                          ([9.0, 1.0], r"must have low <= high")])
def test_valid_range_needs_both_bounds(bounds, rule):
    data = _shipped()
    key = next(k for k, c in data["components"].items() if c["valid_range"])
    data["components"][key]["valid_range"]["num_tokens_per_rank"] = bounds
    with pytest.raises(ProfileError, match=rf"valid_range\.num_tokens_per_rank \(.*\) {rule}"):
        Profile.from_dict(data, where="p.json")


def test_shipped_profile_is_within_bounds():
    assert Profile.from_dict(_shipped()).components


def test_a_rate_against_hbm_may_beat_it_within_bounds():
    """MLA's re-reads run partly from L2: their rate may pass the datasheet HBM (an efficiency,
    `_frac`, may not), within 10 times it."""
    assert param_problem("reread_hbm_ratio", 1.17) is None
    assert param_problem("hbm_frac", 1.17) == "must be > 0 and <= 1 (of the datasheet)"
    assert param_problem("reread_hbm_ratio", 0.0) == ("must be > 0 and <= 10 (of the datasheet "
                                                      "HBM)")
    assert param_problem("reread_hbm_ratio", 11.0) is not None


def test_a_share_a_second_stream_hides_may_be_none_but_not_more_than_all():
    """`epsim.cost.dual_stream`'s overlap: 0 (the two branches in series) is physical, unlike an
    efficiency's 0; above 1 is not."""
    assert param_problem("t4_overlap_frac", 0.0) is None
    assert param_problem("t4_overlap_frac", 1.0) is None
    assert param_problem("t4_overlap_frac", 1.2) == "must be >= 0 and <= 1 (of the shorter branch)"
