"""MLA's absorbed BMMs (`epsim.cost.mla_bmm`): BF16 `torch.bmm` as a roofline with no tile waves
(`W_UK` and `W_UV` alike at equal heads x tokens), FP8's per-tensor quantisation as a cost per
(token, head) row plus its two passes' bytes, the L2 rate for a working set within L2, the
design rows equal to the model, and an `mla_bmm` record's row the same as the simulator's price."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.mla_bmm import (BMM_TERMS, QUANT_PASS_BYTES, bmm_defaults, bmm_features, bmm_us,
                                bmm_work)
from epsim.cost.record_kernels import BMM_SHAPES, kernel_record_features
from epsim.profile import Component, Profile
from epsim.records import MeasurementRecord, Provenance
from epsim.zoo import get_hardware

H200, B200 = get_hardware("H200"), get_hardware("B200")
PARAMS = {"base_us": 4.0, "hbm_frac": 0.75, "tensor_frac": 0.5, "quant_row_us": 0.0018,
          "l2_hbm_ratio": 1.5}
UK, UV = BMM_SHAPES["mla_gen_pre"], BMM_SHAPES["mla_gen_post"]       # (n, k)


def test_bf16_uk_and_uv_cost_alike():
    tokens = np.array([1.0, 64.0, 1024.0, 16384.0])
    for hw in (H200, B200):
        uk = bmm_us(bmm_work(tokens, *UK, 128, "bf16"), PARAMS, hw, "bf16")
        uv = bmm_us(bmm_work(tokens, *UV, 128, "bf16"), PARAMS, hw, "bf16")
        assert np.allclose(uk, uv)
        assert np.all(np.diff(uk) > 0)


def test_fp8_quantisation_follows_the_rows():
    tokens = np.array([16.0, 4096.0])
    uk, uv = bmm_work(tokens, *UK, 64, "fp8"), bmm_work(tokens, *UV, 64, "fp8")
    assert np.array_equal(uk.rows, 64 * tokens) and np.array_equal(uk.rows, uv.rows)
    # both passes' bytes follow the row's width: W_UV's 512 values, W_UK's 128
    assert np.allclose(uv.quant_kb, 4 * uk.quant_kb)
    assert np.allclose(uk.quant_kb, 64 * tokens * UK[1] * QUANT_PASS_BYTES * 1e-3)
    bf16 = bmm_work(tokens, *UK, 64, "bf16")
    assert not bf16.rows.any() and not bf16.quant_kb.any()
    # with the rows' cost at zero the FP8 BMM is its roofline plus the passes' bytes alone
    rowless = bmm_us(uk, {**PARAMS, "quant_row_us": 0.0}, H200, "fp8")
    assert np.allclose(bmm_us(uk, PARAMS, H200, "fp8") - rowless, uk.rows * PARAMS["quant_row_us"])


def test_a_working_set_within_l2_runs_at_the_l2_rate():
    per_token = 128 * (UK[1] * 2.0 + 2.0 * UK[0])          # bytes of one token's activations
    weights = 128 * UK[0] * UK[1] * 2.0
    for hw in (H200, B200):
        inside = np.floor((hw.l2_bytes - weights) / per_token)
        tokens = np.array([inside, inside + 1])
        work = bmm_work(tokens, *UK, 128, "bf16")
        params = {**PARAMS, "tensor_frac": 1.0}
        t = bmm_us(work, params, hw, "bf16") - params["base_us"]
        rate_gbps = work.mem_kb / t
        assert rate_gbps[0] == pytest.approx(PARAMS["l2_hbm_ratio"] * hw.hbm_gbps)
        assert rate_gbps[1] == pytest.approx(PARAMS["hbm_frac"] * hw.hbm_gbps)
    assert B200.l2_bytes > H200.l2_bytes


def test_defaults_claim_no_l2_speed_up_and_no_row_cost():
    d = bmm_defaults()
    assert d["quant_row_us"] == 0.0 and d["l2_hbm_ratio"] == d["hbm_frac"]


def test_design_rows_times_coefficients_give_the_bmm():
    rng = np.random.default_rng(5)
    for hw in (H200, B200):
        for fmt in ("bf16", "fp8"):
            for shape in (UK, UV):
                tokens = rng.integers(1, 20480, size=16).astype(float)
                heads = int(rng.choice([1, 16, 128]))
                work = bmm_work(tokens, *shape, heads, fmt)
                rows = bmm_features(work, PARAMS, hw, fmt)
                assert np.allclose(rows @ BMM_TERMS.coefficients(PARAMS),
                                   bmm_us(work, PARAMS, hw, fmt))


def test_an_mla_bmm_record_is_priced_by_the_bmm_model():
    profile = Profile(name="t", hardware="B200",
                      components={"any/mla_bmm_fp8/graph": Component(params=PARAMS)})
    record = MeasurementRecord(kind="mla_bmm", provenance=Provenance(device="NVIDIA B200", hardware="B200"),
                               backend="local", ep_size=1, hidden_size=0, median_us=100.0,
                               num_tokens_per_rank=2048, num_attention_heads=64,
                               weight_dtype="fp8", extra={"op": "mla_gen_post"})
    row = kernel_record_features(record, profile)
    assert row.component == "any/mla_bmm_fp8/graph" and row.coef_names == BMM_TERMS.coef_names
    work = bmm_work(np.array([2048.0]), *UV, 64, "fp8")
    assert row.row @ row.coefficients == pytest.approx(bmm_us(work, PARAMS, B200, "fp8")[0])
