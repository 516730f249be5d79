"""Blackwell's per-head MLA prefill (`epsim.cost.mla_ragged`): the TRT-LLM-gen ragged kernel's
256-row CTAs, a tile's MMAs at the cache's format plus its serial exponentials on the MUFU
(doubled on Blackwell Ultra), the bytes beside the tiles (an FP8 cache's cast pass among them),
its design rows equal to the model, and the rate a long chunk sustains."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.flash import TRTLLM_PREFILL, prefill_work
from epsim.cost.mla import (MLA_TERMS, absolute, mla_kernel_features, mla_kernel_us,
                            per_head_form, prefill_kernel_work, sustained_frac)
from epsim.cost.mla_ragged import (EXP_SERIAL_FRAC, RaggedWork, ragged, ragged_us, ragged_work,
                                   tile_scale)
from epsim.zoo import get_hardware

PARAMS = {"base_us": 10.0, "wave_us": 2.5, "per_split_us": 0.5, "hbm_frac": 0.9,
          "tensor_frac": 0.7}
FORM = per_head_form(128, 64, 128, 2.0)


def test_only_blackwell_runs_the_ragged_kernel():
    assert [ragged(g) for g in ("B200", "B300", "GB200", "GB300", "H100", "H200")] == \
        [True] * 4 + [False] * 2
    one = np.array([4096.0])
    assert isinstance(prefill_kernel_work(one, one, np.ones(1), 128, FORM, 148, "B200"),
                      RaggedWork)
    assert not isinstance(prefill_kernel_work(one, one, np.ones(1), 128, FORM, 132, "H200"),
                          RaggedWork)


def test_a_tile_is_its_mmas_and_its_serial_exponentials():
    """A 128 x 128 tile of 192 + 128 dims: 1280 BF16 tensor clocks, 640 FP8; its 16384
    exponentials 1024 MUFU clocks (512 on Blackwell Ultra), `EXP_SERIAL_FRAC` of them added."""
    exps = EXP_SERIAL_FRAC * 1024 / 1280
    assert tile_scale("B200", 192, 128, False) == pytest.approx(1.0 + exps)
    assert tile_scale("B200", 192, 128, True) == pytest.approx(0.5 + exps)
    assert tile_scale("B300", 192, 128, False) == pytest.approx(1.0 + exps / 2)
    assert tile_scale("GB300", 192, 128, True) == pytest.approx(0.5 + exps / 2)
    assert tile_scale("GB200", 192, 128, False) == tile_scale("B200", 192, 128, False)


def test_the_kernels_tiles_and_row_tiles():
    """The tiles are the TRT-LLM-gen context grid's (two 128-row tiles a CTA, the diagonal's
    masked tiles computed); the busiest SM's row tiles are a lone CTA's two, or the SMs' share."""
    tokens = np.array([16384.0, 64 * 256.0, 64.0])
    seqs = np.array([1.0, 64.0, 1.0])
    work = ragged_work(tokens, tokens, seqs, 128, 192, 128, 2.0, 148, "B200")
    grid = prefill_work(tokens, tokens, seqs, 128, 1, 160.0, 148, 1.0, grid=TRTLLM_PREFILL)
    assert np.allclose(work.mflops, grid.mflops * tile_scale("B200", 192, 128, False))
    assert work.waves.tolist() == pytest.approx([128 * 128 / 148, 64 * 128 * 2 / 148, 1.0])
    lone = ragged_work(np.array([4096.0]), np.array([4096.0]), np.ones(1), 1, 192, 128, 2.0,
                       148, "B200")
    assert lone.waves[0] == 2.0


def test_an_fp8_cache_moves_its_cast_pass_beside_the_tiles():
    """Q, K, V at the kernel's dtype and O in BF16; an FP8 cache's pass reads the three BF16
    and writes them FP8 first: 4 x 512 + 256 bytes a (token, head) against 2 x 512 + 256."""
    one = np.array([8192.0])
    bf16 = ragged_work(one, one, np.ones(1), 128, 192, 128, 2.0, 148, "B200")
    fp8 = ragged_work(one, one, np.ones(1), 128, 192, 128, 1.0, 148, "B200")
    assert bf16.mem_kb[0] == pytest.approx(8192 * 128 * (512 * 2 + 256) * 1e-3)
    assert fp8.mem_kb[0] == pytest.approx(8192 * 128 * (512 * 4 + 256) * 1e-3)
    assert fp8.mflops[0] < bf16.mflops[0]


def test_design_rows_times_coefficients_give_the_kernel():
    rng = np.random.default_rng(5)
    for gpu in ("B200", "GB300"):
        hw = get_hardware(gpu)
        for _ in range(5):
            seqs = rng.integers(1, 64, size=3).astype(float)
            tokens = seqs * rng.integers(1, 8192, size=3)
            work = prefill_kernel_work(tokens, tokens, seqs, 64, FORM, 148, gpu)
            rows = mla_kernel_features(work, PARAMS, hw)
            assert np.allclose(rows @ MLA_TERMS.coefficients(absolute(PARAMS, hw) | {
                "hbm_frac": PARAMS["hbm_frac"], "tensor_frac": PARAMS["tensor_frac"]}),
                ragged_us(work, absolute(PARAMS, hw)))
            assert np.allclose(mla_kernel_us(work, PARAMS, hw),
                               ragged_us(work, absolute(PARAMS, hw)))


def test_a_long_chunk_sustains_less_than_its_tensor_fraction():
    """The decode holds the rate a long prefill chunk sustains (`sustained_frac`): on Blackwell
    its causal pairs' FLOPs over the ragged kernel's time, below `tensor_frac` by the serial
    exponentials (less so on Blackwell Ultra) and the bytes beside the tiles."""
    b200, b300 = (sustained_frac(PARAMS, g) for g in ("B200", "B300"))
    assert b200 < b300 < PARAMS["tensor_frac"]
    tiles_only = PARAMS["tensor_frac"] / tile_scale("B200", 192, 128, False)
    assert 0.85 * tiles_only < b200 < tiles_only
