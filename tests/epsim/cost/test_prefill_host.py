"""A P/D prefill server's host work per request (`epsim.cost.prefill_host`)."""

from __future__ import annotations

import pytest

from epsim.cost.prefill_host import (AUX_BUFFERS, DESCRIPTOR_US, REQUEST_OPS, exposed_s,
                                     kv_descriptors, request_host)

LAYERS = 61          # DeepSeek-R1: one MLA KV buffer a layer
PAGE = 64            # trtllm_mla's page size on Blackwell


def test_descriptors_are_a_layer_per_run_of_pages():
    # 1,000 tokens over 64-token pages: 16 pages, one run unless fragmented
    assert kv_descriptors(1000, PAGE, LAYERS) == LAYERS
    assert kv_descriptors(1000, PAGE, LAYERS, fragmented=True) == LAYERS * 16
    assert kv_descriptors(1024, PAGE, LAYERS, fragmented=True) == LAYERS * 16
    assert kv_descriptors(1025, PAGE, LAYERS, fragmented=True) == LAYERS * 17


def test_a_request_prices_its_ops_and_descriptors():
    one = request_host(1000, 16384, PAGE, LAYERS, launch_us=10.0)
    assert one.descriptors == LAYERS + AUX_BUFFERS
    assert one.ops == sum(REQUEST_OPS.values())
    assert one.host_us == pytest.approx(one.ops * 10.0 + (LAYERS + AUX_BUFFERS) * DESCRIPTOR_US)
    # a prompt cut in 3 chunks sends 3 KV transfers: 3 runs' descriptors and 2 more read-backs
    three = request_host(20000, 8192, PAGE, LAYERS, launch_us=10.0)
    assert three.descriptors == 3 * LAYERS + AUX_BUFFERS
    assert three.ops == one.ops + 2 * 5


def test_the_overlap_loop_hides_host_work_shorter_than_the_forward():
    assert exposed_s(0.05, 0.7, overlap=True, forward_waits_host=False) == 0.0
    assert exposed_s(0.9, 0.7, overlap=True, forward_waits_host=False) == pytest.approx(0.2)
    # the normal loop, or a forward that waits on the host (DeepEP normal mode), exposes it all
    assert exposed_s(0.05, 0.7, overlap=False, forward_waits_host=False) == 0.05
    assert exposed_s(0.05, 0.7, overlap=True, forward_waits_host=True) == 0.05
