"""SGLang's CUDA-graph batch padding: which batches pad, and the padded rows' MoE loads."""

import numpy as np
import pytest

from epsim.cost.attention import BatchCounts
from epsim.cost.graph_padding import capture_sizes, pad_rows, padded_size
from epsim.sim import Simulation
from epsim.sim.stepper import ReferenceStepper, moe_draws
from epsim.spec import scenario_from_dict


def qwen_tp4(**deployment) -> Simulation:
    """Qwen3-235B-A22B at TP4 (MoE-TP 4, EP 1) on H200: the silicon rows' deployment."""
    return Simulation(scenario_from_dict({
        "name": "pad", "model": "Qwen3-235B-A22B", "cluster": {"gpu": "H200", "num_nodes": 1},
        "deployment": {"ep_size": 1, "tp_size": 4, "moe_tp_size": 4, "enable_dp_attention": False,
                       "moe_a2a_backend": "none", "quantization": "fp8_block", **deployment},
        "workload": {"arrivals": {"kind": "concurrency", "clients": 9},
                     "input_len": {"kind": "fixed", "value": 1000},
                     "output_len": {"kind": "fixed", "value": 100}, "duration_s": 1.0}},
        where="test"))


def test_capture_sizes_are_sglangs():
    sizes = capture_sizes(512)
    assert sizes[:7] == (1, 2, 4, 8, 12, 16, 24)
    assert 256 in sizes and 264 not in sizes and 272 in sizes and 496 in sizes
    assert sizes[-1] == 512
    assert capture_sizes(256)[-1] == 256
    spec = capture_sizes(512, speculative=True)
    assert spec[:10] == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
    assert 64 in spec and 68 not in spec and 72 in spec and spec[-1] == 512


@pytest.mark.parametrize("raw, padded", [(1, 1), (3, 4), (5, 8), (9, 12), (13, 16), (17, 24),
                                         (256, 256), (257, 257)])
def test_padded_size(raw, padded):
    assert padded_size(raw, 256) == padded


def test_padded_size_speculative():
    assert [padded_size(b, 256, speculative=True) for b in (3, 9, 33, 65)] == [3, 10, 40, 72]


def test_pad_rows_only_at_ep1_graph_decode():
    sim = qwen_tp4()
    cm = sim.cost_model
    assert pad_rows(cm, BatchCounts.uniform_decode(1, 9, 1000)) == 3
    assert pad_rows(cm, BatchCounts.uniform_decode(1, 8, 1000)) == 0
    prefill = BatchCounts(np.zeros(1), np.zeros(1), np.full(1, 9.0), np.full(1, 9.0),
                          np.full(1, 45.0), np.full(1, 9.0), "prefill")
    assert pad_rows(cm, prefill) == 0
    # SGLang masks the padded rows' top-k out of the MoE at EP > 1; no graph, no padding
    assert pad_rows(qwen_tp4(ep_size=4, moe_tp_size=1).cost_model,
                    BatchCounts.uniform_decode(1, 9, 1000)) == 0
    assert pad_rows(qwen_tp4(disable_cuda_graph=True).cost_model,
                    BatchCounts.uniform_decode(1, 9, 1000)) == 0


def test_padded_rows_route_alike_and_cost_expert_weights():
    sim = qwen_tp4()
    top_k = sim.cost_model.model.top_k
    batch = BatchCounts.uniform_decode(1, 9, 1000)          # replays the 12-row graph
    loads, moes = moe_draws(sim.cost_model, sim.skew, np.random.default_rng(0),
                            sim.placement.tables, batch, 64)
    # every layer carries 12 rows' slots: the 9 rows' draw, then one token's, three times
    assert loads.sum(axis=-1) == pytest.approx(12.0 * top_k)
    rng = np.random.default_rng(0)
    rows = sim.skew.loads_block(64, 9, rng)
    assert loads == pytest.approx(rows + 3.0 * sim.skew.loads_block(64, 1, rng))
    plain = moe_draws(sim.cost_model, sim.skew, np.random.default_rng(0), sim.placement.tables,
                      BatchCounts.uniform_decode(1, 8, 1000), 64)[1]
    padded_us = np.mean([m.experts_us.sum() for m in moes])
    plain_us = np.mean([m.experts_us.sum() for m in plain])
    assert padded_us > plain_us       # 9 rows and the padded token's experts > 8 rows'
    # the reference engine pads its one draw the same way
    ref_loads, _ = ReferenceStepper(sim).price(batch, 0.0, 0)
    assert ref_loads.sum(axis=-1) == pytest.approx(12.0 * top_k)
