"""The eager prefill forward's host time (`epsim.cost.forward_host`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost.attention import BatchCounts
from epsim.cost.forward_host import (ATTENTION_LINEARS, FORWARD_LAUNCHES, LAYER_LAUNCHES,
                                     MLP_ACT, MLP_LINEARS, MOE_OWN, RUNNER_LAUNCHES,
                                     TP_ALLREDUCES, ForwardHost)
from epsim.cost.ledger import COLUMN
from epsim.cost.model import CostModel
from epsim.cost.provenance import provenance
from epsim.cost.tables import build_tables, contiguous_placement
from epsim.eplb import Placement
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model


def _model(tp: int = 8, engine: str | None = None, **deployment) -> CostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="H200"),
                         DeploymentSpec(ep_size=1, tp_size=tp, moe_a2a_backend="none",
                                        enable_dp_attention=False,
                                        **{"eager_prefill_host": True, **deployment}),
                         engine=engine)


def _even_step(cm: CostModel, tokens: float, batch: BatchCounts):
    """`cm`'s step over `batch` on one rank, its `tokens` routed evenly over every expert."""
    m = cm.model
    loads = np.full((m.num_moe_layers, m.num_experts), tokens * m.top_k / m.num_experts)
    tables = build_tables(Placement.on_cluster(contiguous_placement(m.num_moe_layers,
                                                                    m.num_experts, 1),
                                               m.num_experts, 1, 8))
    return cm.step(batch, loads, tables)


def _prefill(cm: CostModel, tokens: float):
    z, t = np.zeros(1), np.full(1, float(tokens))
    batch = BatchCounts(z, z, t, t, t * (t + 1) / 2, np.ones(1), "prefill", np.ones(1))
    return _even_step(cm, tokens, batch)


def test_the_count_of_a_tp_fp8_layer_on_hopper():
    host = _model().forward_host
    # block FP8 linears: a quantisation and a GEMM each; Hopper runs Triton's fused MoE
    block = sum(LAYER_LAUNCHES.values()) + ATTENTION_LINEARS * 2
    mlp = MLP_LINEARS * 2 + MLP_ACT
    assert host.moe_layer_launches == block + TP_ALLREDUCES + mlp + MOE_OWN \
        + RUNNER_LAUNCHES["triton"]
    assert host.dense_layer_launches == block + TP_ALLREDUCES + mlp
    assert host.forward_launches == sum(FORWARD_LAUNCHES.values())
    assert host.host_us == pytest.approx(host.launch_us * (
        58 * host.moe_layer_launches + 3 * host.dense_layer_launches + host.forward_launches))
    # one GPU: no all-reduce
    assert _model(tp=1).forward_host.moe_layer_launches == host.moe_layer_launches - TP_ALLREDUCES


def test_only_sglangs_mla_forward_is_counted_where_asked():
    assert _model(engine="transformers").forward_host is None
    assert _model(eager_prefill_host=False).forward_host is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qwen = CostModel(get_model("Qwen3-30B-A3B"), ClusterSpec(gpu="H200"),
                         DeploymentSpec(ep_size=1, moe_a2a_backend="none",
                                        eager_prefill_host=True))
    assert qwen.forward_host is None


def test_the_host_is_exposed_where_it_outlasts_the_device():
    host = ForwardHost(10, 8, 20, num_moe_layers=4, num_dense_layers=1, launch_us=10.0,
                       waits_host=False, source="test")
    assert host.host_us == pytest.approx(10.0 * (40 + 8 + 20))
    layers = np.full(4, 50.0)
    assert host.exposed_us(layers, 1000.0) == 0.0
    assert host.exposed_us(layers, 500.0) == pytest.approx(180.0)
    # a forward that waits on the host each MoE layer: a layer's host (100 µs) outlasts its 50
    # µs, what lies outside the MoE layers (280 µs of host) outlasts its 200 µs of device
    waits = ForwardHost(10, 8, 20, 4, 1, 10.0, True, "test")
    assert waits.exposed_us(layers, 400.0) == pytest.approx(4 * 50.0 + 80.0)
    assert waits.exposed_us(np.full(4, 150.0), 2000.0) == 0.0


def test_a_short_eager_prefill_lasts_its_host_time():
    cm = _model()
    short, long = _prefill(cm, 64), _prefill(cm, 16384)
    host = cm.forward_host.host_us
    assert short.step_us == pytest.approx(host)          # host-bound: the forward is its host
    assert long.step_us > host                           # device-bound: nothing exposed
    assert float(cm.ledger.sums[(False, "")][COLUMN["forward_host"]]) > 0
    parts = {u["part"] for u in provenance(cm)["components"]}
    assert "forward_host" in parts
