"""Sweep syntax, ranges, key checks and point building (epsim.plan.sweep, epsim.plan.points)."""

from __future__ import annotations

import pytest

from epsim.errors import SpecError
from epsim.plan.points import apply_values, build_point, load_base, point_key
from epsim.plan.sweep import SweepAxis, check_axes, check_key, expand, expand_range, parse_sweep

BASE = {
    "model": "Qwen3-30B-A3B",
    "cluster": {"gpu": "H200", "num_nodes": 2},
    "deployment": {"ep_size": 8, "disaggregation_mode": "decode", "moe_a2a_backend": "deepep"},
    "workload": {"arrivals": {"kind": "poisson", "rate_per_s": 50}, "skew": {"kind": "zipf", "alpha": 0.5},
                 "duration_s": 1.0, "warmup_s": 0.2},
}


def test_values_parse_as_yaml_scalars():
    axis = parse_sweep("deployment.moe_a2a_backend=deepep, mooncake,none")
    assert axis == SweepAxis("deployment.moe_a2a_backend", ("deepep", "mooncake", "none"))
    assert parse_sweep("x.y=1,2.5,true,1e3").values == (1, 2.5, True, 1000.0)
    # commas inside brackets belong to one value
    failures = parse_sweep("deployment.failures=[],[{at_s: 1, rank: 3}]").values
    assert failures == ([], [{"at_s": 1, "rank": 3}])


def test_ranges_expand_inclusively():
    assert expand_range("8:128:x2", "w") == [8, 16, 32, 64, 128]
    assert expand_range("0:64:+16", "w") == [0, 16, 32, 48, 64]
    assert expand_range("0.1:0.5:+0.1", "w") == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert expand_range("10:100:x3", "w") == [10, 30, 90]       # stop need not be hit
    assert expand_range("deepep", "w") is None
    assert parse_sweep("deployment.ep_size=2,8:32:x2").values == (2, 8, 16, 32)


@pytest.mark.parametrize("text, match", [
    ("deployment.ep_size", r"must look like KEY=V1,V2"),
    ("=1,2", r"must have a dotted key"),
    ("deployment..ep_size=1", r"must have a dotted key"),
    ("deployment.ep_size=", r"at least one value"),
    ("deployment.ep_size=8,,16", r"empty value"),
    ("deployment.ep_size=8:4:x2", r"STOP >= START"),
    ("deployment.ep_size=8:64:x1", r"FACTOR > 1"),
    ("deployment.ep_size=0:64:+0", r"STEP > 0"),
    ("deployment.ep_size=1:1e9:+1", r"at most 10000 values"),
])
def test_bad_sweep_syntax(text, match):
    with pytest.raises(SpecError, match=match):
        parse_sweep(text)


def test_unknown_keys_name_the_path_and_allowed_fields():
    with pytest.raises(SpecError, match=r"'ep_sise' is not a field of deployment; allowed: .*ep_size"):
        check_key("deployment.ep_sise")
    with pytest.raises(SpecError, match=r"'deploy' is not a field of \(top level\); allowed: base_dir, cluster"):
        check_key("deploy.ep_size")
    with pytest.raises(SpecError, match=r"deployment.ep_size is a value, not a mapping"):
        check_key("deployment.ep_size.x")
    # a field of any skew variant is accepted; its point is checked when validated
    check_key("workload.skew.alpha")
    check_key("workload.skew.hot_frac")
    check_key("model.num_layers")
    check_key("deployment.failures")


def test_axes_must_not_repeat_or_overlap():
    with pytest.raises(SpecError, match=r"must be given once"):
        check_axes([SweepAxis("seed", (1,)), SweepAxis("seed", (2,))])
    with pytest.raises(SpecError, match=r"must not overlap another swept key \(model\)"):
        check_axes([SweepAxis("model", ("Qwen3-30B-A3B",)), SweepAxis("model.num_layers", (4,))])


def test_cartesian_product_first_axis_outermost():
    axes = [SweepAxis("a", (1, 2)), SweepAxis("b", ("x", "y", "z"))]
    points = list(expand(axes))
    assert len(points) == 6
    assert points[:4] == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"}, {"a": 2, "b": "x"}]


def test_model_fields_can_be_swept_over_a_zoo_name():
    data = apply_values(BASE, {"model.num_layers": 4}, "t")
    assert data["model"]["num_layers"] == 4 and data["model"]["num_experts"] == 128
    assert BASE["model"] == "Qwen3-30B-A3B"      # the base is not modified


def test_invalid_points_are_skipped_with_their_reason():
    base = load_base(BASE)
    ok = build_point(base, 0, {"deployment.ep_size": 16})
    bad = build_point(base, 1, {"deployment.ep_size": 12})
    assert ok.scenario.deployment.ep_size == 16
    assert "must be a multiple of gpus_per_node" in bad.reason
    redundant = build_point(base, 2, {"deployment.ep_num_redundant_experts": 8})
    assert "needs deployment.enable_eplb: true" in redundant.reason


def test_point_key_follows_scenario_seed_and_profile(tmp_path):
    base = load_base(BASE)
    a = build_point(base, 0, {"deployment.ep_size": 8})
    same = build_point(base, 5, {"deployment.ep_size": 8})
    other_seed = build_point(base, 0, {"deployment.ep_size": 8, "seed": 1})
    assert a.key == same.key and len(a.key) == 16
    assert a.key != other_seed.key
    # the profile's content is part of the key, its path is not
    from epsim.profile import load_profile
    profile = load_profile()
    path = tmp_path / "p.json"
    profile.save(path)
    assert point_key(a.scenario, str(path)) == point_key(a.scenario, None)
    changed = profile.model_copy(update={"name": "other"})
    changed.save(tmp_path / "q.json")
    assert point_key(a.scenario, str(tmp_path / "q.json")) != point_key(a.scenario, None)


def test_base_scenario_errors_are_reported_once(tmp_path):
    with pytest.raises(SpecError, match=r"deployment.ep_size \(0\) must be > 0"):
        load_base(BASE, {"deployment.ep_size": 0})
    with pytest.raises(SpecError, match=r"--set key \(deployment.epsize\) must name a scenario field"):
        load_base(BASE, ["deployment.epsize=4"])
    path = tmp_path / "bad.yaml"
    path.write_text("model: [unclosed\n")
    with pytest.raises(SpecError, match=r"not valid YAML at line"):
        load_base(path)
