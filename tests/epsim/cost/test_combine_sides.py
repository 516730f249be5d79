"""DeepEP normal's intranode combine: the longest sending queue and the receiving warps' rounds,
the slower side paces (`epsim.cost.combine_sides`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from epsim.cost.combine_sides import (combine_sides, expected_max_z, queue_spread,
                                      reduction_rounds)


def test_expected_max_of_normals():
    """The Gumbel asymptote's first two terms: 8 ranks' 10 x 8 x 7 = 560 queues' longest is
    2.94 standard deviations above the mean (a sample of 560 normals' mean maximum is ~2.97);
    more queues, a longer longest."""
    a = math.sqrt(2 * math.log(560))
    assert expected_max_z(560) == pytest.approx(a - (math.log(math.log(560))
                                                     + math.log(4 * math.pi)) / (2 * a))
    assert expected_max_z(560) == pytest.approx(2.94, abs=0.01)
    assert expected_max_z(1) == 0.0
    assert expected_max_z(20) < expected_max_z(560) < expected_max_z(10**5)


def test_longest_queue_over_the_mean_falls_with_the_tokens():
    """1000 tokens a rank over 10 channels (100 each), each reaching a peer with p = 0.64 (top-8
    of 256 experts on 8 ranks, ~0.66): a queue is Binomial(100, 0.64), mean 64, sigma 4.8; the
    longest of 560 is 64 + 2.94 x 4.8. Sixteen times the tokens: the excess a quarter."""
    z = expected_max_z(560)
    small = float(queue_spread(64.0, 1000.0, 8, 10))
    assert small == pytest.approx(1 + z * math.sqrt(64 * 0.36) / 64)
    large = float(queue_spread(16 * 64.0, 16 * 1000.0, 8, 10))
    assert large - 1 == pytest.approx((small - 1) / 4)
    # no copies, no queue to stretch; every token to every peer (p = 1): no spread either
    np.testing.assert_allclose(queue_spread(np.array([0.0, 100.0]), 1000.0, 8, 10), [1.0, 1.0])


def test_receiving_rounds_follow_the_hidden_size():
    """A receiving warp moves 32 lanes x 16 bytes a round: a BF16 token of hidden 4096 is 16
    rounds whatever its top-k."""
    assert reduction_rounds(2.0 * 4096) == 16.0
    assert reduction_rounds(2.0 * 7168) == 28.0


def test_the_slower_side_keeps_its_column():
    """Unfitted (`token_us` 0) both columns stay (the plain sum the fit starts from); fitted, a
    top-8 exchange's long queues pace it (sending), a top-1 exchange's short ones leave the
    receiving warps pacing it."""
    params = {"nvl_gbps": 300.0, "token_us": 0.003}
    tokens = np.array([4096.0, 4096.0])
    nvl_kb = np.array([4096 * 4.67 * 8.192, 4096 * 0.875 * 10.24])    # top-8 H4096, top-1 H5120
    queue = nvl_kb / np.array([8.192, 10.24]) / (7 * 10)
    rounds = tokens * np.array([reduction_rounds(8192.0), reduction_rounds(10240.0)])
    send, recv = combine_sides(nvl_kb, rounds, queue, tokens, 8, 10, {"nvl_gbps": 300.0})
    np.testing.assert_allclose(recv, rounds)
    np.testing.assert_allclose(send, nvl_kb * queue_spread(queue, tokens, 8, 10))
    send, recv = combine_sides(nvl_kb, rounds, queue, tokens, 8, 10, params)
    assert send[0] > 0 and recv[0] == 0            # top-8: the longest queue
    assert send[1] == 0 and recv[1] == rounds[1]   # top-1: the reduction
    assert send[0] / 300.0 > rounds[0] * 0.003 and rounds[1] * 0.003 > nvl_kb[1] / 300.0
