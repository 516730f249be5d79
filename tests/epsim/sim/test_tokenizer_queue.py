"""The server's tokenizer queue (`epsim.sim.tokenizer_queue`) and its place before the scheduler."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.cost.tokenize import tokenize_s
from epsim.sim import simulate
from epsim.sim.tokenizer_queue import TokenizerQueue
from tests.epsim.sim.test_engine import tiny_scenario


def test_a_wave_is_tokenised_one_prompt_at_a_time():
    queue = TokenizerQueue()
    lens = np.array([1024, 8192, 1024])
    seen = queue.through(np.zeros(3), lens)
    assert seen == pytest.approx(np.cumsum(tokenize_s(lens)))
    # a send after the tokenizer went idle waits for nothing but its own prompt
    later = queue.through(np.array([1.0]), np.array([8192]))
    assert later == pytest.approx([1.0 + float(tokenize_s(8192))])
    assert queue.free_s == later[0]


def _one_client(tokenize: bool):
    return tiny_scenario(
        deployment={"server_tokenize": "serial" if tokenize else "off"},
        workload={"arrivals": {"kind": "concurrency", "clients": 1},
                  "input_len": {"kind": "fixed", "value": 4096},
                  "output_len": {"kind": "fixed", "value": 4},
                  "duration_s": 0.3, "warmup_s": 0.0})


def test_a_lone_requests_ttft_adds_its_tokenisation():
    # one client: each request's prefill starts once its prompt is tokenised (the engine's clock
    # is in us), and its TTFT, counted from the send, is that wait plus the same prefill step
    wait_s = float(tokenize_s(4096))
    ttft_s = {}
    for tokenize in (False, True):
        result = simulate(_one_client(tokenize))
        start = result.steps["start_us"] * 1e-6
        done = np.flatnonzero(np.isfinite(result.finish_s))
        assert done.shape[0] >= 3
        i = done[1]
        first = int(np.searchsorted(start, result.arrival_s[i] - 2e-6))
        assert start[first] - result.arrival_s[i] == pytest.approx(wait_s if tokenize else 0.0,
                                                                   abs=2e-6)
        ttft_s[tokenize] = result.first_token_s[i] - result.arrival_s[i]
    assert ttft_s[True] - ttft_s[False] == pytest.approx(wait_s, abs=4e-6)


def test_a_parallel_tokenizer_holds_each_prompt_for_its_own_time_only():
    queue = TokenizerQueue(serial=False)
    lens = np.array([1024, 8192, 1024])
    assert queue.through(np.zeros(3), lens) == pytest.approx(tokenize_s(lens))
