"""Calibration: the hold-out protocol, the fit against known parameters, provenance, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.epsim.calibrate_fixtures import TRUTH, synthetic_records, write_synthetic
from epsim.calibrate import Holdout, calibrate
from epsim.cli import main
from epsim.eplb import Placement
from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.record import predict_record
from epsim.errors import SpecError
from epsim.profile import Component, ExtrapolationWarning, Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """torch records over the whole grid, timed by TRUTH with 3% log-normal noise."""
    return write_synthetic(tmp_path_factory.mktemp("records") / "bench.jsonl", noise=0.03)


# -- hold-out protocol ---------------------------------------------------------------------------
def test_default_rule_fits_powers_of_four_and_holds_out_the_hot_set():
    rule = Holdout.parse(None)
    assert rule.describe() == "fit_tokens=1,4,16,64,256,1024,4096;skew=hotset"
    assert Holdout.parse(rule.describe()) == rule == Holdout.parse("default")
    recs = {(r.kind, r.num_tokens_per_rank, r.skew["kind"]): r
            for r in synthetic_records(tokens=(4, 8), skews=({"kind": "uniform"},
                                                             {"kind": "hotset", "num_hot": 16,
                                                              "hot_frac": 0.5}))}
    assert not rule.held_out(recs[("dispatch", 4, "uniform")])
    assert rule.held_out(recs[("dispatch", 8, "uniform")])          # token count not fitted
    assert rule.held_out(recs[("experts", 4, "hotset")])            # skew never fitted
    assert not Holdout.parse("none").held_out(recs[("experts", 8, "hotset")])
    custom = Holdout.parse("tokens=8;skew=zipf")
    assert custom.held_out(recs[("combine", 8, "uniform")])
    assert not custom.held_out(recs[("combine", 4, "hotset")])


@pytest.mark.parametrize("text, message", [
    ("tokens", r"holdout clause \('tokens'\) must be KEY=V1,V2"),
    ("batch=4", r"holdout clause \('batch=4'\) must be KEY=V1,V2 with KEY one of"),
    ("tokens=four", r"token counts must be integers"),
    ("skew=lumpy", r"holdout skew \(lumpy\) must be among"),
])
def test_bad_holdout_rules_name_the_clause(text, message):
    with pytest.raises(SpecError, match=message):
        Holdout.parse(text)


# -- the fit ---------------------------------------------------------------------------------------
def test_fit_recovers_the_parameters_that_made_the_records(tmp_path):
    cal = calibrate([write_synthetic(tmp_path / "exact.jsonl", noise=0.0)])
    for key in ("torch/dispatch", "torch/combine", "any/experts/graph", "torch/experts/host",
                "torch/moe_layer"):
        fitted, truth = cal.profile.components[key].params, TRUTH.components[key].params
        assert set(fitted) == set(truth), key            # rdma_gbps: not in the data, not fitted
        for name, value in truth.items():
            assert fitted[name] == pytest.approx(value, rel=1e-3, abs=1e-6), (key, name)
    # one path: the kernel model from the grouped GEMM alone, torch's stage is that kernel
    # with the block's permute and weighting plus its host overhead (no `torch/experts` fit)
    assert not any(k.startswith("torch/experts") and k != "torch/experts/host"
                   for k in cal.profile.components)
    experts = cal.profile.components["any/experts/graph"]
    assert experts.source == "fit" and experts.residuals["mape"] < 1e-3
    assert experts.valid_range == {"num_tokens_per_rank": [1.0, 4096.0],
                                   "hidden_size": [2048.0, 4096.0], "ep_size": [2.0, 2.0]}
    assert cal.profile.components["torch/experts/host"].residuals["mape"] < 1e-3


def test_noisy_fit_predicts_held_out_records(synthetic):
    """3% noise: the parameters trade off (fixed work hidden or not), the predictions of
    records the fit never saw (other token counts, the hot set) stay within the noise."""
    cal = calibrate([synthetic])
    held = [r for r in synthetic_records(noise=0.0, seed=5) if cal.holdout.held_out(r)]
    assert {r.skew["kind"] for r in held} == {"uniform", "zipf", "hotset"}
    errors = [abs(predict_record(r, cal.profile) / predict_record(r, TRUTH) - 1) for r in held]
    assert max(errors) < 0.08
    for key in ("torch/dispatch", "torch/combine", "torch/experts/host"):
        # a small batch's fixed cost: `base_us` plus the fixed work a transfer could hide (how
        # the two split is set only by the few points whose transfer outlasts it)
        fitted, truth = cal.profile.components[key].params, TRUTH.components[key].params
        fixed = fitted["base_us"] + fitted.get("overlap_us", 0.0)
        assert fixed == pytest.approx(truth["base_us"] + truth.get("overlap_us", 0.0), rel=0.1), key


def test_fit_never_sees_held_out_records(tmp_path):
    """Corrupt only the held-out records: the fit must not move."""
    records = synthetic_records()
    rule = Holdout.parse(None)
    clean = tmp_path / "clean.jsonl"
    dirty = tmp_path / "dirty.jsonl"
    from epsim.records import write_records
    write_records(records, clean, append=False)
    write_records([r.model_copy(update={"median_us": r.median_us * 3, "p90_us": r.p90_us * 3})
                   if rule.held_out(r) else r for r in records], dirty, append=False)
    a, b = calibrate([clean]), calibrate([dirty])
    assert a.num_fit == b.num_fit == sum(not rule.held_out(r) for r in records)
    for key, comp in a.profile.components.items():
        assert b.profile.components[key].params == pytest.approx(comp.params)


def test_bandwidth_never_exceeds_the_datasheet(tmp_path):
    """Records whose byte term is zero-cost must not yield an infinite bandwidth."""
    fast = Profile(name="fast", hardware="H200", components={
        **TRUTH.components,
        "torch/dispatch": TRUTH.components["torch/dispatch"].model_copy(
            update={"params": {"base_us": 900.0, "nvl_gbps": 1e9, "per_copy_us": 0.05}})})
    path = tmp_path / "r.jsonl"
    from epsim.records import write_records
    write_records(synthetic_records(truth=fast, tokens=(1, 16, 256, 4096)), path, append=False)
    params = calibrate([path]).profile.components["torch/dispatch"].params
    # flat times: either the bandwidth sits at its datasheet bound, or the fixed work hides
    # every transfer and the bandwidth is not fitted at all (the datasheet value stays)
    assert params.get("nvl_gbps", 0.0) <= ClusterSpec(gpu="H200").nvlink_gbps_resolved + 1e-9
    assert "nvl_gbps" in params or params["overlap_us"] > 0
    assert "rdma_gbps" not in params                     # one node: no RDMA column to fit


def test_a_byte_term_below_the_noise_keeps_its_datasheet_value(tmp_path):
    """A host-bound stage: 1 ms flat, bytes costing ~nothing, 5 % noise. The fitted bandwidth
    would follow the noise; under 2 standard errors it keeps the datasheet value and says so."""
    flat = Profile(name="flat", hardware="H200", components={
        **TRUTH.components,
        "torch/dispatch": TRUTH.components["torch/dispatch"].model_copy(
            update={"params": {"base_us": 1000.0, "nvl_gbps": 1e6}})})
    path = tmp_path / "flat.jsonl"
    from epsim.records import write_records
    write_records(synthetic_records(truth=flat, noise=0.05, seed=3, tokens=(1, 16, 256, 1024)),
                  path, append=False)
    cal = calibrate([path], holdout=Holdout.parse("none"))
    fit = cal.fits["torch/dispatch"]
    assert "nvl_gbps" not in fit.params
    # below 2 standard errors, or hidden under the fixed work altogether: either way not fitted
    assert "datasheet kept" in fit.note and "nvl_gbps" in fit.note
    assert cal.profile.components["torch/dispatch"].note == fit.note
    # a byte term well above the noise is fitted (the combine of the same records)
    assert cal.fits["torch/combine"].params["nvl_gbps"] == pytest.approx(200.0, rel=0.2)


def test_weak_columns_are_the_coefficients_under_two_standard_errors():
    from epsim.calibrate.fit import _weak_columns
    rows = np.stack([np.ones(6), np.arange(6.0)], axis=1)
    for y, weak in (([1000, 1003, 998, 1001, 1002, 999], [1]),       # slope lost in the noise
                    ([1000, 1101, 1199, 1300, 1402, 1499], [])):     # slope 100 per step
        y = np.asarray(y, dtype=float)
        coef = np.linalg.lstsq(rows / y[:, None], np.ones(6), rcond=None)[0]
        assert _weak_columns(rows, y, coef, relative=True, candidates=[1]) == weak


def test_profile_provenance_names_its_records(synthetic, tmp_path):
    cal = calibrate([synthetic], name="syn")
    prov = cal.profile.provenance
    assert [s.path for s in prov.records] == [str(synthetic)]
    assert prov.records[0].num_records == 390 and len(prov.records[0].sha256) == 64
    import hashlib
    assert prov.records[0].sha256 == hashlib.sha256(synthetic.read_bytes()).hexdigest()
    assert prov.device == "2x NVIDIA H200" and prov.commit == "abc123"
    assert prov.versions == {"torch": "2.11.0", "nccl": "2.28.9"}
    assert prov.holdout["rule"] == Holdout.parse(None).describe()
    assert prov.holdout["num_fit"] + prov.holdout["num_held_out"] == 390
    out = tmp_path / "p.json"
    cal.profile.save(out)
    assert Profile.load(out).components == cal.profile.components


def test_cost_model_warns_outside_the_fitted_range(synthetic):
    profile = calibrate([synthetic]).profile
    model = get_model("Qwen3-30B-A3B")
    with pytest.warns(ExtrapolationWarning, match=r"ep_size \(8\) outside fitted \[2, 2\]"):
        cm = CostModel(model, ClusterSpec(gpu="H200"), DeploymentSpec(ep_size=8,
                                                                        moe_a2a_backend="torch"),
                       profile)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 8), 128, 8, 8))
    with pytest.warns(ExtrapolationWarning, match=r"num_tokens_per_rank \(8192\) outside fitted"):
        cm.moe(np.full((1, 128), 8 * 8192 * 8 / 128), np.full(8, 8192.0), tables)
    with pytest.warns(ExtrapolationWarning, match=r"hidden_size \(7168\) outside fitted"):
        CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="H200"),
                  DeploymentSpec(ep_size=2, moe_a2a_backend="torch"), profile)


def test_cpu_profile_is_not_applied_to_a_gpu_cluster(tmp_path):
    records = [r.model_copy(update={"provenance": r.provenance.model_copy(
        update={"device": "2x cpu (gloo)", "hardware": ""})}) for r in synthetic_records(
        tokens=(1, 4, 16, 64), skews=({"kind": "uniform"},))]
    path = tmp_path / "cpu.jsonl"
    from epsim.records import write_records
    write_records(records, path, append=False)
    profile = calibrate([path]).profile
    assert profile.hardware == "cpu" and profile.components["torch/dispatch"].source == "fit"
    from epsim.cost import ProfileHardwareWarning
    with pytest.warns(ProfileHardwareWarning, match="measured on cpu"):
        CostModel(get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200"), DeploymentSpec(ep_size=2),
                  profile)


# -- the command -----------------------------------------------------------------------------------
def test_calibrate_command_writes_the_profile(synthetic, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main(["calibrate", "--records", str(synthetic), "--out", str(out), "--name", "syn",
                 "--backends", "torch", "mooncake"]) == 0
    text = capsys.readouterr()
    assert "torch/dispatch" in text.out and f"wrote {out}" in text.out
    notes = [line for line in text.out.splitlines() if line.startswith("note: ")]
    assert any("backend 'mooncake': no records" in n for n in notes)   # one backend absent: noted
    data = json.loads(out.read_text())
    assert data["name"] == "syn" and data["components"]["torch/combine"]["source"] == "fit"


def test_calibrate_command_errors_are_one_line(tmp_path, capsys):
    assert main(["calibrate", "--records", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such record file" in capsys.readouterr().err
    assert main(["calibrate", "--records", str(tmp_path / "x.jsonl"), "--holdout", "tokens"]) == 2


def test_fp8_dispatch_gets_its_own_dispatch_combine_and_layout_components(tmp_path):
    """An FP8 dispatch casts on send and the experts take FP8 rows, which the backend's layout
    dequantizes: those parts are fitted apart from BF16 (`mooncake/dispatch/graph/fp8`,
    `mooncake/layout/graph/fp8`); the kernel model is one for both."""
    truth = Profile(name="truth", hardware="H200", components={
        "mooncake/dispatch/graph": Component(params={"base_us": 20.0, "nvl_gbps": 300.0,
                                                     "per_copy_us": 0.0}),
        "mooncake/dispatch/graph/fp8": Component(params={"base_us": 26.0, "nvl_gbps": 300.0,
                                                         "per_copy_us": 0.004}),
        "mooncake/combine/graph": Component(params={"base_us": 15.0, "nvl_gbps": 250.0,
                                                    "per_copy_us": 0.0}),
        "any/experts/graph": TRUTH.components["any/experts/graph"],
        "mooncake/layout/graph": Component(params={"base_us": 60.0, "hbm_gbps": 1200.0}),
        "mooncake/layout/graph/fp8": Component(params={"base_us": 80.0, "hbm_gbps": 600.0}),
    })
    from epsim.records import write_records
    path = tmp_path / "mooncake.jsonl"
    grid = dict(tokens=(1, 4, 16, 64, 256, 1024), skews=({"kind": "uniform"},), truth=truth,
                backend="mooncake", mode="graph")
    write_records(synthetic_records(**grid) + synthetic_records(dispatch_dtype="fp8", **grid),
                  path, append=False)
    profile = calibrate([path]).profile
    keys = {k for k in profile.components if k.startswith("mooncake/")}
    assert keys == {"mooncake/dispatch/graph", "mooncake/dispatch/graph/fp8",
                    "mooncake/combine/graph", "mooncake/combine/graph/fp8",
                    "mooncake/layout/graph", "mooncake/layout/graph/fp8",
                    "mooncake/moe_layer/graph"}
    assert "any/experts/graph" in profile.components            # the kernel, from `local`
    for key in keys - {"mooncake/moe_layer/graph"}:
        assert profile.components[key].residuals["mape"] < 0.01, key
    for key in ("mooncake/layout/graph", "mooncake/layout/graph/fp8"):
        for name, value in truth.components[key].params.items():
            assert profile.components[key].params[name] == pytest.approx(value, rel=1e-3)
    # the simulator reads the FP8 components for an FP8 deployment, BF16 ones otherwise
    model, cluster = get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200")
    fp8 = CostModel(model, cluster, DeploymentSpec(ep_size=2, moe_a2a_backend="mooncake",
                                                   dispatch_dtype="fp8"), profile)
    bf16 = CostModel(model, cluster, DeploymentSpec(ep_size=2, moe_a2a_backend="mooncake",
                                                    dispatch_dtype="bf16"), profile)
    assert fp8.params.graph.dispatch[""].params["base_us"] == pytest.approx(26.0, rel=1e-3)
    assert bf16.params.graph.dispatch[""].params["base_us"] == pytest.approx(20.0, rel=1e-3)
    assert fp8.params.graph.layout[""].params["base_us"] == pytest.approx(80.0, rel=1e-3)
    assert bf16.params.graph.layout[""].params["base_us"] == pytest.approx(60.0, rel=1e-3)
    assert fp8.params.graph.experts.params == bf16.params.graph.experts.params


def test_component_lookup_falls_back_part_by_part():
    profile = Profile(name="p", hardware="H200", components={
        "deepep/dispatch/low_latency": Component(params={"base_us": 1.0}),
        "deepep/dispatch": Component(params={"base_us": 2.0}),
        "any/experts": Component(params={"base_us": 3.0})})
    assert profile.params("deepep", "dispatch", "low_latency/fp8") == {"base_us": 1.0}
    assert profile.params("deepep", "dispatch", "normal/fp8") == {"base_us": 2.0}
    assert profile.params("mooncake", "experts", "fp8") == {"base_us": 3.0}
    assert profile.component("mooncake", "dispatch", "fp8") is None


def test_importing_calibration_and_validation_loads_no_torch():
    import subprocess
    import sys
    code = ("import sys, epsim.calibrate, epsim.validate, epsim.commands.calibrate, "
            "epsim.commands.validate; print('torch' in sys.modules, 'live' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_simulator_uses_the_fitted_layer_and_allgather_components():
    profile = Profile(name="p", hardware="H200", components={
        "torch/moe_layer": Component(params={"sync_us": 50.0}),
        "none/allreduce": Component(params={"base_us": 20.0, "nvl_gbps": 100.0}),
        "none/allgather": Component(params={"base_us": 300.0, "nvl_gbps": 100.0})})
    model, cluster = get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200")
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, 2), 128, 2, 8))
    loads, tokens = np.full((1, 128), 2 * 64 * 8 / 128), np.full(2, 64.0)
    torch_cm = CostModel(model, cluster, DeploymentSpec(ep_size=2, moe_a2a_backend="torch"), profile)
    moe = torch_cm.moe(loads, tokens, tables)
    assert moe.layer_us[0] == pytest.approx(moe.dispatch_us[0] + moe.experts_us[0]
                                            + moe.combine_us[0] + moe.block_ops_us[0] + 50.0)
    none_cm = CostModel(model, cluster, DeploymentSpec(ep_size=2, moe_a2a_backend="none"), profile)
    none = none_cm.moe(loads, tokens, tables)
    gathered_kb = 128 * 2048 * 2.0 * 0.5 * 1e-3                    # (n-1)/n of the batch, once
    assert none.dispatch_us[0] == pytest.approx(300.0 + gathered_kb / 100.0)
    assert none.combine_us[0] == pytest.approx(20.0 + 2 * gathered_kb / 100.0)
