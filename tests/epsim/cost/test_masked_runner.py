"""DeepEP low-latency's masked DeepGEMM runner (`epsim.cost.masked_runner`): the layout DeepGEMM
picks for a few experts of a few rows narrows its tiles, so the kernel streams its weights."""

import numpy as np

from epsim.cost.experts import experts_rank_us, num_sms, row_tiles
from epsim.cost.masked_runner import MaskedExpertGemm, masked_gemm, masked_rows
from epsim.cost.quant import absolute, gemm_defaults, quant_expert_gemm
from epsim.zoo import get_hardware


def _gemm(gpu="H200", fmt="fp8_block"):
    return quant_expert_gemm(7168, 2048, fmt, num_sms(gpu), 8, input_quantised=True)


def test_one_expert_of_few_rows_runs_one_narrow_wave_a_gemm():
    plain = _gemm()
    masked = masked_gemm(plain, "H200", "fp8_block", 1)
    assert isinstance(masked, MaskedExpertGemm)
    rows = masked_rows(np.array([8.0]), masked, 0.0)
    assert rows[0] == 8.0
    # one wave a GEMM, as the 64 x 128 tiles; but 16 x 32 and 16 x 64 tiles (one DeepSeek-V3
    # expert at 8 rows on 132 SMs), a fraction of the MMAs
    assert masked.waves(rows)[0] == 2.0
    tiles = np.array([float(row_tiles(np.array([8.0])))])
    assert masked.quantized_mflops(rows)[0] < 0.3 * plain.quantized_mflops(tiles)[0]


def test_a_few_experts_stream_their_weights_at_the_stated_efficiencies():
    hw = get_hardware("H200")
    rate = absolute(gemm_defaults(), hw, "fp8_block")
    plain = _gemm()
    masked = masked_gemm(plain, "H200", "fp8_block", 1)
    pairs, active = np.array([8.0]), np.array([1.0])
    base = rate["base_us"] + pairs * plain.quant_bytes_per_row * 1e-3 / rate["hbm_gbps"]
    stream = (plain.weight_bytes + pairs * plain.roofline_row_bytes) * 1e-3 / rate["hbm_gbps"]
    t = experts_rank_us(pairs, active, masked_rows(pairs, masked, 0.0), masked, rate)
    assert np.allclose(t, base + stream)             # memory-bound: the weights' stream
    t_plain = experts_rank_us(pairs, active, np.array([1.0]), plain, rate)
    assert t_plain[0] > t[0]                         # a 64 x 128 tile a wave: compute-bound


def test_only_deepgemm_formats_take_the_masked_layout():
    plain = _gemm("H200", "nvfp4")
    assert masked_gemm(plain, "H200", "nvfp4", 4) is plain
    assert masked_gemm(_gemm("B200"), "B200", "fp8_block", 4).num_groups == 4
    tiles = np.array([3.0])
    assert masked_rows(np.array([100.0]), plain, tiles)[0] == 3.0
