"""The scheduler's exposed host time per step (`epsim.cost.scheduler_host`)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

from epsim.cost.allreduce import ring_us
from epsim.cost.attention import BatchCounts
from epsim.cost.block_ops import PARTS, launches
from epsim.cost.model import CostModel
from epsim.cost.provenance import provenance
from epsim.cost.scheduler_host import (DECODE_LAUNCHES, DEFAULT_LAUNCH_US, GLOO_HOPS,
                                       GRAPH_WINDOWS, REQUEST_HOST_US, SPECULATIVE_LAUNCHES,
                                       READBACKS, SYNC_INFO_BYTES, UPLOADS,
                                       gloo_collective_us, gloo_message_us, serving_host_params)
from epsim.cost.tables import build_tables, contiguous_placement
from epsim.eplb import Placement
from epsim.profile import Profile
from epsim.sim.speculative import verify_counts
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

EP = 16


def _model(profile: Profile | None = None, **deployment) -> CostModel:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="H200", num_nodes=2),
                         DeploymentSpec(ep_size=EP, moe_a2a_backend="deepep",
                                        enable_dp_attention=True, **deployment), profile)


def _step_us(cm: CostModel) -> float:
    m = cm.model
    loads = np.full((m.num_moe_layers, m.num_experts), EP * 2 * m.top_k / m.num_experts)
    tables = build_tables(Placement.on_cluster(contiguous_placement(m.num_moe_layers,
                                                                    m.num_experts, EP),
                                               m.num_experts, EP, 8))
    return cm.step(BatchCounts.uniform_decode(EP, 2, 65536), loads, tables).step_us


def test_overlap_scheduling_hides_the_host_time():
    assert _model().scheduler_host.step_us == 0.0


def test_the_normal_loop_adds_its_launches_and_the_dp_gather():
    cm = _model(disable_overlap_schedule=True)
    host = cm.scheduler_host
    # one launch's host time: the loop's own eager ops timed on a GPU host, per launch, named
    # with their record's host and date
    serving = serving_host_params()
    assert host.launch_us == serving["loop_launch_us"]
    assert "serving_loop_ops_gpu.json" in host.source and "2026-12-06" in host.source
    # the batch info of the 16 DP ranks gathered over NCCL across the two nodes, eager
    tp = cm.params.tp_collectives
    gather = float(ring_us(SYNC_INFO_BYTES * EP, EP, 2, tp.allreduce["nccl"], passes=1))
    assert host.gather_us == pytest.approx(gather + tp.host_us)
    # the sampler's launches follow the graph's replay, before the result's read-back: hidden
    assert host.launches == sum(DECODE_LAUNCHES.values()) - DECODE_LAUNCHES["sampler"]
    # of its launches, the batch info and DP counts uploaded and two read-backs, each at the GPU
    # host's time of that call
    assert (host.uploads, host.readbacks) == (3, 2)
    assert (host.upload_us, host.readback_us) == (serving["h2d_tensor_us"], serving["readback_us"])
    # recv_requests broadcasts the control requests over the 16 ranks' gloo group: a binomial
    # tree of 4 rounds, the GPU host's one-int64 broadcast over 16 ranks
    assert host.gloo_collectives == (("broadcast", 1.0),) and host.gloo_ranks == EP
    assert host.gloo_messages == 4
    assert host.gloo_us == pytest.approx(serving["gloo_broadcast_16_us"])
    expected = ((host.launches - 5) * host.launch_us + 3 * host.upload_us + 2 * host.readback_us
                + host.gather_us + host.gloo_us)
    assert host.step_us == pytest.approx(expected)
    # the step is the forward plus that host time and its 2 requests' loop bodies a rank
    plain = _model()
    assert _step_us(cm) - _step_us(plain) == pytest.approx(expected + 2 * host.request_us)
    # and the provenance says what the step overhead holds
    components = str(provenance(cm)["components"])
    assert "scheduler's host time" in components and "serving_loop_ops_gpu.json" in components
    assert "scheduler's host time" not in str(provenance(plain)["components"])


def test_speculative_decoding_runs_the_normal_loop_with_its_workers_launches():
    host = _model(speculative_algorithm="NEXTN", speculative_num_steps=2).scheduler_host
    assert host.exposed
    assert host.launches == (sum(DECODE_LAUNCHES.values()) + sum(SPECULATIVE_LAUNCHES.values())
                             - DECODE_LAUNCHES["prepare_for_decode"] - DECODE_LAUNCHES["sampler"])
    # the verify's accepted ids and lengths read back beside the step's
    assert host.uploads == sum(UPLOADS.values()) and host.readbacks == sum(READBACKS.values())


def test_the_loops_per_request_python_adds_per_decoding_request():
    # the normal loop's result and stream bodies a request; a speculative cycle adds the verify's
    decode = _model(disable_overlap_schedule=True).scheduler_host
    assert decode.request_us == pytest.approx(REQUEST_HOST_US["result"] + REQUEST_HOST_US["stream"])
    assert decode.requests_us(4) == pytest.approx(4 * decode.request_us)
    assert _model().scheduler_host.requests_us(4) == 0.0        # overlapped: hidden
    spec = _model(speculative_algorithm="NEXTN", speculative_num_steps=2)
    assert spec.scheduler_host.request_us == pytest.approx(sum(REQUEST_HOST_US.values()))
    # a verify step of 5 requests a rank, 3 tokens each: 5 requests' bodies, not 15
    batch = verify_counts(BatchCounts.uniform_decode(EP, 5, 5 * 1000), 3)
    m = spec.model
    loads = np.full((m.num_moe_layers, m.num_experts), EP * 15 * m.top_k / m.num_experts)
    tables = build_tables(Placement.on_cluster(contiguous_placement(m.num_moe_layers,
                                                                    m.num_experts, EP),
                                               m.num_experts, EP, 8))
    bare = _model(speculative_algorithm="NEXTN", speculative_num_steps=2)
    bare.scheduler_host = replace(bare.scheduler_host, request_us=0.0)
    diff = spec.step(batch, loads, tables).step_us - bare.step(batch, loads, tables).step_us
    assert diff == pytest.approx(5 * sum(REQUEST_HOST_US.values()))


def test_the_drafts_forwards_leave_the_per_request_python_to_the_verify():
    from epsim.sim.speculative import DraftPricer
    from tests.epsim.sim.test_speculative import _spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # a one-layer model outside the profile's fits
        draft = DraftPricer(_spec(steps=2), None, seed=0)
    assert draft.cost_model.scheduler_host.exposed
    assert draft.cost_model.scheduler_host.request_us == 0.0


def test_without_the_loop_record_a_launch_takes_the_block_ops_host_else_the_default(monkeypatch):
    serving = {k: v for k, v in serving_host_params().items() if k != "loop_launch_us"}
    monkeypatch.setattr("epsim.cost.scheduler_host.serving_host_params", lambda: serving)
    cm = _model(disable_overlap_schedule=True)
    host = cm.scheduler_host
    # the live block's eager host time over its launches
    block = cm.params.eager.block_ops.timing.host_us
    assert block > 0 and host.launch_us == pytest.approx(block / launches(PARTS))
    assert host.source == "any/block_ops/host per launch"
    sheet = Profile(name="datasheet-H200", hardware="H200")
    host = _model(sheet, disable_overlap_schedule=True).scheduler_host
    assert host.launch_us == DEFAULT_LAUNCH_US and host.source == "default"


def test_gloo_collectives_take_gloos_message_counts():
    # gloo/broadcast.cc: binomial tree; gloo/allgather.cc and allreduce.cc: rings
    assert [GLOO_HOPS["broadcast"](n) for n in (1, 2, 8, 9, 16)] == [0, 1, 3, 4, 4]
    assert GLOO_HOPS["all_gather"](16) == 15 and GLOO_HOPS["all_reduce"](16) == 30


def test_the_mid_2025_gather_over_gloo_and_the_speculative_all_reduce():
    nccl = _model(disable_overlap_schedule=True).scheduler_host
    cpu = _model(disable_overlap_schedule=True, mlp_sync_group="cpu").scheduler_host
    # SGLang 0.4.9's gather runs on gloo instead of NCCL: 15 ring messages, no NCCL gather
    assert cpu.gather_us == 0.0 and cpu.gloo_messages == 4 + 15
    gather_us = serving_host_params()["gloo_all_gather_16_us"]
    assert cpu.step_us - nccl.step_us == pytest.approx(gather_us - nccl.gather_us)
    # a speculative cycle under DP attention all-reduces its need for a draft extend on gloo
    spec = _model(speculative_algorithm="NEXTN", speculative_num_steps=2,
                  mlp_sync_group="cpu").scheduler_host
    assert dict(spec.gloo_collectives) == {"broadcast": 1.0, "all_gather": 1.0, "all_reduce": 1.0}
    assert spec.gloo_messages == 4 + 15 + 30
    # SGLang since sglang#8276 (0.5.x, the NCCL gather's era) skips that check under DP attention
    later = _model(speculative_algorithm="NEXTN", speculative_num_steps=2).scheduler_host
    assert dict(later.gloo_collectives) == {"broadcast": 1.0} and later.gloo_messages == 4
    # SGLang's recv interval skips the broadcast on all but one iteration in N
    skip = _model(disable_overlap_schedule=True, scheduler_recv_interval=4).scheduler_host
    assert skip.gloo_messages == pytest.approx(1.0)


def test_without_dp_attention_only_the_broadcast_remains():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="H200", num_nodes=1),
                       DeploymentSpec(tp_size=8, ep_size=8, moe_a2a_backend="deepep",
                                      enable_dp_attention=False, speculative_algorithm="NEXTN"))
    host = cm.scheduler_host
    # recv_requests broadcasts over the TP group; the draft-extend check returns locally
    assert host.gather_us == 0.0 and host.gloo_collectives == (("broadcast", 1.0),)
    assert host.gloo_messages == 3


def test_a_cycles_host_work_under_its_draft_graphs_is_hidden_up_to_their_gpu_time():
    spec = _model(speculative_algorithm="NEXTN", speculative_num_steps=2,
                  mlp_sync_group="cpu").scheduler_host
    # under the draft graph: build_tree's launches; under the draft extend's (the cycle's last
    # launch): the next iteration's gloo broadcast and gather, the result's and stream's loops
    assert spec.draft_window_us == pytest.approx(
        SPECULATIVE_LAUNCHES["build_tree"] * spec.launch_us)
    serving = serving_host_params()
    assert spec.extend_window_us == pytest.approx(serving["gloo_broadcast_16_us"]
                                                  + serving["gloo_all_gather_16_us"])
    assert spec.extend_window_request_us == pytest.approx(
        sum(REQUEST_HOST_US[k] for k in GRAPH_WINDOWS["extend"]["requests"]))
    window = spec.extend_window_us + 2 * spec.extend_window_request_us
    # each window hides up to its graph's GPU time: a long graph hides it all, a short one its
    # own length; vectorised over cycles
    assert spec.hidden_us(1e6, 1e6, 2) == pytest.approx(spec.draft_window_us + window)
    assert spec.hidden_us(10.0, 20.0, 2) == pytest.approx(30.0)
    both = spec.hidden_us(np.array([10.0, 1e6]), np.array([20.0, 1e6]), 2)
    assert both == pytest.approx([30.0, spec.draft_window_us + window])
    # with the NCCL gather (SGLang since #8001) the gather queues behind the extend: not hidden
    later = _model(speculative_algorithm="NEXTN", speculative_num_steps=2).scheduler_host
    assert later.extend_window_us == pytest.approx(serving["gloo_broadcast_16_us"])
    # a plain decode step has no draft: nothing to hide under it
    assert _model(disable_overlap_schedule=True).scheduler_host.hidden_us(1e6, 1e6, 2) == 0.0


def test_a_cycle_pays_its_draft_forwards_less_the_host_work_they_hide():
    from epsim.sim.speculative import DraftPricer
    from tests.epsim.sim.test_speculative import _spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # a one-layer model outside the profile's fits
        draft = DraftPricer(_spec(steps=2), None, seed=0)
    host = draft.cost_model.scheduler_host
    requests = np.full(draft.cost_model.params.parallel.dp_size, 2.0)
    context = requests * 1000
    rng = lambda: np.random.Generator(np.random.SFC64(7))   # noqa: E731
    with_hiding = draft.cycle_us(requests, context, None, 0.0, rng())
    draft.cost_model.scheduler_host = replace(host, draft_window_us=0.0, extend_window_us=0.0,
                                              extend_window_request_us=0.0)
    without = draft.cycle_us(requests, context, None, 0.0, rng())
    assert 0.0 < without - with_hiding <= (host.draft_window_us + host.extend_window_us
                                           + 2 * host.extend_window_request_us) + 1e-9


def test_a_gloo_collective_is_priced_at_the_deployments_rank_count():
    serving = serving_host_params()
    # a timed count: that collective's median, as measured on the GPU host
    us, where = gloo_collective_us(serving, "all_gather", 8, 0.0)
    assert us == serving["gloo_all_gather_8_us"] and "GPU host, 8" in where
    # between timed counts: the per-message time interpolated in log2(ranks), times the messages
    per_message = [serving[f"gloo_all_reduce_{n}_us"] / GLOO_HOPS["all_reduce"](n) for n in (2, 8)]
    us, where = gloo_collective_us(serving, "all_reduce", 4, 0.0)
    assert us == pytest.approx(6 * (per_message[0] + (per_message[1] - per_message[0]) / 2))
    assert "interpolated" in where
    # beyond them: the largest count's per message (extrapolated, said so); one rank: nothing
    us, where = gloo_collective_us(serving, "broadcast", 32, 0.0)
    assert us == pytest.approx(5 * serving["gloo_broadcast_16_us"] / 4) and "extrapolated" in where
    assert gloo_collective_us(serving, "broadcast", 1, 0.0)[0] == 0.0
    # without the GPU host's record: the VM's gloo message, GLOO_HOPS of them
    us, where = gloo_collective_us({}, "all_gather", 16, 0.0)
    assert us == pytest.approx(15 * gloo_message_us(0.0)) and where.startswith("VM")
