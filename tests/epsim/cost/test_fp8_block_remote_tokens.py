"""FlashInfer's TRT-LLM FP8 block-scale MoE at EP > 1: each rank's kernel gets the group's
tokens, and the ones whose slots lie elsewhere cost `token_us` per `ACTIVATION_CTA_REF` CTAs of
its standalone activation kernel, `top_k ceil(I / 128) / n` a token at `n` tokens a CTA
(`remote_token_weight`, `activation_tokens_per_cta`), fitted
on the EP > 1 rows after the EP 1 rates
(`epsim.calibrate.aic_records.EP_FIT_FORMATS`, `epsim.calibrate.build`)."""

from __future__ import annotations

import warnings

import pytest

from epsim.calibrate.build import fit_records
from epsim.calibrate.holdout import Holdout
from epsim.calibrate.inputs import SourcedRecord
from epsim.cost.quant import (EXPERT_REREAD_FALLBACK_TERMS, activation_tokens_per_cta,
                               remote_token_weight)
from epsim.cost.record import predict_record
from epsim.cost.record_kernels import kernel_record_features
from epsim.errors import SpecError
from epsim.profile import Component, Profile
# AIC's balanced rows of DeepSeek's shape (H 7168, I 2048, 256 experts, top-8) on GB200
from tests.epsim.cost.test_trtllm_remote_tokens import _record

KEY = "any/experts_fp8_block/graph"
TRUTH = {"base_us": 18.0, "per_expert_us": 0.05, "hbm_frac": 0.85, "tensor_frac": 0.9,
         "wave_us": 0.01, "dequant_us": 0.2, "reread_frac": 0.4, "wave_row_us": 0.02,
         "token_us": 0.03}


def _fp8(ep: int, tokens: int):
    return _record(ep, tokens).model_copy(update={"weight_dtype": "fp8_block"})


def _profile(**params) -> Profile:
    profile = Profile(name="t", hardware="GB200")
    profile.components[KEY] = Component(params=params, source="fit")
    return profile


def test_a_remote_fp8_block_token_counts_its_activation_ctas_over_32():
    """At 4 tokens a CTA (no input size given): DeepSeek-V3 (top-8, I 2048: 8 x 16 / 4 CTAs)
    counts 1; the top-1 H 5120 / I 8192 shape 16 CTAs, a half, whatever its hidden size; a
    MoE-TP share of 1408 is 11 CTAs a slot."""
    assert remote_token_weight("fp8_block", 2048, 8) == pytest.approx(1.0)
    assert remote_token_weight("fp8_block", 8192, 1) == pytest.approx(0.5)
    assert remote_token_weight("fp8_block", 1408, 8) == pytest.approx(8 * 11 / 4 / 32)
    assert remote_token_weight("nvfp4", 2048, 8) == 1.0
    with pytest.raises(SpecError, match="weight_dtype"):
        remote_token_weight("int3", 2048, 8)


def test_the_activation_kernel_packs_more_tokens_a_cta_as_its_grid_grows():
    """FlashInfer 0.6.12's launch heuristic on B200 (148 SMs), DeepSeek-V3 (16 x 8 = 128
    one-token CTAs a token): 1 token a CTA up to 4 a SM (592 CTAs, 4 tokens), 2 up to 32 a SM
    (4736, 37 tokens), 4 above; so a remote token costs 4x the CTAs at 4 tokens as at 4096."""
    n = activation_tokens_per_cta(2048, 8, [1, 4, 5, 37, 38, 4096], 148)
    assert n.tolist() == [1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert remote_token_weight("fp8_block", 2048, 8, 4, 148) == pytest.approx(4.0)
    assert remote_token_weight("fp8_block", 2048, 8, 4096, 148) == pytest.approx(1.0)
    assert remote_token_weight("nvfp4", 2048, 8, 4, 148) == 1.0


def test_record_row_prices_the_remote_tokens_per_activation_cta_and_no_idle_launch():
    """EP 4, 4096 tokens: 3072 remote tokens of DeepSeek's shape (32 activation CTAs each at 4
    tokens a CTA) -> 3072 token-equivalents; the exiting CTAs stay NVFP4's (FP8-block's EP 1 rows fit them to 0)."""
    row = kernel_record_features(_fp8(4, 4096), _profile(**TRUTH))
    assert row.coef_names == EXPERT_REREAD_FALLBACK_TERMS.coef_names
    assert row.row[row.coef_names.index("token_us")] == pytest.approx(3072)
    assert row.row[row.coef_names.index("exit_us")] == 0.0
    assert kernel_record_features(_fp8(1, 4096), _profile(**TRUTH)).row[
        row.coef_names.index("token_us")] == 0.0


def test_ep_rows_fit_token_us_after_the_ep1_rates():
    """Rows priced by a known profile at EP 1, 4 and 16: the staged fit holds the EP 1 stage's
    rates and gives the remote-token price back."""
    records = []
    for ep in (1, 4, 16):
        for tokens in (16, 64, 256, 1024, 4096, 16384):
            r = _fp8(ep, tokens)
            records.append(SourcedRecord(r.model_copy(update={
                "median_us": float(predict_record(r, _profile(**TRUTH)))}), "synthetic",
                len(records) + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = fit_records(records, [], Holdout(), name="t").profile.components[KEY]
    assert fitted.params["token_us"] == pytest.approx(0.03, rel=0.1)
    assert fitted.residuals["mape"] < 2.0
    assert "held at" in fitted.note                     # the EP 1 stage's rates
