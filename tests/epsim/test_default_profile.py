"""Which profile prices a cluster (`epsim.default_profile`), shipped profiles by name, and the
profile-format addition (each component's data source and tables; older profiles still load)."""

from __future__ import annotations

import json

import pytest

from epsim.cli import main
from epsim.default_profile import (aic_profile_name, aic_profile_version, choose_part,
                                   default_profile, filled, part_for, version_key, version_parts,
                                   versioned_profile)
from epsim.errors import ProfileError
from epsim.profile import Profile, default_profile_path, load_profile, profile_path


def test_shipped_profiles_by_name():
    assert load_profile("aic_b200").hardware == "B200"
    assert profile_path("h200x2") == default_profile_path()
    with pytest.raises(ProfileError, match=r"profile \('aic_h800'\) must be a profile JSON file or "
                                           r"one of the shipped profiles \['aic_b200'"):
        load_profile("aic_h800")


def test_the_default_rule():
    h200 = default_profile("H200")
    assert h200.name.startswith("h200x2") and h200.hardware == "H200"
    measured = load_profile(shared=True)
    assert all(h200.components[k] == c for k, c in measured.components.items())
    # filled from aic_h200: only kinds our own records never cover (DeepEP, which our machines
    # never ran, and SGLang's all-reduce), each naming its profile
    added = {k: c for k, c in h200.components.items() if k not in measured.components}
    assert all(filled(k) for k in added) and not any(filled(k) for k in measured.components)
    assert {"deepep/dispatch/graph/low_latency/fp8", "deepep/combine/normal",
            "any/experts_fp8_block/graph", "any/mla_decode_bf16/graph",
            "any/allreduce/graph/oneshot", "any/allreduce/graph/nccl"} <= set(added)
    assert not filled("deepep/experts/graph") and not filled("none/allreduce")
    assert filled("any/allreduce/graph/twoshot")
    assert all(c.profile == "aic_h200" and c.data_source == "aiconfigurator"
               for c in added.values())
    assert default_profile("B200").name == aic_profile_name("B200") == "aic_b200"
    assert default_profile("H800").components == {} and aic_profile_name("H800") == ""
    assert default_profile("B200") is default_profile("B200")          # one shared resolution


def test_old_profiles_still_load_and_say_their_source(tmp_path):
    data = json.loads(default_profile_path().read_text())
    for comp in data["components"].values():
        for field in ("data_source", "tables", "profile"):
            comp.pop(field, None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = Profile.load(path)
    key = next(iter(old.components))
    assert old.data_source(key) == "epsim records" and old.data_source("any/nothing") == "datasheet"
    aic = Profile.load(profile_path("aic_h200"))
    key = next(iter(aic.components))
    assert aic.data_source(key) == "aiconfigurator" and aic.components[key].tables


def test_cost_names_the_profile_and_sources(capsys):
    assert main(["cost", "--model", "DeepSeek-V3", "--cluster", "B200", "--backend", "deepep",
                 "--ep", "8", "--tokens-per-rank", "64", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    prov = out["provenance"]
    assert prov["profile"].startswith("aic_b200") and "default for B200" in prov["profile_rule"]
    assert {c["data_source"] for c in prov["components"]} <= {"aiconfigurator", "datasheet"}
    assert prov["line"].startswith("profile aic_b200")


def test_b300_is_priced_by_its_aic_profile(capsys):
    """B300 (HGX) takes `aic_b300`, fitted on aiconfigurator-core's b300_sxm tables: DeepSeek-V3's
    block-FP8 experts and DeepEP's dispatch and combine at EP 8 come from it, fitted or
    extrapolated, none from the datasheet."""
    b300 = default_profile("B300")
    assert b300.name == aic_profile_name("B300") == "aic_b300" and b300.hardware == "B300"
    assert all(c.data_source == "aiconfigurator" and c.tables[0].startswith("b300_sxm/")
               for c in b300.components.values())
    assert main(["cost", "--model", "DeepSeek-V3", "--cluster", "B300", "--backend", "deepep",
                 "--ep", "8", "--tokens-per-rank", "64", "--dispatch-dtype", "fp8",
                 "--json"]) in (0, None)
    prov = json.loads(capsys.readouterr().out)["provenance"]
    assert prov["profile"].startswith("aic_b300") and "default for B300" in prov["profile_rule"]
    uses = {u["part"]: u for u in prov["components"] if u["time"] != "host"}
    assert {"dispatch", "experts", "combine"} <= set(uses)
    for part in ("dispatch", "experts", "combine"):
        assert uses[part]["tag"] in ("fitted", "extrapolated"), uses[part]
        assert uses[part]["data_source"] == "aiconfigurator"
    assert uses["experts"]["key"] == "deepep/experts_fp8_block/graph/low_latency"


PARTS = ["0.5.9", "0.5.10"]


@pytest.mark.parametrize("row_version, part, why", [
    ("", "", "not stated"), ("nightly-dev", "", "not stated"),
    ("0.5.14", "", "the profile's tables"), ("0.5.16", "", "the profile's tables"),
    ("0.5.9", "0.5.9", "newest collection at or below"),
    ("0.5.10.post1", "0.5.10", "newest collection at or below"),
    ("0.5.12", "0.5.10", "newest collection at or below"),
    ("0.5.8.post1", "0.5.9", "predates every collection: the nearest, 0.5.9"),
    ("0.5.1-rc0.pre1", "0.5.9", "predates every collection"),
])
def test_a_row_version_chooses_its_part(row_version, part, why):
    chosen, reason = choose_part(PARTS, row_version, "0.5.14")
    assert chosen == part and why in reason
    assert choose_part([], row_version, "0.5.14")[0] == ""          # no part ships: the profile


def test_versions_compare_by_release_then_post():
    assert version_key("0.5.8.post1") > version_key("0.5.8") > version_key("0.5.6.post2")
    assert version_key("0.5.10") > version_key("0.5.9") and version_key("dev") is None


def test_a_version_part_lays_its_components_over_the_default():
    parts = version_parts("B200")
    assert list(parts)[:2] == ["0.5.9", "0.5.10"] and aic_profile_version("B200") == "0.5.14"
    base, versioned = default_profile("B200"), versioned_profile("B200", "0.5.9")
    part = load_profile(parts["0.5.9"])
    assert versioned.name == "aic_b200+aic_b200_sglang_0.5.9"
    for key, comp in versioned.components.items():
        if key in part.components:       # the part's, tagged with it; fitted on its version's table
            assert comp.params == part.components[key].params
            assert comp.profile == part.name and all("/0.5.9/" in t for t in comp.tables)
        else:
            assert comp == base.components[key]
    assert "any/allreduce/graph/oneshot" in part.components
    assert base.components["any/allreduce/graph/oneshot"].profile == ""      # the default unchanged
    # the H200 default (our records + aic_h200's fills) takes the part over its fills
    h200 = versioned_profile("H200", "0.5.9")
    assert h200.components["any/allreduce/graph/oneshot"].profile == "aic_h200_sglang_0.5.9"
    with pytest.raises(ProfileError, match=r"version part \('0.5.11'\) of B200 must be one of "
                                           r"\['0.5.9', '0.5.10'\]"):
        versioned_profile("B200", "0.5.11")


def test_part_for_states_the_profile_the_part_and_why():
    part, line = part_for("GB300", "0.5.8.post1")
    assert part == "0.5.9" and line.startswith("profile aic_gb300 + its sglang 0.5.9 part")
    part, line = part_for("H800", "0.5.8")          # no AIC profile, no part: datasheet
    assert part == "" and line == "profile datasheet-H800: SGLang 0.5.8: no version part ships for this GPU"
