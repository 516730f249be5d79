"""The clock of aiconfigurator-core's collector burst (`epsim.cost.collector_burst`) and the dense
GEMM records it prices (`epsim.cost.record_kernels`)."""

import numpy as np
import pytest

from epsim.cost.collector_burst import (BURST_CALLS, CAP_FULL_MS, CAP_START_MS, CAPPED_RATIO,
                                        TIMED_CALLS, burst_factor, burst_share,
                                        capped_ratio_readable)
from epsim.cost.dense_gemm import dense_gemm_defaults, gemm_features, gemm_terms, gemm_work, math_columns
from epsim.cost.record import predict_record
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord
from epsim.zoo import get_hardware


def test_short_calls_keep_the_boost_clock_and_long_ones_the_capped_one():
    """A call whose burst ends before the clock falls is timed at the boost clock; one whose
    timed window opens after the ramp at the capped clock; the factor grows in between."""
    short_us = CAP_START_MS / BURST_CALLS * 1e3            # the burst closes as the ramp starts
    long_us = CAP_FULL_MS / (BURST_CALLS - TIMED_CALLS) * 1e3   # the window opens capped
    assert burst_factor(short_us) == pytest.approx(1.0)
    assert burst_factor(long_us) == pytest.approx(CAPPED_RATIO)
    assert burst_factor(20 * long_us) == pytest.approx(CAPPED_RATIO)
    mid = burst_factor(np.linspace(short_us, long_us, 20))
    assert np.all(np.diff(mid) > 0) and 1.0 < mid[1] and mid[-2] < CAPPED_RATIO
    # 1 ms: the window [36, 72] ms, the ramp's share (36-30 .. 72-30) / 70: mean 0.343
    assert burst_factor(1000.0) == pytest.approx(1 + (CAPPED_RATIO - 1) * 24.0 / 70.0)


def test_the_bound_side_sets_which_columns_carry_the_clock():
    """Only the compute side's columns; a memory-bound row has none nonzero."""
    for fmt, gpu in (("bf16", "H100"), ("fp8", "H100"), ("fp8_block", "H100"), ("fp8", "B200"),
                     ("nvfp4", "B200")):
        hardware = get_hardware(gpu)
        work = gemm_work(np.array([1.0, 16384.0]), 16384, 16384, fmt, 132, gpu=gpu)
        mask = math_columns(work)
        rows = gemm_features(work, {}, hardware, fmt)
        assert mask.shape == (len(gemm_terms(fmt, gpu).params),), fmt
        assert not np.any(rows[0, mask]), (fmt, gpu)            # 1 row: memory-bound
        assert np.any(rows[1, mask]), (fmt, gpu)                # 16384 rows: compute-bound


def _gemm(m: int, aic_system: str) -> MeasurementRecord:
    return MeasurementRecord.model_validate(
        {"kind": "gemm", "timing": "device", "backend": "local", "ep_size": 1, "num_tokens_per_rank": m,
         "hidden_size": 16384, "intermediate_size": 16384, "weight_dtype": "bf16",
         "median_us": 1.0, "provenance": {"device": "NVIDIA H100 80GB HBM3", "hardware": "H100",
                                          "aic_system": aic_system}})


def test_an_aic_record_of_a_long_call_is_priced_at_the_collectors_clock():
    """16384^3 BF16 on an H100 (~10 ms a call): an op-table record (its provenance names the
    table's system) costs the capped ratio more on its compute side than the same record of our
    own; a weight-streaming row (1 token) costs the same."""
    profile = Profile(name="datasheet", hardware="H100")
    ours = predict_record(_gemm(16384, ""), profile)
    aic = predict_record(_gemm(16384, "h100_sxm"), profile)
    base_us = dense_gemm_defaults()["base_us"]         # the datasheet profile's fixed cost
    assert ours > 5000.0
    assert aic == pytest.approx(base_us + (ours - base_us) * CAPPED_RATIO, rel=1e-6)
    assert predict_record(_gemm(1, "h100_sxm"), profile) == pytest.approx(
        predict_record(_gemm(1, ""), profile))


def _blackwell_gemm(m: int, aic_system: str, fmt: str = "fp8") -> MeasurementRecord:
    return MeasurementRecord.model_validate(
        {"kind": "gemm", "timing": "device", "backend": "local", "ep_size": 1, "num_tokens_per_rank": m,
         "hidden_size": 16384, "intermediate_size": 16384, "weight_dtype": fmt,
         "median_us": 1.0, "provenance": {"device": "NVIDIA B200", "hardware": "B200",
                                          "aic_system": aic_system}})


def test_a_gpu_without_a_measured_ramp_takes_its_fitted_capped_ratio():
    """On a B200 (no ramp of ours) the capped ratio is the profile's `cap_slowdown_ratio`: at its
    default the record prices as the H100's ratio carried over; at a fitted 0.3 a long call's
    compute side costs 1.3x the boost clock's and a short call's nothing more. An H100's record
    keeps the measured ratio whatever the profile says."""
    def with_cap(hardware: str, cap: float | None) -> Profile:
        profile = Profile(name="datasheet", hardware=hardware)
        if cap is not None:
            profile.components["any/gemm_fp8/graph"] = Component(params={"cap_slowdown_ratio": cap})
        return profile

    base_us = dense_gemm_defaults()["base_us"]
    ours = predict_record(_blackwell_gemm(16384, ""), with_cap("B200", None))
    assert ours > 2000.0                                # ~10 busy ms a window: fully capped
    assert dense_gemm_defaults()["cap_slowdown_ratio"] == pytest.approx(CAPPED_RATIO - 1.0)
    # the capped clock's extra time: the ratio less 1 times the compute side (not the fixed
    # cost, not the quantisation kernel's bytes)
    carried = predict_record(_blackwell_gemm(16384, "b200_sxm"), with_cap("B200", None)) - ours
    fitted = predict_record(_blackwell_gemm(16384, "b200_sxm"), with_cap("B200", 0.3)) - ours
    assert fitted == pytest.approx(carried * 0.3 / (CAPPED_RATIO - 1.0), rel=1e-6)
    assert 0.9 * (ours - base_us) < fitted / 0.3 < ours - base_us
    short = _blackwell_gemm(16, "b200_sxm")             # ~50 µs: the burst ends at full clock
    assert predict_record(short, with_cap("B200", 0.3)) == pytest.approx(
        predict_record(_blackwell_gemm(16, ""), with_cap("B200", 0.3)))
    h100 = _gemm(16384, "h100_sxm")
    assert predict_record(h100, with_cap("H100", 0.3)) == pytest.approx(
        predict_record(h100, with_cap("H100", None)))


def test_the_capped_ratio_is_read_only_from_rows_timed_at_the_cap():
    """Two calls whose timed window sits past the ramp (3 ms: [108, 216] busy ms) determine the
    ratio; one such call, or calls timed on the ramp's rise (1 ms: share 0.34), do not."""
    assert burst_share(3000.0) == pytest.approx(1.0)
    assert capped_ratio_readable(np.array([3000.0, 3000.0, 50.0]))
    assert not capped_ratio_readable(np.array([3000.0, 1000.0, 1000.0]))
    assert not capped_ratio_readable(np.full(300, 1000.0))
