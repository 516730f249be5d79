"""The block's own ops (router, permute, top-k weighting) as their own cost term: the model's
form, its fit on the single-H200 `block_ops` records, extrapolation against both baselines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from epsim.cost.block_ops import (BLOCK_SORT_KEYS, GATE, PARTS, SMALL_SORT_KEYS,
                                  block_ops_defaults, block_ops_features, block_ops_us,
                                  block_ops_work)
from epsim.cost.linear import BLOCK_OPS_TERMS
from epsim.zoo import get_hardware

RECORDS = Path(__file__).resolve().parents[3] / "epsim" / "data" / "records" / "h200_single"
RUNS = [RECORDS / "block_ops_run1.jsonl.gz", RECORDS / "block_ops_run2.jsonl.gz"]
H200 = get_hardware("H200")


def test_parts_add_up_and_the_slowest_rank_sets_the_pace():
    params = block_ops_defaults(H200)
    tokens = np.array([[64.0, 512.0]])                     # [layers, ranks]
    pairs = tokens * 8
    whole = block_ops_us(tokens, pairs, 2048, 128, 8, params)
    alone = [block_ops_us(tokens, pairs, 2048, 128, 8, params, parts=(p,)) for p in PARTS]
    # each part pays its own kernels' launches: the parts add up to the whole
    assert whole == pytest.approx(sum(alone))
    busiest = block_ops_us(tokens[:, 1:], pairs[:, 1:], 2048, 128, 8, params)
    assert whole == pytest.approx(busiest)
    assert block_ops_us(np.zeros((1, 2)), np.zeros((1, 2)), 2048, 128, 8, params) == 0.0



@pytest.mark.parametrize("parts", [PARTS, ("router",), ("router", "combine_weighting"), ("permute",),
                                   ("permute", "combine_weighting"), (GATE,)])
@pytest.mark.parametrize("engine", ["transformers", "sglang"])
def test_per_rank_tokens_give_the_same_bits_as_broadcast_ones(rng, parts, engine):
    """`block_ops_us` on tokens per rank (the engines' path: their terms once per rank; for a
    full batch, every rank's tokens alike, the busiest rank's pairs alone) is `block_ops_us` on
    tokens broadcast over draws and layers, to the last bit, across the sort steps' key counts."""
    varied = rng.integers(0, 600, 16).astype(np.float64) * 0.5          # [ranks], some idle
    varied[[3, 7]] = 0.0
    pairs = rng.random((3, 5, 16)) * rng.choice([10.0, 300.0, 9000.0], size=(3, 5, 16))
    pairs[0, 0, :4] = 0.0                                              # [draws, layers, ranks]
    pairs[1, 0, :3] = [SMALL_SORT_KEYS, SMALL_SORT_KEYS + 1, BLOCK_SORT_KEYS]
    for tokens in (varied, np.full(16, 128.0)):
        for params in (block_ops_defaults(H200), {**block_ops_defaults(H200), "tflops": 0.5,
                                                   "sort_block_us": 3.0, "sort_device_us": 7.0}):
            want = block_ops_us(np.broadcast_to(tokens, pairs.shape), pairs, 4096, 128, 8, params,
                                parts, engine)
            got = block_ops_us(tokens, pairs, 4096, 128, 8, params, parts, engine)
            assert got.shape == want.shape == (3, 5)
            assert np.array_equal(got.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("parts", [PARTS, ("router",), ("router", "combine_weighting"), ("permute",),
                                   ("permute", "combine_weighting"), (GATE,)])
@pytest.mark.parametrize("engine, hidden, experts", [("transformers", 4096, 128),
                                                     ("sglang", 4096, 128), ("sglang", 7168, 256)])
def test_block_ops_us_is_the_design_rows_times_the_coefficients_at_the_slowest_rank(
        rng, parts, engine, hidden, experts):
    """`block_ops_us` skips the design rows the fit sees (`block_ops_features`): it is their
    product with the coefficients, at the slowest rank, up to rounding; idle ranks (no
    tokens, no pairs) launch nothing, ranks with pairs but no tokens of their own do."""
    tokens = rng.integers(0, 600, 16).astype(np.float64)                # [ranks]
    tokens[[3, 7]] = 0.0
    tokens[[4, 5]] = [16.0, 17.0]          # SGLang's DeepSeek gate: fp32 out up to 16, no cast
    pairs = rng.random((3, 5, 16)) * rng.choice([10.0, 300.0, 9000.0], size=(3, 5, 16))
    pairs[0, 0, :4] = 0.0
    pairs[1, :, 7] = 0.0                                               # rank 7 idle there
    for params in (block_ops_defaults(H200), {**block_ops_defaults(H200), "tflops": 0.5,
                                               "sort_block_us": 3.0, "sort_device_us": 7.0}):
        coef = BLOCK_OPS_TERMS.coefficients(params)
        for t in (tokens, tokens + 1.0):                   # some ranks idle, none
            want = (block_ops_features(t, pairs, hidden, experts, 8, params, parts, engine)
                    @ coef).max(axis=-1)
            got = block_ops_us(t, pairs, hidden, experts, 8, params, parts, engine)
            assert got.shape == want.shape == (3, 5)
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
            rank = block_ops_us(t[:, None], pairs[..., None], hidden, experts, 8, params, parts,
                                engine)
            np.testing.assert_allclose(rank, block_ops_features(t, pairs, hidden, experts, 8,
                                                                params, parts, engine) @ coef,
                                       rtol=1e-13, atol=0)


def test_bytes_follow_the_kernels_and_the_sort_steps_at_the_key_counts():
    work = block_ops_work(1024.0, 8192.0, 4096, 128, 8)
    assert work["router"][1] == 2 * 1024 * 128 * 4096                  # the gate GEMM's FLOPs
    assert work["permute"][0] == 4 * 4096 * 8192 + 112 * 8192          # rows read and written
    rows = block_ops_features(np.array([16.0, 17.0, 512.0, 513.0]),
                              np.array([128.0, 136.0, 4096.0, 4104.0]), 2048, 128, 8,
                              block_ops_defaults(H200))
    assert rows[:, 1].tolist() == [0, 1, 1, 1] and rows[:, 2].tolist() == [0, 0, 0, 1]
    assert BLOCK_SORT_KEYS == 4096


def test_sglang_counts_its_own_kernels_and_no_sort():
    """SGLang's block (`epsim.cost.block_ops` docstring): 4 router launches (3 where its
    DeepSeek gate GEMM writes fp32 itself, <= 16 tokens), 3 for `moe_align_block_size`, 1
    `moe_sum_reduce`; no argsort, so no sort steps whatever the pairs; no rows moved by the
    permute. Transformers' block keeps its 27 and its sort steps."""
    params = block_ops_defaults(H200)
    tokens, pairs = np.array([16.0, 17.0, 600.0]), np.array([128.0, 136.0, 4800.0])
    rows = {(engine, h, e): block_ops_features(tokens, pairs, h, e, 8, params, engine=engine)
            for engine in ("sglang", "transformers") for h, e in ((7168, 256), (4096, 128))}
    assert rows["sglang", 7168, 256][:, 0].tolist() == [7, 8, 8]
    assert rows["sglang", 4096, 128][:, 0].tolist() == [8, 8, 8]
    assert rows["transformers", 7168, 256][:, 0].tolist() == [27, 27, 27]
    assert not rows["sglang", 4096, 128][:, 1:3].any()
    assert rows["transformers", 4096, 128][:, 1:3].tolist() == [[0, 0], [1, 0], [1, 1]]
    work = block_ops_work(1024.0, 8192.0, 4096, 128, 8, engine="sglang")
    assert work["permute"][0] == 12 * 8192                             # ids, no rows
    assert work["combine_weighting"][0] == 2 * 4096 * 8192 + 2 * 1024 * 4096
    assert work["router"][1] == block_ops_work(1024.0, 8192.0, 4096, 128, 8)["router"][1]
    with pytest.raises(ValueError, match="engine"):
        block_ops_us(tokens, pairs, 4096, 128, 8, params, engine="vllm")


def test_the_gate_alone_is_the_routers_gemm_without_its_top_k():
    """The router's gate GEMM and its fp32 cast, no top-k (what a step adds beside a fit that
    timed its own top-k): SGLang 2 launches (1 where `dsv3_router_gemm` writes fp32), the same
    GEMM FLOPs, the top-k's bytes gone; transformers' `F.linear` alone."""
    params = block_ops_defaults(H200)
    tokens, pairs = np.array([16.0, 17.0, 600.0]), np.array([128.0, 136.0, 4800.0])
    gate = block_ops_features(tokens, pairs, 7168, 256, 8, params, (GATE,), "sglang")
    router = block_ops_features(tokens, pairs, 7168, 256, 8, params, ("router",), "sglang")
    assert gate[:, 0].tolist() == [1, 2, 2] and router[:, 0].tolist() == [3, 4, 4]
    assert (gate[:, 3] < router[:, 3]).all() and (gate[:, 4] == router[:, 4]).all()
    work = block_ops_work(17.0, 136.0, 7168, 256, 8, (GATE,), "sglang")[GATE]
    assert work[0] == 2 * 17 * 7168 + 2 * 256 * 7168 + 8 * 17 * 256
    assert block_ops_features(tokens, pairs, 7168, 256, 8, params, (GATE,),
                              "transformers")[:, 0].tolist() == [1, 1, 1]


def test_calibrate_fits_device_time_and_host_part_from_the_single_h200_records(tmp_path, capsys):
    import json

    from epsim.cli import main
    out = tmp_path / "p.json"
    assert main(["calibrate", "--records", *map(str, RUNS), "--out", str(out)]) == 0
    assert "any/block_ops/graph" in capsys.readouterr().out
    components = json.loads(out.read_text())["components"]
    device, host = components["any/block_ops/graph"], components["any/block_ops/host"]
    assert device["residuals"]["mape"] < 5.0 and device["valid_range"]["num_tokens_per_rank"] == [1, 16384]
    assert 1000 < device["params"]["hbm_gbps"] <= H200.hbm_gbps       # below the datasheet
    assert 1 < device["params"]["launch_us"] < 10 and device["params"]["sort_device_us"] > 0
    assert "tflops" in device["note"]           # memory-bound router GEMM: datasheet kept
    assert host["params"]["base_us"] > 100 and host["spread"]["p90_ratio"] > 1


def test_block_ops_extrapolate_in_tokens_and_shape_better_than_both_baselines():
    from epsim.validate.extrapolation import RunPair, extrapolation, stats
    rows, _ = extrapolation(RUNS, [RunPair((RUNS[0],), (RUNS[1],), "")])
    by_axis = {s.axis: s for s in stats(rows) if s.component == "local+graph/block_ops"}
    for axis in ("tokens", "shape"):
        assert by_axis[axis].num >= 12 and by_axis[axis].beats_both
        assert by_axis[axis].model_mape < 5.0
    # another machine: within its measured run-to-run spread (the baselines are run 1 itself)
    assert by_axis["run"].model_mape < 5.0


@pytest.fixture(scope="module")
def block_profile(tmp_path_factory) -> Path:
    """The shipped profile plus the block ops fitted on the shipped single-H200 records."""
    from epsim.calibrate import calibrate
    from epsim.profile import load_profile
    fitted = calibrate(RUNS).profile
    profile = load_profile()
    profile.components.update({k: v for k, v in fitted.components.items()
                               if k.startswith("any/block_ops")})
    path = tmp_path_factory.mktemp("profile") / "p.json"
    profile.save(path)
    return path


ROUTER = ("router",)


@pytest.mark.parametrize("backend, ep, parts", [
    ("mooncake", 8, {"": ROUTER}), ("torch", 8, {"": PARTS}), ("none", 8, {"": PARTS}),
    ("deepep", 8, {"normal": PARTS, "low_latency": ROUTER}),
    ("mooncake", 1, {"": PARTS}), ("deepep", 1, {"normal": PARTS, "low_latency": PARTS})])
@pytest.mark.parametrize("engine", ["sglang", "transformers"])
def test_block_ops_are_counted_once(block_profile, backend, ep, parts, engine):
    """The router always; the permute and the weighting unless the backend's kernels do them:
    low-latency kernels (Mooncake EP, DeepEP low-latency: `pair` copies) write each copy into
    its expert's rows and weight the top-k inside their combine. At EP 1 no backend runs: all
    three. Each as the serving engine runs them. An eager step adds the host overhead of the
    parts it adds (their launches' share of the measured block's 27)."""
    from epsim.cost import CostModel, build_tables, contiguous_placement
    from epsim.cost.block_ops import ENGINE_KERNELS
    from epsim.eplb import Placement
    from epsim.profile import Profile
    from epsim.spec.deployment import DeploymentSpec
    from epsim.spec.hardware import ClusterSpec
    from epsim.zoo import get_model
    model = get_model("Qwen3-30B-A3B")
    cm = CostModel(model, ClusterSpec(gpu="H200"), DeploymentSpec(ep_size=ep, moe_a2a_backend=backend),
                   Profile.load(block_profile), engine=engine)
    assert dict(cm.params.graph.block_ops_parts) == dict(cm.params.eager.block_ops_parts) == parts
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 128, ep), 128, ep, 8))
    tokens = np.full(ep, 256.0)
    loads = np.full((1, 128), ep * 256 * 8 / 128)
    for phase, mode in (("decode", cm.mode_for("decode")), ("prefill", cm.mode_for("prefill"))):
        moe = cm.moe(loads, tokens, tables, phase, graph=True)
        expected = block_ops_us(tokens[None], moe.traffic.pairs, 2048, 128, 8,
                                cm.params.graph.block_ops.params, parts[mode], engine)
        assert moe.block_ops_us == pytest.approx(expected)
        eager = cm.moe(loads, tokens, tables, phase, graph=False)
        host = (cm.params.eager.block_ops.host_us
                * sum(ENGINE_KERNELS[engine][p] for p in parts[mode]) / 27)
        assert host > 5 and cm.params.eager.block_ops_host[mode] == pytest.approx(host)
        assert eager.block_ops_us == pytest.approx(expected + host)


def test_simulate_shows_block_ops_as_their_own_fitted_line(block_profile, tmp_path):
    import json

    from epsim.cli import main
    out = tmp_path / "run"
    assert main(["simulate", "scenarios/default.yaml", "--out", str(out), "--no-progress",
                 "--set", f"profile={block_profile}", "--set", "workload.duration_s=1.0",
                 "--set", "workload.warmup_s=0.2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["time_breakdown_frac"]["block_ops"] > 0
    assert len(summary["block_ops_us"]) == 48 and min(summary["block_ops_us"]) > 0
    uses = {(u["part"], u["time"]): u for u in summary["provenance"]["components"]}
    assert uses[("block_ops", "device")]["key"] == "any/block_ops/graph"
    assert uses[("block_ops", "device")]["tag"] in ("fitted", "extrapolated")
    assert "block_ops" in summary["layer_bands_us"]
    header = (out / "timeseries.csv").read_text().splitlines()[0].split(",")
    assert "block_ops_us" in header


def test_provenance_says_where_the_block_ops_come_from(block_profile):
    from epsim.commands.cost import layer_cost
    from epsim.profile import Profile
    from epsim.zoo import get_model
    profile = Profile.load(block_profile)

    def block_use(backend):
        result = layer_cost(get_model("Qwen3-30B-A3B"), "H200", backend, 8, 64, profile=profile,
                            time_mode="graph")
        return next(u for u in result["provenance"]["components"] if u["part"] == "block_ops")
    router_only, full = block_use("mooncake"), block_use("torch")
    assert router_only["key"] == full["key"] == "any/block_ops/graph"
    assert router_only["tag"] == "fitted" and router_only["axes"] == []
    assert full["tag"] == "extrapolated" and "live block's torch ops" in full["axes"][0]
    datasheet = layer_cost(get_model("Qwen3-30B-A3B"), "H200", "mooncake", 8, 64,
                           profile=Profile(name="d", hardware="H200"), time_mode="graph")
    assert "block ops" in datasheet["provenance"]["datasheet"]


@pytest.mark.parametrize("tp_size, moe_tp_size, ep_size", [(8, 8, 1), (1, 1, 1), (8, 1, 8)])
def test_fused_moe_fit_holds_the_permute_and_weighting(tp_size, moe_tp_size, ep_size):
    """Experts fitted on aiconfigurator's `moe_perf` (SGLang's whole fused MoE call, its
    `moe_align_block_size` and `moe_sum_reduce` inside, and for the Triton kernel H200 runs its
    collector's top-k too) leave the step the router's gate GEMM alone; the same layout priced
    by a profile whose experts fit has no such table adds all three parts."""
    from epsim.cost import CostModel
    from epsim.cost.block_ops_parts import fused_moe_fit
    from epsim.default_profile import default_profile
    from epsim.spec.deployment import DeploymentSpec
    from epsim.spec.hardware import ClusterSpec
    from epsim.zoo import get_model
    model = get_model("DeepSeek-R1")
    profile = default_profile("H200")
    fused = profile.components["any/experts_fp8_block/graph"]
    assert fused_moe_fit(fused) and not fused_moe_fit(None)
    # the same fit, its tables dropped: not known to hold the fused call
    unfused = profile.model_copy(update={"components": {
        **profile.components, "any/experts_fp8_block/graph": fused.model_copy(update={"tables": []})}})
    spec = DeploymentSpec(tp_size=tp_size, moe_tp_size=moe_tp_size, ep_size=ep_size,
                          moe_a2a_backend="none")
    for prof, parts in ((profile, (GATE,)), (unfused, PARTS)):
        cm = CostModel(model, ClusterSpec(gpu="H200"), spec, prof)
        assert set(cm.params.graph.block_ops_parts.values()) == {parts}
        assert set(cm.params.eager.block_ops_parts.values()) == {parts}
