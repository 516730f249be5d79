"""FlashInfer's TRT-LLM MoE at EP > 1 runs its per-token stages (routing, the hidden state's
quantisation, the finalize) over every token of its input, local slots or not: the tokens whose
slots lie on other ranks are a column of their own (`epsim.cost.quant.remote_tokens`,
`token_us` each), zero at EP 1, where the per-pair terms hold that work; the simulator charges
them to each rank with the `none` backend, whose ranks all hold the group's tokens. Beside
them, the launched CTAs that exit (`exit_us`, test_trtllm_exiting_ctas.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from epsim.cost import contiguous_placement
from epsim.cost.model import CostModel
from epsim.cost.quant import EXPERT_FALLBACK_TERMS, EXPERT_FEED_TERMS, remote_tokens
from epsim.cost.record_kernels import kernel_record_features
from epsim.cost.tables import build_tables
from epsim.eplb import Placement
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

KEY = "any/experts_nvfp4/graph"
PARAMS = {"base_us": 10.0, "hbm_frac": 0.9, "tensor_frac": 0.5, "reread_frac": 0.5}


def _record(ep: int, tokens: int, experts: int = 256, top_k: int = 8) -> MeasurementRecord:
    """Rank 0 of EP `ep` on AIC's balanced rows: the group's `tokens` spread evenly."""
    local = experts // ep
    rows = [tokens * top_k / experts] * local
    return MeasurementRecord(
        kind="quant_experts", backend="local", median_us=100.0, timing="device", ep_size=ep,
        num_tokens_per_rank=-(-tokens // ep), hidden_size=7168, moe_intermediate_size=2048,
        num_experts=experts, num_local_experts=local, top_k=top_k, weight_dtype="nvfp4",
        local_expert_tokens=[rows] * ep, expert_tokens_per_rank=[sum(rows)] * ep,
        extra={"measured_rank": 0, "num_tokens": tokens},
        provenance=Provenance(device="GB200", hardware="GB200"))


def _profile(**extra) -> Profile:
    profile = Profile(name="t", hardware="GB200")
    profile.components[KEY] = Component(params={**PARAMS, **extra}, source="fit")
    return profile


def test_remote_tokens_are_the_input_tokens_beyond_the_local_pairs_share():
    assert remote_tokens(1024, 1024 * 8, 8) == 0.0                   # EP 1: every slot local
    assert remote_tokens(1024, 1024 * 8 / 4, 8) == pytest.approx(768.0)   # EP 4, balanced
    assert np.array_equal(remote_tokens(np.array([16.0, 16.0]), np.array([200.0, 8.0]), 8),
                          np.array([0.0, 15.0]))                     # never below 0


def test_record_row_carries_the_remote_tokens_priced_at_token_us():
    """4096 tokens x top-8 at EP 4 (64 of 256 experts): 3072 remote tokens, `token_us` each;
    the same rows at EP 1 have none, and a profile with no `token_us` prices none."""
    row = kernel_record_features(_record(4, 4096), _profile(token_us=0.01))
    assert row.coef_names == EXPERT_FALLBACK_TERMS.coef_names  # NVFP4: feed, fallback stream
    token = EXPERT_FEED_TERMS.params.index("token_us")
    assert row.row[token] == pytest.approx(3072.0)
    plain = kernel_record_features(_record(4, 4096), _profile())
    assert row.row @ row.coefficients - plain.row @ plain.coefficients == pytest.approx(30.72)
    assert kernel_record_features(_record(1, 4096), _profile(token_us=0.01)).row[token] == 0.0


def _experts_us(profile: Profile, ep: int, tokens: float) -> float:
    """The experts stage of DeepSeek-V3 (NVFP4) on GB200 with the `none` backend at EP `ep`,
    balanced loads of `tokens` group tokens."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cost = CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="GB200", gpus_per_node=4),
                         DeploymentSpec(ep_size=ep, quantization="nvfp4",
                                        moe_a2a_backend="none"), profile)
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 256, ep), 256, ep,
                                               min(ep, 4)))
    loads = np.full((1, 256), tokens * 8 / 256)
    return float(cost.moe(loads, np.full(ep, tokens / ep), tables, "prefill").experts_us[0])


def test_simulator_charges_each_rank_the_groups_tokens_routed_elsewhere():
    """EP 4, 2048 group tokens on every rank, 512 of their pairs on each: 1536 remote tokens a
    rank at `token_us`; at EP 1 the term is 0."""
    with_term = _experts_us(_profile(token_us=0.01), 4, 2048)
    assert with_term - _experts_us(_profile(), 4, 2048) == pytest.approx(15.36, rel=1e-9)
    assert _experts_us(_profile(token_us=0.01), 1, 2048) == pytest.approx(
        _experts_us(_profile(), 1, 2048))
