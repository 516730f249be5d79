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
