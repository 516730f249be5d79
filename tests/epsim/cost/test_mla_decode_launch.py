"""Blackwell's MLA decode kernel selection by launch (`epsim.cost.mla_decode.swapped_launches`:
FlashInfer's `useSwapsMmaAbMlaGenKernel`) and the high-throughput kernel's FP8 MMA rate
(`fp8_mma_ratio`, held at the ratio of the GPU's MLA prefill fits): the record rows, the
simulator's kernel and the fit's held parameters agree."""

from __future__ import annotations

import warnings
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from epsim.calibrate.build import mla_decode_held
from epsim.cost.flash import kernel_us
from epsim.cost.mla import absolute, absorbed_form
from epsim.cost.mla_decode import (FP8_MMA_RATIO, DecodeLaunch, decode_block_heads,
                                   decode_features, decode_kernel_work, kernel_params,
                                   mla_decode_kernel, swapped, swapped_launches, swapped_rates,
                                   with_partials)
from epsim.cost.model import CostModel
from epsim.profile import Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

B200 = get_hardware("B200")
PARAMS = {"base_us": 4.0, "wave_us": 2.0, "per_split_us": 0.5, "hbm_frac": 0.8,
          "tensor_frac": 0.6, "swapped_hbm_frac": 0.7, "swapped_frac": 0.1}


def test_small_launches_of_many_heads_run_the_swapped_kernel():
    """128 heads on 148 SMs: 8 CTAs a sequence, up to 18 sequences fit; their keys split to
    fill the SMs (one split at least 256 keys) must hold at most 1024 a split."""
    got = swapped_launches(128, np.array([1, 1, 4, 4, 16, 16, 18, 19, 64]),
                           np.array([16384, 65536, 1024, 16384, 1024, 4096, 256, 256, 16]), 148)
    # 1 x 16384: 18 splits of 911; 1 x 65536: 3641 a split; 4 x 1024: 4 of 256; 4 x 16384: 4096;
    # 16 x 1024: one split of 1024; 16 x 4096: 4096; 18 sequences fit (144 CTAs), 19 do not
    assert got.tolist() == [True, False, True, False, True, False, True, False, False]
    assert not swapped_launches(128, 0, 1024, 148)
    assert swapped_launches(64, 37, 1024, 148) and not swapped_launches(64, 38, 1024, 148)
    launch = DecodeLaunch(16, 1024, 148)
    assert swapped("B200", 128, launch) and not swapped("B200", 128)
    assert decode_block_heads("B200", 128, launch) == 16
    assert decode_block_heads("B200", 128, DecodeLaunch(16, 4096, 148)) == 64
    assert not swapped("H200", 128, launch) and decode_block_heads("H200", 128, launch) == 64
    assert kernel_params(PARAMS, "B200", 128, launch)["tensor_frac"] == 0.1
    assert kernel_params(PARAMS, "B200", 128, DecodeLaunch(16, 4096, 148))["tensor_frac"] == 0.6


def _deepseek(kv: str = "auto", params=PARAMS):
    profile = Profile.from_dict({"name": "mla-b200", "hardware": "B200", "components": {
        "any/mla_decode_bf16/graph": {"params": dict(params), "source": "fit"}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="B200", num_nodes=2),
                       DeploymentSpec(ep_size=16, moe_a2a_backend="deepep",
                                      enable_dp_attention=True, kv_cache_dtype=kv), profile)
    return cm.params.attention.mla


def _record_us(seqs: float, keys: float, heads: int, kv_bytes: float, math: str, params) -> float:
    """What a record row of this launch prices (`epsim.cost.record_kernels`)."""
    launch = DecodeLaunch(seqs, keys, 148)
    form = absorbed_form(512, 64, kv_bytes)
    work = decode_kernel_work(np.array([seqs]), np.array([seqs * keys]), heads, form, 148,
                              decode_block_heads("B200", heads, launch))
    terms, rows = decode_features(work, params, B200, heads, math, launch)
    return float(rows[0] @ terms.coefficients(params))


def test_the_simulators_kernel_prices_the_selected_kernel():
    """The simulator's decode kernel takes the swapped kernel where the selection does (its
    16-head CTAs at its own rates), each step of a [steps, dp] context by its own keys, and
    prices what the record rows price."""
    mla = _deepseek()
    kernel = mla_decode_kernel(mla)
    seqs = np.array([1.0, 4.0, 16.0])
    keys = np.array([16384.0, 16384.0, 1024.0])       # swapped, high-throughput, swapped
    us = kernel.us(seqs, seqs * keys)
    for i in range(3):
        assert us[i] == pytest.approx(_record_us(seqs[i], keys[i], 128, 2.0, "bf16", PARAMS))
    form = absorbed_form(512, 64, 2.0)
    low = with_partials(decode_kernel_work(seqs[:1], seqs[:1] * keys[:1], 128, form, 148, 16),
                        seqs[:1], 128, form)
    assert us[0] == pytest.approx(kernel_us(low, absolute(swapped_rates(PARAMS, True), B200))[0])
    # steps at once: the second step's 16 x 4096 keys leave the swapped kernel
    steps = kernel.us(seqs, np.stack([seqs * keys, seqs * 4096.0]))
    assert steps[0] == pytest.approx(us)
    assert steps[1, 2] == pytest.approx(_record_us(16, 4096, 128, 2.0, "bf16", PARAMS))
    assert kernel.us(np.zeros(3), np.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    # every busy rank small (an idle one beside them): the swapped kernel alone
    small = kernel.us(np.array([1.0, 0.0, 16.0]), np.array([16384.0, 0.0, 16 * 1024.0]))
    assert small[1] == 0.0 and small[[0, 2]] == pytest.approx(us[[0, 2]])
    # cutlass_mla is another kernel: no selection
    assert mla_decode_kernel(replace(mla, one_kv_split=True)).low_latency is None


def test_fp8_mmas_run_at_their_held_ratio():
    """The high-throughput kernel's FP8 MMAs run at `tensor_frac x fp8_mma_ratio` of the FP8
    peak (the record row's math column at that rate, its coefficient `1 / tensor_frac`); the
    swapped kernel's FP8 at its own `swapped_frac`; BF16 math takes no ratio."""
    params = {**PARAMS, FP8_MMA_RATIO: 0.75}
    assert absolute(params, B200, "fp8")["tflops"] == pytest.approx(0.6 * 0.75 * B200.fp8_tflops)
    assert absolute(params, B200, "bf16")["tflops"] == pytest.approx(0.6 * B200.bf16_tflops)
    assert FP8_MMA_RATIO not in swapped_rates(params, True)
    mla = _deepseek("fp8_e4m3", params)
    kernel = mla_decode_kernel(mla)
    seqs, keys = np.array([1024.0, 1.0]), np.array([16384.0, 16384.0])
    us = kernel.us(seqs, seqs * keys)
    for i in range(2):
        assert us[i] == pytest.approx(_record_us(seqs[i], keys[i], 128, 1.0, "fp8", params))
    # math-bound: the ratio slows the high-throughput launch, not the swapped one
    slower = mla_decode_kernel(_deepseek("fp8_e4m3", PARAMS)).us(seqs, seqs * keys)
    assert us[0] > 1.2 * slower[0] and us[1] == pytest.approx(slower[1])


def test_the_fit_holds_blackwells_fp8_ratio():
    """`mla_decode_held`: Blackwell's decode also holds the FP8 prefill's `tensor_frac` over
    the BF16 prefill's (at most 1); Hopper's (whose FP8 cache is a cast pass and BF16 math)
    holds none."""
    def fit(gpu, frac):
        record = SimpleNamespace(record=SimpleNamespace(provenance=SimpleNamespace(hardware=gpu)))
        return SimpleNamespace(params={**PARAMS, "tensor_frac": frac}, records=[record])

    key = "any/mla_decode_bf16/graph"
    for gpu in ("B200", "H200"):
        fits = {"any/mla_prefill_bf16/graph": fit(gpu, 0.98), "any/mla_prefill_fp8/graph": fit(gpu, 0.72)}
        held = mla_decode_held(key, fits)
        assert held.get(FP8_MMA_RATIO) == (pytest.approx(0.72 / 0.98) if gpu == "B200" else None)
        fits["any/mla_prefill_fp8/graph"] = fit(gpu, 1.0)
        assert mla_decode_held(key, fits).get(FP8_MMA_RATIO, 1.0) == 1.0


def test_a_blackwell_fit_keeps_the_held_ratio():
    """`fit_records` on B200 MLA records (both caches): the decode component holds
    `fp8_mma_ratio` at its prefill fits' ratio beside `tensor_frac` (a held parameter with no
    column of its own is kept in the parameters), and its note says so."""
    from epsim.calibrate.build import fit_records
    from epsim.calibrate.holdout import Holdout
    from epsim.calibrate.inputs import SourcedRecord
    from epsim.cost.record import predict_record
    from epsim.records import MeasurementRecord, Provenance
    prefill = {"base_us": 10.0, "wave_us": 2.0, "hbm_frac": 0.9}
    truth = Profile.from_dict({"name": "truth", "hardware": "B200", "components": {
        "any/mla_decode_bf16/graph": {"params": {**PARAMS, FP8_MMA_RATIO: 0.7}, "source": "fit"},
        "any/mla_prefill_bf16/graph": {"params": {**prefill, "tensor_frac": 0.9}, "source": "fit"},
        "any/mla_prefill_fp8/graph": {"params": {**prefill, "tensor_frac": 0.63}, "source": "fit"}}})
    records = []
    for kind, kv, seqs, ctx, heads in [(k, kv, s, c, h) for k in ("mla_decode", "mla_prefill")
                                       for kv in ("bf16", "fp8_e4m3") for s in (1, 16, 256)
                                       for c in (256, 4096, 16384) for h in (16, 64, 128)]:
        r = MeasurementRecord(
            kind=kind, backend="local", ep_size=1, hidden_size=0, median_us=1.0,
            num_tokens_per_rank=seqs if kind == "mla_decode" else seqs * ctx,
            num_attention_heads=heads, num_seqs=seqs, context_len=ctx, kv_cache_dtype=kv,
            timing="device", extra={"scope": "kernel"},
            provenance=Provenance(device="NVIDIA B200", hardware="B200"))
        records.append(SourcedRecord(r.model_copy(update={"median_us": predict_record(r, truth)}),
                                     "synthetic", len(records) + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = fit_records(records, [], Holdout(), name="t")
    components = fitted.profile.components
    ratio = (components["any/mla_prefill_fp8/graph"].params["tensor_frac"]
             / components["any/mla_prefill_bf16/graph"].params["tensor_frac"])
    decode = components["any/mla_decode_bf16/graph"]
    assert ratio == pytest.approx(0.7, rel=0.05)
    assert decode.params[FP8_MMA_RATIO] == pytest.approx(ratio)
    assert FP8_MMA_RATIO in decode.note
