"""Device time vs host overhead (`--mode graph|eager`), and the provenance of every part of a
prediction: fitted, extrapolated or datasheet, with its share of the time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from epsim.commands.cost import layer_cost
from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.errors import SpecError
from epsim.profile import Component, Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

ROOT = Path(__file__).resolve().parents[3]
RANGE = {"num_tokens_per_rank": [1.0, 1024.0], "hidden_size": [2048.0, 2048.0],
         "ep_size": [2.0, 2.0]}


def _epsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epsim.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def _comp(spread=None, **params) -> Component:
    return Component(params=params, source="fit", valid_range=RANGE, spread=spread or {})


@pytest.fixture()
def split_profile() -> Profile:
    """Device-only components for mooncake, and host overheads fitted apart."""
    comm = dict(base_us=20.0, nvl_gbps=150.0, per_copy_us=0.0, slot_us_per_kb=0.0)
    return Profile(name="split", hardware="H200", components={
        "mooncake/dispatch/graph": _comp({"fit_log_sd": 0.05}, **comm),
        "mooncake/combine/graph": _comp({"fit_log_sd": 0.05}, **comm),
        "any/experts/graph": _comp({"fit_log_sd": 0.04}, base_us=30.0, per_expert_us=0.5,
                                   hbm_gbps=3000.0, tflops=400.0),
        "mooncake/layout/graph": _comp({"fit_log_sd": 0.04}, base_us=60.0, hbm_gbps=1200.0),
        "mooncake/dispatch/host": _comp({"p10_ratio": 0.8, "p90_ratio": 1.5}, base_us=200.0),
        "mooncake/combine/host": _comp({"p10_ratio": 0.8, "p90_ratio": 1.5}, base_us=100.0),
        "mooncake/experts/host": _comp({"p10_ratio": 0.8, "p90_ratio": 1.5}, base_us=300.0),
        "any/block_ops/graph": _comp({"fit_log_sd": 0.03}, launch_us=3.0, sort_block_us=20.0,
                                     sort_device_us=50.0, hbm_gbps=2000.0, tflops=600.0),
        "any/block_ops/host": _comp({"p10_ratio": 0.8, "p90_ratio": 1.5}, base_us=800.0),
    })


def _layer(profile, mode, tokens=64, backend="mooncake", ep=2, model="Qwen3-30B-A3B"):
    return layer_cost(get_model(model), "H200", backend, ep, tokens, profile=profile,
                      time_mode=mode)


def test_eager_step_is_device_time_plus_host_overhead(split_profile):
    graph, eager = _layer(split_profile, "graph"), _layer(split_profile, "eager")
    assert graph["graph"] and not eager["graph"]
    assert graph["host_us"] == {"dispatch": 0.0, "experts": 0.0, "combine": 0.0, "block_ops": 0.0}
    # Mooncake's low-latency kernels lay rows out and weight them: the block adds its router
    # alone, and the host overhead of its launches as SGLang runs it (4) per launch of the
    # measured block (transformers' 27)
    assert eager["host_us"] == pytest.approx({"dispatch": 200.0, "experts": 300.0,
                                              "combine": 100.0, "block_ops": 800.0 * 4 / 27})
    for kind, host in eager["host_us"].items():
        assert eager[f"{kind}_us"] == pytest.approx(graph[f"{kind}_us"] + host)
    # auto: a decode-sized batch replays a graph, a prefill-sized one runs eagerly
    assert _layer(split_profile, "auto", tokens=64)["graph"]
    assert not _layer(split_profile, "auto", tokens=4096)["graph"]


def test_bands_combine_device_spread_and_host_distribution(split_profile):
    graph, eager = _layer(split_profile, "graph"), _layer(split_profile, "eager")
    z = 1.2815515655446004
    d = graph["dispatch_us"]
    assert graph["dispatch_p10_us"] == pytest.approx(d * np.exp(-z * 0.05))
    assert graph["dispatch_p90_us"] == pytest.approx(d * np.exp(z * 0.05))
    assert eager["dispatch_p10_us"] == pytest.approx(d * np.exp(-z * 0.05) + 160.0)
    assert eager["dispatch_p90_us"] == pytest.approx(d * np.exp(z * 0.05) + 300.0)
    for r in (graph, eager):
        assert r["layer_p10_us"] < r["layer_us"] < r["layer_p90_us"]


def test_provenance_tags_fitted_and_host_parts(split_profile):
    prov = _layer(split_profile, "eager")["provenance"]
    parts = {(u["part"], u["time"]): u for u in prov["components"]}
    assert parts[("dispatch", "device")]["key"] == "mooncake/dispatch/graph"
    assert parts[("dispatch", "host")]["key"] == "mooncake/dispatch/host"
    assert parts[("block_ops", "device")]["key"] == "any/block_ops/graph"
    assert parts[("block_ops", "host")]["key"] == "any/block_ops/host"
    # the experts: the kernel model for every backend, the backend's layout work its own part
    assert parts[("experts", "device")]["key"] == "any/experts/graph"
    assert parts[("experts", "host")]["key"] == "mooncake/experts/host"
    assert parts[("layout", "device")]["key"] == "mooncake/layout/graph"
    assert all(u["tag"] == "fitted" for u in prov["components"])
    assert sum(u["share"] for u in prov["components"]) == pytest.approx(1.0)
    assert prov["measured_share"] == pytest.approx(1.0)
    # outside the fitted tokens: extrapolated, naming the axis
    far = _layer(split_profile, "graph", tokens=4096)["provenance"]
    axes = {u["part"]: u["axes"] for u in far["components"]}
    assert any("num_tokens_per_rank (4096) outside fitted [1, 1024]" in a for a in axes["experts"])
    assert far["measured_share"] == 0.0 and far["extrapolated_share"] == pytest.approx(1.0)


def test_bad_time_mode_is_one_line():
    m = get_model("Qwen3-30B-A3B")
    with pytest.raises(SpecError, match=r"mode \('fast'\) must be one of"):
        CostModel(m, ClusterSpec(gpu="H200"), DeploymentSpec(ep_size=2), time_mode="fast")


def test_cost_cli_names_deepep_datasheet_components():
    proc = _epsim("cost", "--model", "DeepSeek-V3", "--backend", "deepep", "--ep", "64",
                  "--tokens-per-rank", "128")
    assert proc.returncode == 0, proc.stderr
    assert "time: device time (CUDA-graph step), decode phase, --mode auto" in proc.stdout
    line = next(l for l in proc.stdout.splitlines() if "measured:" in l)
    # a BF16 dispatch: no table times it (AIC's DeepEP dispatch is FP8), the datasheet, its NIC
    # rate too; the low-latency combine fitted on AIC's tables of 1-8 nodes (EP 8-64)
    assert "datasheet:" in line and "dispatch" in line and "RDMA" in line
    assert "extrapolated" not in line
    proc = _epsim("cost", "--model", "DeepSeek-V3", "--backend", "deepep", "--ep", "64",
                  "--tokens-per-rank", "128", "--deepep-mode", "normal", "--mode", "eager",
                  "--json")
    data = json.loads(proc.stdout)
    assert data["time_mode"] == "eager" and data["time"] == "device+host"
    uses = {u["part"]: u for u in data["provenance"]["components"] if u["time"] != "host"}
    assert (uses["dispatch"]["tag"], uses["combine"]["tag"]) == ("datasheet", "extrapolated")
    # DeepSeek-V3's block-FP8 experts: DeepEP's own MoE runner (its normal layout in an eager
    # step), fitted on aiconfigurator's h200_sxm table, filled into the H200 default from aic_h200
    experts = uses["experts"]
    assert experts["key"] == "deepep/experts_fp8_block/normal" and experts["tag"] == "fitted"
    assert (experts["profile"], experts["data_source"]) == ("aic_h200", "aiconfigurator")
    assert uses["dispatch"]["data_source"] == "datasheet"
    # eager: DeepEP never ran on our machines, the H200 default takes its normal combine from
    # aic_h200 (fitted on AIC's EP 8 table, extrapolated to EP 64 and over RDMA)
    assert (uses["combine"]["key"], uses["combine"]["profile"]) == ("deepep/combine/normal",
                                                                    "aic_h200")
    assert any("ep_size (64)" in a for a in uses["combine"]["axes"])
    assert set(data["provenance"]["datasheet"]) >= {"dispatch", "RDMA"}


def test_simulate_deepep_scenario_names_datasheet_components(tmp_path):
    out = tmp_path / "run"
    proc = _epsim("simulate", "scenarios/deepseek_v3_decode.yaml", "--out", str(out),
                  "--no-plots", "--no-progress", "--set", "workload.duration_s=0.3",
                  "--set", "workload.warmup_s=0.0")
    assert proc.returncode == 0, proc.stderr
    assert "provenance           profile datasheet-H800" in proc.stdout     # no H800 profile
    prov = json.loads((out / "summary.json").read_text())["provenance"]
    assert {"attention", "dispatch", "combine"} <= set(prov["datasheet"])
    shares = sum(prov[f"{t}_share"] for t in ("measured", "extrapolated", "datasheet"))
    assert shares == pytest.approx(1.0)
    assert all(u["tag"] in ("fitted", "extrapolated", "datasheet") for u in prov["components"])


def test_single_gpu_kernel_fits_cost_attention_and_dense_parts():
    """With `any/attention_*/graph` and `any/dense/graph` fitted, a GQA step's attention is the
    projections plus the fitted kernels and the shared experts the dense MLP physics; an MLA
    model's attention is its own model (`epsim.cost.mla`), never the GQA kernels' fits; the
    provenance names those components."""
    from epsim.cost import BatchCounts
    from epsim.cost.attention import attention_heads
    from epsim.cost.flash import decode_work, kernel_us
    from epsim.cost.provenance import provenance
    from epsim.eplb.placement import Placement
    kernel = dict(base_us=10.0, wave_us=1.0, per_split_us=0.5, hbm_gbps=3000.0, tflops=400.0)
    dense = dict(base_us=10.0, per_expert_us=0.0, hbm_gbps=3000.0, tflops=400.0, wave_us=1.0)
    profile = Profile(name="kernels", hardware="H200", components={
        "any/attention_decode/graph": _comp(**kernel), "any/attention_prefill/graph": _comp(**kernel),
        "any/dense/graph": _comp(**dense)})
    slower = Profile(name="slow", hardware="H200", components={
        **profile.components, "any/attention_decode/graph": _comp(**{**kernel, "base_us": 60.0})})
    gqa = get_model("Qwen3-235B-A22B")
    cm = CostModel(gqa, ClusterSpec(gpu="H200", num_nodes=4), DeploymentSpec(ep_size=32), profile)
    assert cm.params.attention.kernels is not None and cm.params.dense is not None
    batch = BatchCounts.uniform_decode(32, 64, 4096.0)
    cm_slow = CostModel(gqa, ClusterSpec(gpu="H200", num_nodes=4), DeploymentSpec(ep_size=32), slower)
    assert cm_slow._attention_layer_us(batch) == pytest.approx(cm._attention_layer_us(batch) + 50.0)
    # the decode kernel term is the flash kernel over the batch's 64 sequences of 4096 keys
    work = decode_work(np.array([64.0]), np.array([64 * 4096.0]), *attention_heads(gqa), 132)
    assert kernel_us(work, kernel)[0] > kernel["base_us"] + kernel["wave_us"]
    m = get_model("DeepSeek-V3")
    ds = CostModel(m, ClusterSpec(gpu="H200", num_nodes=4), DeploymentSpec(ep_size=32), profile)
    ds_slow = CostModel(m, ClusterSpec(gpu="H200", num_nodes=4), DeploymentSpec(ep_size=32), slower)
    assert ds.params.attention.mla is not None
    assert ds_slow._attention_layer_us(batch) == ds._attention_layer_us(batch)   # GQA fits unread
    tables = build_tables(Placement.on_cluster(
        contiguous_placement(m.num_moe_layers, m.num_experts, 32), m.num_experts, 32, 8))
    loads = np.full((m.num_moe_layers, m.num_experts), 32 * 64 * m.top_k / m.num_experts)
    ds.step(batch, loads, tables)
    uses = {u["part"]: u for u in provenance(ds)["components"]}
    assert uses["attention"]["key"] == "" and uses["attention"]["tag"] == "datasheet"
    assert any(a.startswith("MLA bmm: datasheet") for a in uses["attention"]["axes"])
    assert uses["shared_experts"]["key"] == "any/dense/graph"
