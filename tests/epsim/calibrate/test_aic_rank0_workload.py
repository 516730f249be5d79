"""AIC's rank-0 workload (`collector/sglang/collect_moe.py`, `build_rank0_workloads`): at EP > 1
the Triton kernel gets only rank 0's tokens, and their remote choices (-1) are clamped to local
expert 0, so every slot of those tokens is computed (`rank0_workload_counts`); the record path
prices no masked slot for such a row (`extra.kernel_tokens`)."""

from __future__ import annotations

import numpy as np

from epsim.calibrate.aic_records import (RANK0_WORKLOAD_ROWS, _balanced_choices, balanced_counts,
                                         rank0_workload_counts)


def test_rank0_gets_every_slot_of_its_tokens_remote_ones_on_expert_0():
    """Nemotron-3 Super's latent experts (512, top-22) at EP 32: 16 local experts; a token of the
    strided balanced routing (stride 24) reaches them 11 times in 16: 11008 of 16384 tokens."""
    counts, tokens = rank0_workload_counts(16384, 512, 22, 32)
    assert counts.shape == (32, 16)
    assert tokens == 11008
    assert counts[0].sum() == tokens * 22                 # every slot computed
    plain = balanced_counts(16384, 512, 22).reshape(32, 16)
    assert np.array_equal(counts[0, 1:], plain[0, 1:])    # the other local experts: their pairs
    assert counts[0, 0] == tokens * 22 - plain[0, 1:].sum()
    assert np.array_equal(counts[1:], plain[1:])          # other ranks untouched (not timed)


def test_rank0_tokens_are_those_with_a_local_choice():
    chosen = _balanced_choices(64, 512, 22)
    _, tokens = rank0_workload_counts(64, 512, 22, 256)
    assert tokens == int((chosen < 2).any(axis=1).sum())


def test_only_hoppers_recollected_latent_rows():
    assert set(RANK0_WORKLOAD_ROWS) == {("h100_sxm", "sglang", "0.5.14"),
                                        ("h200_sxm", "sglang", "0.5.14")}
    assert all(shapes == {(1024, 2688, 512, 22)} for shapes in RANK0_WORKLOAD_ROWS.values())


def test_record_path_prices_no_masked_slot_on_a_rank0_workload_row():
    """H200, EP 32 of the latent shape at 64 group tokens: rank 0's 48 tokens, all 1056 slots
    computed; with `extra.kernel_tokens` the remote-slot bytes are gone, without it (the group's
    64 tokens) they are 64 x 22 - 1056 = 352 slots' worth."""
    from epsim.cost.record_kernels import kernel_record_features
    from epsim.profile import Component, Profile
    from epsim.records import MeasurementRecord, Provenance

    counts, tokens = rank0_workload_counts(64, 512, 22, 32)
    extra = {"measured_rank": 0, "num_tokens": 64, "kernel": "sglang_fused_moe_triton"}
    record = MeasurementRecord(
        kind="quant_experts", backend="local", median_us=900.0, timing="device", ep_size=32,
        num_tokens_per_rank=2, hidden_size=1024, moe_intermediate_size=2688, num_experts=512,
        num_local_experts=16, top_k=22, weight_dtype="fp8_block",
        local_expert_tokens=counts.tolist(), expert_tokens_per_rank=counts.sum(axis=1).tolist(),
        extra=extra, provenance=Provenance(device="H200", hardware="H200"))
    profile = Profile(name="t", hardware="H200")
    profile.components["any/experts_fp8_block/graph"] = Component(params={
        "base_us": 10.0, "per_expert_us": 0.0, "hbm_frac": 0.8, "tensor_frac": 0.8,
        "wave_us": 0.0, "dequant_us": 0.0}, source="fit")
    given = record.model_copy(update={"extra": {**extra, "kernel_tokens": tokens}})
    assert tokens == 48 and counts[0].sum() == 48 * 22
    masked = kernel_record_features(record, profile)
    computed = kernel_record_features(given, profile)
    hbm = masked.coef_names.index("inv_hbm_frac")
    assert computed.row[hbm] < masked.row[hbm]
    other = [i for i in range(len(masked.row)) if i != hbm]
    assert np.allclose(computed.row[other], masked.row[other])
