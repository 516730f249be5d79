"""Two-batch overlap at stage level (epsim.cost.tbo): the decode closed form against SGLang's
issue order run event by event, the limits where communication or compute paces, and what a
priced step hands it (the exchanges' parts off the compute stream)."""

import numpy as np
import pytest

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.cost.attention import BatchCounts
from epsim.cost.tbo import (DEEPEP_NORMAL_SMS, Stages, decode_layers_us, overlapped_stages,
                            overlapped_us, schedule_layers_us)
from epsim.eplb import Placement
from epsim.profile import Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

LAYERS = 6


def _stages(rng, wire_scale: float, on_scale: float = 5.0) -> Stages:
    """Random per-layer costs (µs): attention parts shared by every layer, the MoE's per layer."""
    per_layer = lambda lo, hi: rng.uniform(lo, hi, LAYERS)         # noqa: E731
    return Stages(prepare=float(rng.uniform(20, 80)), core=float(rng.uniform(50, 200)),
                  router=per_layer(2, 10), shared=float(rng.uniform(0, 30)),
                  experts=per_layer(40, 120), dispatch_on=per_layer(0, on_scale),
                  dispatch_wire=per_layer(0, wire_scale), combine_on=per_layer(0, on_scale),
                  combine_wire=per_layer(0, 2 * wire_scale))


def _work(s: Stages) -> np.ndarray:
    """[layers] one micro-batch's work on the compute stream in each layer."""
    return (s.prepare + s.core + s.router + s.shared + s.experts + s.dispatch_on
            + s.combine_on)


@pytest.mark.parametrize("wire_scale", [0.0, 50.0, 200.0, 2000.0])
def test_the_decode_closed_form_is_sglangs_issue_order(rng, wire_scale):
    """No receive falls between another exchange's send and receive in SGLang's decode order,
    so the closed form's step is the event-by-event critical path (each layer's share of it
    is a convention: the schedule cuts layers where B ends one, when A is a layer ahead)."""
    for _ in range(20):
        s = _stages(rng, wire_scale)
        closed = decode_layers_us(s)
        for hooked in (True, False):    # one exchange at a time: the comm stream never binds
            ran = schedule_layers_us(s, "decode", hooked)
            assert closed.sum() == pytest.approx(ran.sum(), rel=1e-12)


def test_decode_compute_bound_hides_every_exchange(rng):
    """Exchanges shorter than the stages they hide behind (dispatch: own shared experts + the
    other's prepare; combine: the other's core + router) cost only their on-stream kernels,
    but for B's last combine, which has nothing left to hide behind."""
    s = _stages(rng, 0.0)
    c_wire = np.full(LAYERS, 0.99 * (s.core + s.router).min())
    layer = decode_layers_us(Stages(**{**vars(s), "dispatch_wire": np.full(LAYERS, 0.99 * s.shared),
                                       "combine_wire": c_wire}))
    np.testing.assert_allclose(layer, 2 * _work(s) + np.r_[np.zeros(LAYERS - 1), c_wire[-1]],
                               rtol=1e-12)


def test_decode_comm_bound_pays_each_exchange_beyond_its_window(rng):
    """Exchanges far longer than their windows: each layer pays both micro-batches' wire time
    less what the other's stages hid, so one more µs of wire is four more µs of layer (two
    exchanges of two micro-batches)."""
    s = _stages(rng, 5000.0)
    base = decode_layers_us(s)
    more = decode_layers_us(Stages(**{**vars(s), "dispatch_wire": s.dispatch_wire + 1.0,
                                      "combine_wire": s.combine_wire + 1.0}))
    np.testing.assert_allclose(more - base, 4.0, rtol=1e-9)
    core = s.core + s.router
    next_core = np.r_[core[1:], 0.0]                   # B's combine: behind A's next layer
    d_window = np.full(LAYERS, s.shared + s.prepare)
    d_window_b = np.r_[d_window[:-1], s.shared]          # B's last: its shared experts alone
    expected = (2 * _work(s) + (s.dispatch_wire - d_window) + (s.dispatch_wire - d_window_b)
                + (s.combine_wire - core) + (s.combine_wire - next_core))
    np.testing.assert_allclose(base, expected, rtol=1e-12)


def test_prefill_limits_comm_stream_and_compute(rng):
    """Prefill (delta 0, DeepEP normal on its communication stream): with exchanges much
    longer than the compute the step is the comm stream's time (every dispatch and combine of
    both micro-batches back to back) plus the compute it cannot overlap at the ends; with
    instant exchanges it is the compute stream's work."""
    s = _stages(rng, 0.0, on_scale=0.0)
    fast = schedule_layers_us(Stages(**{**vars(s), "dispatch_wire": 0.0, "combine_wire": 0.0}),
                              "prefill", hooked=False)
    assert fast.sum() == pytest.approx(2 * _work(s).sum(), rel=1e-12)
    slow = Stages(**{**vars(s), "dispatch_wire": np.full(LAYERS, 1e5),
                     "combine_wire": np.full(LAYERS, 2e5)})
    total = schedule_layers_us(slow, "prefill", hooked=False).sum()
    comm = 2 * LAYERS * 3e5
    # the first dispatch waits for A's first attention, which nothing can hide; the shared
    # experts run before each combine's receive (operations_strategy.py:101-102), hidden
    assert total == pytest.approx(comm + s.prepare + s.core, rel=1e-12)
    # hooked exchanges (no communication stream) overlap each other: less than the stream
    assert schedule_layers_us(slow, "prefill", hooked=True).sum() < total


def test_prefill_expert_gemms_run_on_the_sms_deepep_leaves():
    """Without receive hooks the expert GEMMs run on `num_sms - 20` SMs in prefill (SGLang's
    deep_gemm_num_sms); decode keeps every SM."""
    stages = np.array([[0.0], [100.0], [0.0]])                 # [3, layers]: experts only
    args = (0.0, 0.0, 0.0, stages, 0.0, (0.0, 0.0))
    prefill = overlapped_us(overlapped_stages("prefill", *args, hooked=False, num_sms=132),
                            "prefill", hooked=False)
    decode = overlapped_us(overlapped_stages("decode", *args, hooked=True, num_sms=132),
                           "decode", hooked=True)
    assert prefill.sum() == pytest.approx(2 * 100.0 * 132 / (132 - DEEPEP_NORMAL_SMS))
    assert decode.sum() == pytest.approx(2 * 100.0)


def test_prefill_compute_beside_an_exchange_runs_on_the_sms_deepep_leaves(rng):
    """While DeepEP normal's exchange holds its SMs, the other micro-batch's attention runs at
    `overlap_share` of its rate: B's 100 µs attention meets A's 50 µs dispatch for its first
    50 µs at half rate (25 µs of work), then runs the 75 left alone, so B's dispatch and the
    step end 25 µs later than with every SM. The GEMMs, capped for the whole step, are not
    slowed again."""
    one = dict(prepare=0.0, core=100.0, router=0.0, shared=0.0, experts=np.zeros(1),
               dispatch_on=0.0, dispatch_wire=np.full(1, 50.0), combine_on=0.0,
               combine_wire=np.zeros(1))
    full = schedule_layers_us(Stages(**one), "prefill", hooked=False).sum()
    half = schedule_layers_us(Stages(**one, overlap_share=0.5), "prefill", hooked=False).sum()
    assert (full, half) == pytest.approx((250.0, 275.0), rel=1e-12)
    # receive hooks hold no SMs while the NIC carries the bytes: nothing slows
    assert schedule_layers_us(Stages(**one, overlap_share=0.5), "prefill",
                              hooked=True).sum() == pytest.approx(
        schedule_layers_us(Stages(**one), "prefill", hooked=True).sum(), rel=1e-12)
    for _ in range(10):
        gemms = Stages(**{**vars(_stages(rng, 200.0, on_scale=0.0)), "prepare": 0.0,
                          "core": 0.0, "router": np.zeros(LAYERS)})
        capped = Stages(**{**vars(gemms), "overlap_share": 0.5})
        assert schedule_layers_us(capped, "prefill", hooked=False).sum() == pytest.approx(
            schedule_layers_us(gemms, "prefill", hooked=False).sum(), rel=1e-12)


def test_a_priced_prefill_step_slows_attention_beside_deepep_normal():
    """DeepSeek-V3 prefill at EP 32 with DeepEP normal: the stages carry the SMs DeepEP
    leaves, and the step is slower than with every SM beside the exchanges (but still
    faster than one batch)."""
    cm, tables, loads = _deepseek(32, "normal", True)
    tokens = np.full(32, 4096.0)
    batch = BatchCounts(np.zeros(32), np.zeros(32), tokens, tokens,
                        np.full(32, 4096.0 * 4097 / 2), np.ones(32), "prefill", np.ones(32))
    step = cm.step(batch, loads * 32, tables)
    num_sms = cm.params.gemm.num_sms
    assert step.stages.overlap_share == pytest.approx((num_sms - DEEPEP_NORMAL_SMS) / num_sms)
    free = Stages(**{**vars(step.stages), "overlap_share": 1.0})
    layers = schedule_layers_us(step.stages, "prefill", hooked=False)
    np.testing.assert_allclose(step.layer_us, layers, rtol=1e-12)
    assert layers.sum() > schedule_layers_us(free, "prefill", hooked=False).sum()
    plain, _, _ = _deepseek(32, "normal", False)
    assert step.step_us < plain.step(batch, loads * 32, tables).step_us


def _deepseek(ep: int, mode: str, tbo: bool, gpu: str = "H800"):
    model = get_model("DeepSeek-V3")
    cluster = ClusterSpec(gpu=gpu, num_nodes=max(1, ep // 8), network="infiniband")
    spec = DeploymentSpec(ep_size=ep, moe_a2a_backend="deepep", deepep_mode=mode,
                          dispatch_dtype="fp8", enable_dp_attention=True,
                          enable_two_batch_overlap=tbo, cuda_graph_max_bs=128)
    cm = CostModel(model, cluster, spec, Profile(name="datasheet", hardware=gpu))
    e, layers = model.num_experts, model.num_moe_layers
    tables = build_tables(Placement.on_cluster(contiguous_placement(layers, e, ep), e, ep, 8))
    return cm, tables, np.full((layers, e), ep * 128 * model.top_k / e)


def test_receive_hooks_leave_the_rdma_bytes_to_the_nic():
    """DeepEP low-latency across nodes: what runs off the compute stream is the RDMA time
    beyond the sending SMs' NVLink copies, plus the fabric's latency; within a node nothing;
    DeepEP normal's whole exchange runs on its communication stream."""
    cm, tables, loads = _deepseek(64, "low_latency", True)
    moe = cm.moe(loads, np.full(64, 128.0), tables, "decode", 0.5, True)
    assert (moe.dispatch_wire_us > 0).all() and (moe.dispatch_wire_us < moe.dispatch_us).all()
    assert (moe.combine_wire_us > 0).all() and (moe.combine_wire_us < moe.combine_us).all()
    one, t1, l1 = _deepseek(8, "low_latency", True)
    inside = one.moe(l1, np.full(8, 128.0), t1, "decode", 0.5, True)
    assert np.all(inside.dispatch_wire_us == 0) and np.all(inside.combine_wire_us == 0)
    normal, t2, l2 = _deepseek(32, "normal", True)
    moe = normal.moe(l2, np.full(32, 4096.0), t2, "prefill", 0.5, False)
    np.testing.assert_array_equal(moe.dispatch_wire_us, moe.dispatch_us)


def test_wide_ep_decode_step_is_the_stage_graph_and_beats_no_overlap():
    """DeepSeek-V3 decode at EP 64 (8 nodes): the step's MoE layers are the closed form over
    the parts it reports, and the overlap makes the step faster than the one batch."""
    cm, tables, loads = _deepseek(64, "low_latency", True)
    batch = BatchCounts.uniform_decode(64, 128, 4096)
    step = cm.step(batch, loads, tables)
    moe = cm.moe(loads, cm.ep_tokens(batch), tables, "decode", 0.5, True)
    terms = cm._token_terms(batch, batch.scaled(0.5))
    attn = step.attention_us[0] / 2
    want = decode_layers_us(Stages(
        prepare=terms.prepare_us, core=attn - terms.prepare_us, router=moe.block_ops_us,
        shared=terms.shared_us, experts=moe.experts_us,
        dispatch_on=moe.dispatch_us - moe.dispatch_wire_us, dispatch_wire=moe.dispatch_wire_us,
        combine_on=moe.combine_us - moe.combine_wire_us, combine_wire=moe.combine_wire_us))
    np.testing.assert_allclose(step.layer_us, want, rtol=1e-12)
    assert 0 < terms.prepare_us < attn
    plain, _, _ = _deepseek(64, "low_latency", False)
    assert step.step_us < plain.step(batch, loads, tables).step_us


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_the_timeline_draws_the_priced_stage_graph(phase):
    """`epsim simulate --timeline` under two-batch overlap: the compute stream's stages in
    SGLang's order, one after another, ending where the step's MoE layers end; each exchange
    off the stream on the other track."""
    from epsim.report.timeline import step_trace
    mode = "low_latency" if phase == "decode" else "normal"
    cm, tables, loads = _deepseek(64, mode, True)
    batch = (BatchCounts.uniform_decode(64, 128, 4096) if phase == "decode" else
             BatchCounts(*(np.zeros(64),) * 2, np.full(64, 4096.0), np.full(64, 4096.0),
                         np.full(64, 4096.0 * 4097 / 2), np.ones(64), "prefill", np.ones(64)))
    step = cm.step(batch, loads, tables)
    assert step.stages is not None
    trace = [e for e in step_trace(step, True)["traceEvents"] if e["ph"] == "X"
             and e["args"]["layer"] >= 0]
    compute = sorted((e for e in trace if e["tid"] == 0), key=lambda e: e["ts"])
    assert all(a["ts"] + a["dur"] <= b["ts"] + 2e-3 for a, b in zip(compute, compute[1:]))  # rounded to ns
    last = compute[-1]
    assert last["ts"] + last["dur"] == pytest.approx(step.layer_us.sum(), rel=1e-6)
    assert {e["name"].split()[0] for e in trace} == {"A", "B"}
    assert any(e["tid"] == 1 and e["name"] == "A dispatch" for e in trace)


def test_provenance_says_what_running_beside_the_exchanges_leaves_unpriced():
    """Prefill with DeepEP normal under the overlap: the experts and the attention carry the
    note that only the SMs DeepEP holds are priced of running beside an exchange; decode's
    receive-hook exchanges hold no SMs while the NIC carries them, and carry none."""
    from epsim.cost.provenance import BESIDE_EXCHANGES, provenance
    tokens = np.full(32, 4096.0)
    prefill = BatchCounts(np.zeros(32), np.zeros(32), tokens, tokens,
                          np.full(32, 4096.0 * 4097 / 2), np.ones(32), "prefill", np.ones(32))
    for mode, batch, noted in (("normal", prefill, {"experts", "attention"}),
                               ("low_latency", BatchCounts.uniform_decode(32, 128, 4096), set())):
        cm, tables, loads = _deepseek(32, mode, True)
        cm.step(batch, loads * (32 if mode == "normal" else 1), tables)
        parts = {c["part"] for c in provenance(cm)["components"] if BESIDE_EXCHANGES in c["axes"]}
        assert parts == noted
