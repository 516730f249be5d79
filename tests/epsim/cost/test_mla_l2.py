"""The absorbed MLA prefill's tiles and L2 stream (`epsim.cost.mla_l2`): FlashAttention-3's
64 x 64 tiles of head-packed CTAs counted as a loop over the CTAs counts them, the L2 stream's
own design column equal to the model, the stream binding long chunks at 128 heads, the CTAs'
queries read from HBM beside it, and the rate a long chunk sustains holding the decode's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from epsim.cost.flash import kernel_us
from epsim.cost.mla import (MLA_PREFILL_TERMS, absolute, absorbed_form, mla_kernel_features,
                            mla_kernel_us, per_head_form, prefill_kernel_work, sustained_frac,
                            transferred)
from epsim.cost.mla_l2 import (ABSORBED_KEYS, ABSORBED_ROWS, absorbed_tiles, fold_l2, l2_us,
                               query_us)
from epsim.zoo import get_hardware

H100 = get_hardware("H100")
PARAMS = {"base_us": 4.0, "wave_us": 8.0, "per_split_us": 0.5, "hbm_frac": 0.5,
          "tensor_frac": 0.95, "l2_gbps": 4500.0}


def _loop_tiles(chunk: int, heads: int) -> tuple[int, int]:
    """(CTAs, tiles) of one chunk, CTA by CTA: rows (token, head) a token's heads side by side,
    each CTA running the 64-key tiles up to its last row's token."""
    rows = chunk * heads
    ctas = math.ceil(rows / ABSORBED_ROWS)
    tiles = 0
    for k in range(ctas):
        last_token = (min((k + 1) * ABSORBED_ROWS, rows) - 1) // heads
        tiles += math.ceil((last_token + 1) / ABSORBED_KEYS)
    return ctas, tiles


@pytest.mark.parametrize("chunk, heads", [(16, 128), (256, 128), (4096, 16), (1024, 1),
                                          (64, 4), (2048, 64)])
def test_tiles_are_the_ctas_loop(chunk, heads):
    got = absorbed_tiles(np.array([float(chunk)]), np.zeros(1), np.ones(1), heads, 132)
    assert (got.ctas[0], got.total[0]) == _loop_tiles(chunk, heads)


def test_long_chunks_cost_their_pairs_short_ones_whole_tiles():
    """The math is whole 64 x 64 tiles: a 16384-token chunk little more than its causal pairs,
    a 16-token one a whole tile for each token's heads."""
    form = absorbed_form(512, 64, 2.0)
    per_pair = 128 * 2 * (576 + 512) * 1e-6                  # MFLOP a (query, key), 128 heads

    def work(chunk):
        tokens = np.array([chunk])
        return prefill_kernel_work(tokens, tokens, np.ones(1), 128, form, 132)

    assert work(16384.0).mflops[0] == pytest.approx(16384 * 16385 / 2 * per_pair, rel=0.02)
    assert work(16.0).mflops[0] >= 16 * 64 * per_pair      # each token pays 64 keys
    assert not work(16.0).overlap            # the CTAs' waves add to the streams


def test_the_waves_add_to_the_l2_stream():
    """A CTA's query load and output store stream no key tiles: a long chunk's waves add to
    its L2 stream rather than hide under it, and the stream is the key tiles alone."""
    form = absorbed_form(512, 64, 2.0)
    tokens = np.array([4096.0])
    work = prefill_kernel_work(tokens, tokens, np.ones(1), 128, form, 132)
    tiles = absorbed_tiles(tokens, np.zeros(1), np.ones(1), 128, 132)
    assert work.l2_kb[0] == pytest.approx(tiles.total[0] * 64 * 576 * 2e-3)
    assert work.waves[0] == math.ceil(4096 * 128 / 64 / 132)
    us = mla_kernel_us(work, PARAMS, H100)[0]
    assert us == pytest.approx(PARAMS["base_us"] + work.waves[0] * PARAMS["wave_us"]
                               + query_us(work, PARAMS["hbm_frac"] * H100.hbm_gbps)[0]
                               + l2_us(work, PARAMS)[0])


def test_the_queries_load_from_hbm_beside_the_tiles():
    """FlashAttention-3 loads a CTA's Q and Qv (576 BF16 values a row) once the MMAs release the
    one Q buffer, `EVICT_FIRST`: every (token, head) row's query is read from HBM and its time
    adds to the max at the HBM rate (twice the HBM rate: half the time), off the max's HBM side,
    which keeps the outputs and keys; the flash kernel's per-head work counts none."""
    form = absorbed_form(512, 64, 2.0)
    tokens = np.array([1024.0])
    work = prefill_kernel_work(tokens, tokens, np.ones(1), 128, form, 132)
    assert work.q_kb[0] == pytest.approx(1024 * 128 * 576 * 2e-3)
    assert work.mem_kb[0] + work.q_kb[0] == pytest.approx(
        (1024 * 128 * (576 + 512) * 2 + 1024 * 576 * 2) * 1e-3)
    # the max binds on the L2 stream here: a faster HBM saves half the queries' time alone
    fast = {**PARAMS, "hbm_frac": 2 * PARAMS["hbm_frac"]}
    saved = mla_kernel_us(work, PARAMS, H100)[0] - mla_kernel_us(work, fast, H100)[0]
    assert saved == pytest.approx(query_us(work, PARAMS["hbm_frac"] * H100.hbm_gbps)[0] / 2)
    per_head = prefill_kernel_work(tokens, tokens, np.ones(1), 128,
                                   per_head_form(128, 64, 128, 2.0), 132)
    assert per_head.q_kb is None and query_us(per_head, 1.0) == 0.0


def test_design_rows_times_coefficients_give_the_kernel():
    rng = np.random.default_rng(5)
    for _ in range(10):
        seqs = rng.integers(1, 64, size=4).astype(float)
        ctx = seqs * rng.integers(16, 16384, size=4)
        work = prefill_kernel_work(ctx, ctx, seqs, int(rng.choice([1, 16, 128])),
                                   absorbed_form(512, 64, 1.0), 132)
        rows = mla_kernel_features(work, PARAMS, H100)
        assert rows.shape == (4, len(MLA_PREFILL_TERMS.params))
        assert np.allclose(rows @ MLA_PREFILL_TERMS.coefficients(PARAMS),
                           mla_kernel_us(work, PARAMS, H100))


def test_the_l2_stream_binds_long_chunks_and_needs_a_fit():
    form = absorbed_form(512, 64, 2.0)
    tokens = np.array([16384.0])
    work = prefill_kernel_work(tokens, tokens, np.ones(1), 128, form, 132)
    us = mla_kernel_us(work, PARAMS, H100)[0]
    assert us == pytest.approx(PARAMS["base_us"] + work.waves[0] * PARAMS["wave_us"]
                               + query_us(work, PARAMS["hbm_frac"] * H100.hbm_gbps)[0]
                               + l2_us(work, PARAMS)[0])
    assert mla_kernel_features(work, PARAMS, H100)[0, -1] == work.l2_kb[0]
    # no fitted L2 rate (Blackwell's per-head fit, an older profile): the kernel as before
    plain = {k: v for k, v in PARAMS.items() if k != "l2_gbps"}
    assert l2_us(work, plain) is None and fold_l2(work, plain, 1.0) is work
    p = absolute(plain, H100)
    assert mla_kernel_us(work, plain, H100)[0] == pytest.approx(
        kernel_us(work, p)[0] + query_us(work, p["hbm_gbps"])[0])


def test_per_head_tiles_stream_their_keys_too():
    """SGLang's per-head prefill (what the simulator prices) reads each 128-row tile's keys' K
    and V at BF16: a Hopper fit's L2 rate caps its math too."""
    tokens = np.array([8192.0])
    work = prefill_kernel_work(tokens, tokens, np.ones(1), 128, per_head_form(128, 64, 128, 1.0),
                               132)
    tiles = work.mflops[0] / (128 * 128 * 2 * (192 + 128) * 1e-6)
    assert work.l2_kb[0] == pytest.approx(tiles * 128 * 320 * 2e-3)      # the keys alone


def test_decode_holds_the_rate_a_long_chunk_sustains():
    frac = sustained_frac(PARAMS, "H100")
    # bound by the L2 stream: ~121 FLOPs a byte of key tiles, a little less for the queries
    l2_bound = PARAMS["l2_gbps"] * 1e9 * 64 * 2 * (576 + 512) / (576 * 2) / 989.4e12
    assert 0.9 * l2_bound < frac < l2_bound
    assert sustained_frac({**PARAMS, "l2_gbps": None}, "H100") == PARAMS["tensor_frac"]


def test_a_hopper_fit_travels_to_blackwell_as_its_sustained_fraction():
    """Hopper's L2 rate says nothing of another L2: on Blackwell the fit prices as the
    fraction of the tensor peak a long chunk sustained, and stays as it is on Hopper."""
    on_b200 = transferred(PARAMS, "H100", "B200")
    assert "l2_gbps" not in on_b200
    assert on_b200["tensor_frac"] == sustained_frac(PARAMS, "H100")
    assert transferred(PARAMS, "H100", "H200") == PARAMS
