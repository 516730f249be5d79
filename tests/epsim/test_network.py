"""Networks are part of the cluster: datasheet defaults, Gb/s -> GB/s at the boundary, the
transport path per backend, and the same deployment over InfiniBand, RoCE and EFA giving
different dispatch/combine times for reasons the transport terms name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from epsim.eplb import Placement
from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.comm import RDMA_EFFICIENCY, dispatch_bytes_per_copy
from epsim.cost.transport import LATENCY_US, PROXY_US_PER_MESSAGE, WIRE_RATIO, transport_path
from epsim.errors import SpecError
from epsim.profile import Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.network import Network
from epsim.zoo import get_model, get_network

ROOT = Path(__file__).resolve().parents[2]


def test_nic_gigabits_become_gigabytes_per_gpu_once():
    assert Network("infiniband", 8, 400.0, 8).nic_gbps_per_gpu == 50.0      # 8 x 400 Gb/s / 8 bits / 8 GPUs
    p5 = get_network("efa", "H100")                                       # 32 x 100 Gb/s EFA
    assert (p5.nics_per_node, p5.nic_gbit_per_s, p5.nic_gbps_per_gpu) == (32, 100.0, 50.0)
    assert get_network("efa", "H200").system == "AWS p5en.48xlarge"
    gb300 = get_network("nvl72", "GB300")                                 # ConnectX-8, 800 Gb/s per GPU
    assert gb300.gpus_per_node == 72 and gb300.nic_gbps_per_gpu == 100.0
    assert ClusterSpec(gpu="H200").network_resolved.kind == "infiniband"
    assert ClusterSpec(gpu="H200", network={"kind": "roce", "nic_gbit_per_s": 200}).rdma_gbps_resolved == 25.0
    assert ClusterSpec(gpu="H200", network="efa", rdma_gbps=10).rdma_gbps_resolved == 10.0


def test_transport_paths_name_each_backend_over_each_kind():
    assert transport_path("deepep", "infiniband").name == "IBGDA"
    assert transport_path("deepep", "efa").per_message_us == PROXY_US_PER_MESSAGE   # no IBGDA on EFA
    assert transport_path("deepep", "infiniband").per_message_us == 0.0
    assert transport_path("mooncake", "efa").name.startswith("CPU proxy")
    assert transport_path("torch", "efa").name == "NCCL + aws-ofi-nccl"
    assert WIRE_RATIO["infiniband"] == 1.0 > WIRE_RATIO["efa"] > WIRE_RATIO["roce"]
    with pytest.raises(SpecError, match=r"cluster.network.kind \('ethernet'\) must be one of"):
        transport_path("deepep", "ethernet")


def _decode_layer(kind: str, ep: int = 32, gpu: str = "H200", backend: str = "deepep"):
    """One DeepSeek-V3 decode layer, 128 tokens per rank, uniform routing, datasheet profile."""
    model = get_model("DeepSeek-V3")
    per_node = 72 if gpu.startswith("GB") else 8
    cluster = ClusterSpec(gpu=gpu, num_nodes=max(1, ep // per_node), network=kind)
    deployment = DeploymentSpec(ep_size=ep, moe_a2a_backend=backend, deepep_mode="low_latency",
                                dispatch_dtype="fp8")
    cost = CostModel(model, cluster, deployment, Profile(name="datasheet", hardware=gpu))
    loads = np.full((1, model.num_experts), ep * 128 * model.top_k / model.num_experts)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, model.num_experts, ep),
                                               model.num_experts, ep, per_node))
    return cost, cost.moe(loads, np.full(ep, 128.0), tables, "decode")


def test_same_deployment_over_ib_roce_efa_differs_by_the_named_terms():
    ib_cost, ib = _decode_layer("infiniband")
    roce_cost, roce = _decode_layer("roce")
    efa_cost, efa = _decode_layer("efa")
    assert ib.dispatch_us[0] < roce.dispatch_us[0] < efa.dispatch_us[0]
    assert ib.combine_us[0] < roce.combine_us[0] < efa.combine_us[0]
    # explain each difference: RDMA bytes at the busiest rank over the kind's achievable GB/s,
    # plus the fabric latency, plus (EFA only) the proxy's cost per token-level message
    tr = ib.traffic
    kb = dispatch_bytes_per_copy(7168, "fp8", 8, "pair") * 1e-3
    rdma_kb = tr.rdma_copies.max() * kb
    line_gbps = 50.0 * RDMA_EFFICIENCY                        # 8 x 400 Gb/s per 8 GPUs, 80 % achieved
    for kind, got, cost in (("roce", roce, roce_cost), ("efa", efa, efa_cost)):
        extra = (rdma_kb / (line_gbps * WIRE_RATIO[kind]) - rdma_kb / line_gbps
                 + LATENCY_US[kind] - LATENCY_US["infiniband"]
                 + (PROXY_US_PER_MESSAGE * tr.rdma_copies.max() if kind == "efa" else 0.0))
        assert got.dispatch_us[0] - ib.dispatch_us[0] == pytest.approx(extra, rel=1e-6)
        assert cost.params.transport.name != ib_cost.params.transport.name


def test_one_node_does_not_touch_the_network():
    one = [_decode_layer(kind, ep=8)[1] for kind in ("infiniband", "roce", "efa")]
    assert one[0].dispatch_us[0] == one[1].dispatch_us[0] == one[2].dispatch_us[0]
    assert one[0].traffic.rdma_copies.max() == 0.0


def test_nvl72_keeps_ep64_inside_nvlink():
    _, gb200 = _decode_layer("nvl72", ep=64, gpu="GB200")
    _, h200 = _decode_layer("infiniband", ep=64, gpu="H200")
    assert gb200.traffic.rdma_copies.max() == 0.0 and not gb200.traffic.multi_node
    assert gb200.dispatch_us[0] < h200.dispatch_us[0] / 3     # 720 GB/s NVLink vs 40 GB/s NIC


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epsim.cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_cost_cli_takes_a_network_and_rejects_a_bad_one():
    common = ["cost", "--model", "DeepSeek-V3", "--backend", "deepep", "--deepep-mode",
              "low_latency", "--ep", "16", "--tokens-per-rank", "128", "--json"]
    ib = json.loads(_cli(*common, "--network", "infiniband").stdout)
    efa = json.loads(_cli(*common, "--network", "efa").stdout)
    assert (ib["transport"], efa["transport"]) == ("IBGDA", "CPU proxy (libfabric)")
    assert efa["dispatch_us"] > ib["dispatch_us"]
    bad = _cli(*common, "--network", "ethernet")        # with --json, the error is JSON too
    assert bad.returncode == 2 and bad.stderr == ""
    assert json.loads(bad.stdout) == {"error": "epsim cost: --network ('ethernet') must be one of "
                                               "['infiniband', 'roce', 'efa', 'nvl72']", "exit_code": 2}
    none = json.loads(_cli("cost", "--model", "Qwen3-30B-A3B", "--backend", "none", "--ep", "16",
                           "--tokens-per-rank", "64", "--network", "roce", "--json").stdout)
    assert none["transport"] == "NCCL net/IB (RoCEv2)" and none["rdma_gbps"] < 40.0
    nvl = _cli(*common, "--network", "nvl72")
    assert nvl.returncode == 2 and "network.kind ('nvl72') must go with an NVL72 GPU" in nvl.stdout


def test_hardware_lists_gpus_and_networks():
    out = json.loads(_cli("hardware", "--json").stdout)
    assert {g["name"] for g in out["gpus"]} >= {"GB200", "GB300", "H100", "H200"}
    kinds = {(n["kind"], n["gpu"]): n for n in out["networks"]}
    assert kinds[("infiniband", "H100")]["nic_gbps_per_gpu"] == 50.0
    assert kinds[("nvl72", "GB200")]["nics_per_node"] == 72
    assert all(n["source"] for n in out["networks"])
    text = _cli("hardware").stdout
    assert "AWS p5.48xlarge" in text and "gigabits" in text


def test_simulate_reports_the_network_it_ran_over(tmp_path):
    common = ["simulate", "scenarios/r1_qwen235b_ep64_decode.yaml", "--set", "workload.duration_s=2",
              "--set", "workload.warmup_s=1", "--no-plots", "--no-progress", "--json"]
    ib = json.loads(_cli(*common, "--set", "cluster.network=infiniband").stdout)
    efa = json.loads(_cli(*common, "--set", "cluster.network=efa").stdout)
    assert (ib["network"]["kind"], ib["network"]["transport"]) == ("infiniband", "IBGDA")
    assert efa["network"]["transport"] == "CPU proxy (libfabric)" and efa["network"]["spans_nodes"]
    assert efa["network"]["nic_gbps_per_gpu"] == ib["network"]["nic_gbps_per_gpu"] == 50.0
    # same bytes per GPU, but the proxy and latency make each EFA step slower (the step, not the
    # 1-s window's throughput, which counts whole steps: 5 of them over either network)
    assert efa["step_ms"]["mean"] > ib["step_ms"]["mean"]
