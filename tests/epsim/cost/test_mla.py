"""MLA (`epsim.cost.mla`, `epsim.cost.mla_decode`): the kernel at MLA's sizes (latent cache at
its dtype, read once by Hopper's 64-head blocks and Blackwell's two kernels' tiles, Hopper's FP8
cache cast in a pass of its own, Blackwell's FP8 math and its swapped kernel's own rates, the
absorbed or per-head prefill by GPU), its design rows equal to the model, and a DeepSeek
deployment priced by it instead of the GQA kernels (the absorbed prefill's tiles and L2 stream:
test_mla_l2.py)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

from epsim.cost.attention import BatchCounts
from epsim.cost.flash import kernel_us, prefill_work
from epsim.cost.linear import LinearTerms
from epsim.cost.mla import (MLA_TERMS, absolute, absorbed_form, absorbed_prefill, mla_defaults,
                            mla_kernel_features, mla_kernel_us, mla_token_us, per_head_form,
                            prefill_kernel_work, sustained_frac)
from epsim.cost.mla_decode import (MLA_DEQUANT_TERMS, MLA_SWAPPED_TERMS, SM_CAST_ELEMS_PER_US,
                                   decode_block_heads, decode_dequantises, decode_features,
                                   decode_kernel_work, dequant_us, kernel_form, kernel_params,
                                   math_dtype, mla_decode_kernel, swapped)
from epsim.cost.model import CostModel
from epsim.cost.provenance import provenance
from epsim.cost.record_kernels import kernel_record_features
from epsim.profile import Profile, decode_kv_kind, kernel_keys
from epsim.records import MeasurementRecord, Provenance
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, get_model

H200 = get_hardware("H200")
PARAMS = {"base_us": 4.0, "wave_us": 2.0, "per_split_us": 0.5, "hbm_frac": 0.8,
          "tensor_frac": 0.6}


def test_forms_carry_mlas_sizes():
    form = absorbed_form(512, 64, 1.0)                     # FP8 latent cache
    assert (form.qk_dim, form.v_dim, form.kv_bytes_per_key) == (576, 512, 576.0)
    # as a flash kernel: 4 head_dim FLOPs per (row, key) = 2 (576 + 512)
    assert 4 * form.flash_head_dim == 2 * (576 + 512)
    head = per_head_form(128, 64, 128, 2.0)
    assert (head.qk_dim, head.v_dim, head.kv_bytes_per_key) == (192, 128, 640.0)
    assert absorbed_prefill("H200") and not absorbed_prefill("B200")


def test_decode_reads_the_cache_once():
    """Hopper's 64-head blocks of a sequence read its keys side by side (the later reads L2
    hits) and Blackwell's one CTA holds the heads: the cache's bytes once, at any head count;
    the heads add their queries and outputs and, on Hopper, a CTA's math each."""
    seqs, ctx = np.array([64.0]), np.array([64.0 * 65536])
    for kv in (2.0, 1.0):
        form = absorbed_form(512, 64, kv)
        q_o = 64 * 128 * (576 + 512) * 2.0                   # BF16 queries and outputs
        for heads in (16, 64, 128):
            for gpu in ("H200", "B200"):
                work = decode_kernel_work(seqs, ctx, heads, form, 132,
                                          decode_block_heads(gpu, heads))
                q = q_o * heads / 128
                # a split's FP32 partial outputs (512 values and a log-sum-exp a head), twice
                partials = 2 * work.splits[0] * 64 * heads * (512 + 1) * 4.0
                assert work.mem_kb[0] * 1e3 == pytest.approx(q + ctx[0] * 576 * kv + partials)
    hopper = {h: decode_kernel_work(seqs, ctx, h, absorbed_form(512, 64, 2.0), 132,
                                    decode_block_heads("H200", h)) for h in (64, 128)}
    assert hopper[128].mflops[0] == pytest.approx(2 * hopper[64].mflops[0])


def test_split_partials_grow_with_the_heads():
    """A split decode writes each split's FP32 latent output per head and its combine reads it
    back: at a few sequences of 128 heads on Hopper these bytes pass the cache's (4 sequences of
    1024 BF16 keys, 16 splits: 33.6 MB of partials against 4.7 MB of cache); the same splits at
    64 heads move half; an unsplit decode none."""
    form = absorbed_form(512, 64, 2.0)
    seqs, ctx = np.array([4.0]), np.array([4.0 * 1024])
    work = {h: decode_kernel_work(seqs, ctx, h, form, 132, decode_block_heads("H200", h))
            for h in (64, 128)}
    assert work[64].splits[0] == work[128].splits[0] == 16
    cache_kb = ctx[0] * 576 * 2.0 * 1e-3
    q_o_kb = {h: 4 * h * (576 + 512) * 2.0 * 1e-3 for h in (64, 128)}
    part = {h: work[h].mem_kb[0] - cache_kb - q_o_kb[h] for h in (64, 128)}
    assert part[128] == pytest.approx(2 * 16 * 4 * 128 * 513 * 4.0 * 1e-3)
    assert part[128] == pytest.approx(2 * part[64]) and part[128] > 7 * cache_kb
    many = decode_kernel_work(np.array([1024.0]), np.array([1024.0 * 1024]), 128, form, 132,
                              decode_block_heads("H200", 128))
    assert many.splits[0] == 0
    assert many.mem_kb[0] == pytest.approx(1024 * 1024 * 576 * 2e-3 + 1024 * q_o_kb[128] / 4)


def test_blackwell_tiles_the_heads():
    """TRT-LLM's MLA generation kernels: up to 32 heads the swapped kernel's 8- or 16-head
    tiles (32 heads: two CTAs a sequence), above the high-throughput kernel's 64 (128 heads:
    two); Hopper's FlashAttention-3 pads any count to 64."""
    assert [decode_block_heads(g, 128) for g in ("H100", "H200", "B200", "GB200", "GB300")] == \
        [64, 64, 64, 64, 64]
    assert [decode_block_heads("B200", h) for h in (1, 8, 16, 32, 64, 128)] == \
        [8, 8, 16, 16, 64, 64]
    assert [swapped("B200", h) for h in (16, 32, 64)] == [True, True, False]
    assert not swapped("H200", 16)
    assert [decode_block_heads("H200", h) for h in (1, 16, 128)] == [64, 64, 64]
    seqs, ctx = np.array([592.0]), np.array([592.0 * 8192])      # 4 whole waves of 148 SMs
    form = absorbed_form(512, 64, 2.0)
    work = {h: decode_kernel_work(seqs, ctx, h, form, 148, decode_block_heads("B200", h))
            for h in (16, 32, 64, 128)}
    # the math of the CTAs' rows: 16, 2 x 16, 64, 2 x 64; the cache's bytes once at any count
    assert [work[h].mflops[0] / work[16].mflops[0] for h in (32, 64, 128)] == \
        pytest.approx([2, 4, 8])
    assert work[128].mem_kb[0] - work[16].mem_kb[0] < 0.03 * work[16].mem_kb[0]   # + queries


def test_blackwells_swapped_kernel_has_its_own_rates():
    """The swapped kernel's rows price its memory and math at `swapped_hbm_frac` and
    `swapped_frac` in columns of their own; the other kernel's at `hbm_frac`, `tensor_frac`;
    Hopper's rows are `MLA_TERMS`'. The simulator's kernel prices what the rows do."""
    b200 = get_hardware("B200")
    params = {**PARAMS, "swapped_hbm_frac": 0.7, "swapped_frac": 0.1}
    assert kernel_params(params, "B200", 32)["tensor_frac"] == 0.1
    assert kernel_params(params, "B200", 64)["tensor_frac"] == 0.6
    assert "swapped_frac" not in kernel_params(params, "H200", 16)
    seqs, ctx = np.array([1024.0]), np.array([1024.0 * 16384])
    form = absorbed_form(512, 64, 2.0)
    for heads, used, empty in ((32, [5, 6], [3, 4]), (128, [3, 4], [5, 6])):
        work = decode_kernel_work(seqs, ctx, heads, form, 148, decode_block_heads("B200", heads))
        terms, rows = decode_features(work, params, b200, heads)
        assert terms is MLA_SWAPPED_TERMS and not rows[0, empty].any()
        assert rows[0, used].any()
        assert rows[0] @ terms.coefficients(params) == pytest.approx(
            kernel_us(work, absolute(kernel_params(params, "B200", heads), b200))[0])
    terms, _ = decode_features(decode_kernel_work(seqs, ctx, 16, form, 132), params, H200, 16)
    assert terms is MLA_TERMS
    # 32 heads run the swapped kernel at a tenth of the peak: math-bound, slower than 128
    mla = _deepseek("B200", profile=_b200_profile(params)).params.attention.mla
    us = {h: mla_decode_kernel(replace(mla, heads=h)).us(seqs, ctx)[0] for h in (32, 128)}
    assert us[32] > us[128]


def _b200_profile(params) -> Profile:
    return Profile.from_dict({"name": "mla-b200", "hardware": "B200", "components": {
        "any/mla_decode_bf16/graph": {"params": dict(params), "source": "fit"}}})


def test_blackwell_multiplies_an_fp8_cache_in_fp8():
    """Blackwell's kernel runs its MMAs at the FP8 cache's format (FP8 tensor peak), Hopper's on
    the BF16 copy its cast pass wrote; a BF16 cache is BF16 math on both."""
    assert [math_dtype(g, kv) for g, kv in (("B200", 1.0), ("GB300", 1.0), ("B200", 2.0),
                                           ("H200", 1.0), ("H100", 2.0))] == \
        ["fp8", "fp8", "bf16", "bf16", "bf16"]
    b200 = get_hardware("B200")
    assert absolute(PARAMS, b200, "fp8")["tflops"] == pytest.approx(0.6 * b200.fp8_tflops)


def test_hoppers_fp8_cache_is_cast_before_the_kernel():
    """Hopper's FP8 cache: a cast pass over every key's 576 elements at `dequant_frac` of the
    SMs' cast rate, then the kernel over the BF16 copy (its bytes); none on Blackwell or for a
    BF16 cache, and none without a fitted `dequant_frac`."""
    assert decode_dequantises("H200", 1.0) and decode_dequantises("H100", 1.0)
    assert not decode_dequantises("H200", 2.0) and not decode_dequantises("B200", 1.0)
    fp8 = absorbed_form(512, 64, 1.0)
    assert kernel_form(fp8, True).kv_bytes_per_key == 576 * 2.0
    assert kernel_form(fp8, False) is fp8
    ctx = np.array([256.0 * 65536])
    params = {**PARAMS, "dequant_frac": 0.01}
    expected = ctx[0] * 576 / (132 * SM_CAST_ELEMS_PER_US * 0.01)
    assert dequant_us(ctx, fp8, 132, params)[0] == pytest.approx(expected)
    assert dequant_us(ctx, fp8, 132, PARAMS)[0] == 0.0
    # the simulator's kernel: the BF16 kernel plus the pass
    bf16 = _deepseek(profile=_fp8_profile(params))
    cast = _deepseek(kv="fp8_e4m3", profile=_fp8_profile(params))
    seqs = np.array([256.0])
    k_bf16 = mla_decode_kernel(bf16.params.attention.mla)
    k_cast = mla_decode_kernel(cast.params.attention.mla)
    assert k_cast.us(seqs, ctx)[0] == pytest.approx(k_bf16.us(seqs, ctx)[0] + expected)
    assert k_cast.us(np.array([0.0]), np.array([0.0]))[0] == 0.0
    # a record's design row (the cast pass its own column) prices what the simulator does
    record = MeasurementRecord(
        kind="mla_decode", backend="local", ep_size=1, hidden_size=0, median_us=500.0,
        num_tokens_per_rank=256, num_attention_heads=128, num_seqs=256, context_len=65536,
        kv_cache_dtype="fp8_e4m3", timing="device", extra={"scope": "kernel"},
        provenance=Provenance(device="NVIDIA H200", hardware="H200"))
    row = kernel_record_features(record, _fp8_profile(params))
    assert row.coef_names == MLA_DEQUANT_TERMS.coef_names
    assert row.row @ row.coefficients == pytest.approx(k_cast.us(seqs, ctx)[0])


def _fp8_profile(params) -> Profile:
    """An H200 profile whose BF16-cache and FP8-cache decode components share `params`."""
    return Profile.from_dict({"name": "mla-h200", "hardware": "H200", "components": {
        f"any/mla_decode_{kv}/graph": {"params": dict(params), "source": "fit"}
        for kv in ("bf16", "fp8")}})


def test_decode_waves_count_one_cta_per_sm():
    """Hopper's MLA decode CTAs hold 64 heads, one per SM (`decode_grid`): 128 heads on 132 SMs
    fill a wave at 66 sequences, so a half-filled last wave is not priced as a whole one --
    64 sequences one wave, 128 and 132 two, 133 three, 256 four, the math in proportion."""
    form = absorbed_form(512, 64, 2.0)
    keys = 2048.0
    work = {n: decode_kernel_work(np.array([n]), np.array([n * keys]), 128, form, 132)
            for n in (64.0, 128.0, 132.0, 133.0, 256.0)}
    assert [work[n].waves[0] for n in (64.0, 128.0, 132.0, 133.0, 256.0)] == [1, 2, 2, 3, 4]
    assert all(w.splits[0] == 0 for w in work.values())       # >= 0.8 of the SMs: no split
    per_wave = keys * 64 * 4 * form.flash_head_dim * 132 * 1e-6
    for n, w in work.items():
        assert w.mflops[0] == pytest.approx(w.waves[0] * per_wave)
    # priced on the datasheet (compute-bound at 2047 keys): 128 sequences about half of 256
    # (aiconfigurator-core's H100 SGLang FA3 table: 153 and 296 µs), where the 128-row CTAs
    # two per SM priced both as one wave
    h100 = get_hardware("H100")
    us = {n: mla_kernel_us(w, mla_defaults(), h100)[0] for n, w in work.items()}
    assert 0.45 < us[128.0] / us[256.0] < 0.55
    assert us[132.0] < 1.03 * us[128.0] and us[133.0] > 1.4 * us[132.0]
    # Blackwell's 64-head CTAs: 148 SMs fill a wave at 148 sequences
    bw = [decode_kernel_work(np.array([n]), np.array([n * keys]), 64, form, 148,
                             decode_block_heads("B200", 64)).waves[0] for n in (128.0, 148.0, 149.0)]
    assert bw == [1, 1, 2]


def test_decode_splits_fill_the_sms():
    """Too few CTAs for 0.8 of the SMs: the keys split so CTAs x splits fills whole waves of one
    CTA per SM (FlashAttention-3's `num_splits_heuristic` over `num_sm`)."""
    form = absorbed_form(512, 64, 2.0)
    work = decode_kernel_work(np.array([32.0]), np.array([32.0 * 8192]), 128, form, 132)
    # 64 CTAs: two splits make 128 of 132 (0.97 of a wave)
    assert (work.splits[0], work.waves[0]) == (2, 1)


def test_prefill_math_per_head_is_whole_tiles():
    """Per head, a chunk fills row blocks of its own: a 16-token chunk pays a whole 128 x 128
    tile (the flash kernel's work), a 16384-token one little more than its causal pairs."""
    form = per_head_form(128, 64, 128, 2.0)
    per_pair = 128 * 2 * (192 + 128) * 1e-6                 # 128 heads

    def work(chunk, seqs):
        tokens = np.array([chunk * seqs])
        return prefill_kernel_work(tokens, tokens, np.array([seqs]), 128, form, 148)

    short, long = work(16.0, 64.0), work(16384.0, 1.0)
    flash = prefill_work(np.array([1024.0]), np.array([1024.0]), np.array([64.0]), 128, 1,
                         form.flash_head_dim, 148, form.flash_kv_ratio)
    assert short.mflops[0] == pytest.approx(flash.mflops[0])
    assert short.mflops[0] > 50 * 64 * 16 * 17 / 2 * per_pair
    assert long.mflops[0] == pytest.approx(16384 * 16385 / 2 * per_pair, rel=0.05)


def test_design_rows_times_coefficients_give_the_kernel():
    rng = np.random.default_rng(3)
    terms = LinearTerms(MLA_TERMS.params, MLA_TERMS.inverse)
    for _ in range(10):
        seqs = rng.integers(1, 512, size=4).astype(float)
        ctx = seqs * rng.integers(16, 32768, size=4)
        decode = absorbed_form(512, 64, 2.0)
        for work, math in (
                (decode_kernel_work(seqs, ctx, 128, decode, 132), "bf16"),
                (decode_kernel_work(seqs, ctx, 16, decode, 148, 16), "fp8")):
            rows = mla_kernel_features(work, PARAMS, H200, math)
            assert np.allclose(rows @ terms.coefficients(PARAMS),
                               kernel_us(work, absolute(PARAMS, H200, math)))


def _deepseek(gpu: str = "H200", kv: str = "auto", profile: Profile | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu=gpu, num_nodes=2),
                         DeploymentSpec(ep_size=16, moe_a2a_backend="deepep",
                                        enable_dp_attention=True, kv_cache_dtype=kv), profile)


def test_deepseek_is_priced_by_the_mla_model():
    cm = _deepseek()
    mla = cm.params.attention.mla
    # SGLang prefills per head (MHA) on every GPU; only AIC's Hopper records are absorbed
    assert mla is not None and mla.heads == 128 and not mla.absorbed_prefill
    # block FP8: SGLang dequantises `kv_b_proj` to BF16 at load, so the BMMs run BF16
    assert cm.model.weight_dtype == "fp8_block"
    assert mla.bmm_format == "bf16" and mla.gemm_format == cm.model.weight_dtype
    batch = BatchCounts.uniform_decode(16, 64, 4096)
    attn = cm._attention_layer_us(batch)
    kernel = mla_decode_kernel(mla).us(batch.decode_tokens, batch.decode_context).max()
    tokens = mla_token_us(batch.tokens, batch.decode_tokens, mla).max()
    # plus the attention block's own ops (norms, RoPE, latent write, residual; docs/model.md 5e)
    ops = cm._attention_ops(batch.tokens).max()
    assert ops > 0 and attn == pytest.approx(kernel + tokens + ops)
    prov = provenance(cm)
    assert prov["profile"].startswith(cm.profile.name) and prov["line"].startswith("profile ")
    # datasheet efficiencies: an FP8 cache halves the latent's bytes, but 128 heads reading it
    # once are bound by the BF16 math (FlashMLA's analysis), so a long decode is no slower
    sheet = Profile(name="datasheet-H200", hardware="H200")
    long = BatchCounts.uniform_decode(16, 64, 65536)
    assert (_deepseek(kv="fp8_e4m3", profile=sheet)._attention_layer_us(long)
            <= _deepseek(profile=sheet)._attention_layer_us(long))


def test_gqa_models_keep_their_path():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("Qwen3-235B-A22B"), ClusterSpec(gpu="H200"),
                       DeploymentSpec(ep_size=8, moe_a2a_backend="deepep",
                                      enable_dp_attention=True))
    assert cm.params.attention.mla is None


def test_an_fp8_cache_decodes_in_blackwells_bf16_kernel_fit():
    """Blackwell's decode kernel reads FP8 keys in its BF16-cache loop: both caches' rows feed
    and read one component (each at its cache's bytes); Hopper's FP8 path keeps its own."""
    assert [decode_kv_kind(kv, gpu) for kv, gpu in (
        ("fp8_e4m3", "H200"), ("fp8_e4m3", "B200"), ("fp8_e4m3", "GB300"), ("auto", "B200"),
        ("fp8_e4m3", ""))] == ["fp8", "bf16", "bf16", "bf16", "fp8"]
    for gpu, kind in (("H200", "mla_decode_fp8"), ("GB200", "mla_decode_bf16")):
        mla = _deepseek(gpu, kv="fp8_e4m3").params.attention.mla
        assert mla.keys["decode"] in ("", f"any/{kind}/graph") and mla.kv_bytes == 1.0
        record = MeasurementRecord(
            kind="mla_decode", backend="local", ep_size=1, hidden_size=0, median_us=50.0,
            num_tokens_per_rank=8, num_attention_heads=128, num_seqs=8, context_len=4096,
            kv_cache_dtype="fp8_e4m3", timing="device", extra={"scope": "kernel"},
            provenance=Provenance(device=f"NVIDIA {gpu}", hardware=gpu))
        sheet = Profile(name=f"datasheet-{gpu}", hardware=gpu)
        assert kernel_keys(record) == [kernel_record_features(record, sheet).component] \
            == [f"any/{kind}/graph"]


def test_decode_takes_its_prefills_tensor_rate():
    """A decode on up to 64 heads is bound by its cache: the fit holds its tensor rate at the
    same GPU's MLA prefill fit sustains (`epsim.calibrate.build.mla_decode_held`), which its
    compute-bound records determine; the other decode terms are fitted."""
    from epsim.calibrate.build import fit_records
    from epsim.calibrate.holdout import Holdout
    from epsim.calibrate.inputs import SourcedRecord
    from epsim.cost.record import predict_record
    truth = Profile.from_dict({"name": "truth", "hardware": "H200", "components": {
        f"any/mla_{kind}_bf16/graph": {"params": {**PARAMS, "tensor_frac": frac}, "source": "fit"}
        for kind, frac in (("decode", 0.9), ("prefill", 0.55))}})
    records = []
    for kind, seqs, ctx, heads in [(k, s, c, h) for k in ("mla_decode", "mla_prefill")
                                   for s in (1, 16, 256) for c in (256, 4096, 16384)
                                   for h in (16, 64)]:
        r = MeasurementRecord(
            kind=kind, backend="local", ep_size=1, hidden_size=0, median_us=1.0,
            num_tokens_per_rank=seqs if kind == "mla_decode" else seqs * ctx,
            num_attention_heads=heads, num_seqs=seqs, context_len=ctx, kv_cache_dtype="bf16",
            timing="device", extra={"scope": "kernel"},
            provenance=Provenance(device="NVIDIA H200", hardware="H200"))
        records.append(SourcedRecord(r.model_copy(update={"median_us": predict_record(r, truth)}),
                                     "synthetic", len(records) + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        components = fit_records(records, [], Holdout(), name="t").profile.components
    prefill, decode = (components[f"any/mla_{k}_bf16/graph"] for k in ("prefill", "decode"))
    assert prefill.params["tensor_frac"] == pytest.approx(0.55, rel=0.02)
    # the rate a long prefill chunk sustains (its L2 stream, where one was fitted, may bind)
    assert decode.params["tensor_frac"] == sustained_frac(prefill.params, "H200")
    assert "held at tensor_frac" in decode.note
    assert decode.params["hbm_frac"] == pytest.approx(0.8, rel=0.02)


def test_a_per_tensor_fp8_checkpoint_runs_fp8_bmms():
    model = get_model("DeepSeek-V3").model_copy(update={"weight_dtype": "fp8"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(model, ClusterSpec(gpu="H200", num_nodes=2),
                       DeploymentSpec(ep_size=16, moe_a2a_backend="deepep",
                                      enable_dp_attention=True))
    assert cm.params.attention.mla.bmm_format == "fp8"


def test_nvfp4_fp8_q_b_runs_q_b_alone_on_the_block_fp8_gemm():
    """SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN (`nvfp4_fp8_q_b`): an NVFP4 checkpoint's q_b_proj on
    the block-FP8 GEMM, the fused q_a/kv_a and o still BF16; a block-FP8 checkpoint ignores it."""
    from epsim.cost.dense_gemm import gemm_us, gemm_work
    from epsim.cost.mla import Q_B_FP8_FORMAT
    r1, gb200 = get_model("DeepSeek-R1"), ClusterSpec(gpu="GB200")
    profile = Profile(name="datasheet", hardware="GB200")

    def mla(**deployment):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return CostModel(r1, gb200, DeploymentSpec(ep_size=4, quantization="modelopt_fp4",
                                                       **deployment), profile).params.attention.mla
    bf16, fp8 = mla(), mla(nvfp4_fp8_q_b=True)
    assert bf16.q_b_gemm is None and bf16.gemm_format == "bf16" and "q_b" not in bf16.keys
    assert fp8.q_b_gemm is not None and fp8.gemm_format == "bf16" and "q_b" in fp8.keys
    tokens = np.array([16384.0])
    width, k = fp8.heads * (fp8.nope_dim + fp8.rope_dim), fp8.q_lora_rank
    q_b = {fmt: gemm_us(gemm_work(tokens, width, k, fmt, fp8.num_sms, gpu=fp8.hardware.name),
                        params, fp8.hardware, fmt)
           for fmt, params in (("bf16", bf16.gemm), (Q_B_FP8_FORMAT, fp8.q_b_gemm))}
    drop = mla_token_us(tokens, tokens * 0, bf16) - mla_token_us(tokens, tokens * 0, fp8)
    np.testing.assert_allclose(drop, q_b["bf16"] - q_b[Q_B_FP8_FORMAT])
    assert float(drop[0]) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        block = CostModel(r1, gb200, DeploymentSpec(ep_size=4, nvfp4_fp8_q_b=True),
                          profile).params.attention.mla
    assert block.q_b_gemm is None
