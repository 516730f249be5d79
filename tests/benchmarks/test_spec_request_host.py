"""benchmarks/spec_request_host.py: the transcribed loop bodies do what SGLang's do to a request
(so the timing is of that work), and the recorded figures are what the cost model holds."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import spec_request_host as srh  # noqa: E402

from epsim.cost.scheduler_host import REQUEST_HOST_US  # noqa: E402


def test_the_verify_loop_appends_each_accepted_token_and_counts_the_drafts():
    torch = pytest.importorskip("torch")
    reqs = [srh.Req(i) for i in range(3)]
    # request 0 accepts 1 token (no draft), 1 accepts 2, 2 accepts all 3
    rows = [[0, -1, -1], [3, 4, -1], [6, 7, 8]]
    predict = list(range(100, 109))
    accept_index = torch.tensor(rows, dtype=torch.int32)
    extend_lens, lora_ids, _, keep = srh.verify_part(reqs, accept_index, rows, predict, [0, 1, 2])
    assert [r.output_ids[100:] for r in reqs] == [[100], [103, 104], [106, 107, 108]]
    assert [r.kv_committed_len for r in reqs] == [1125, 1126, 1127]
    assert [r.spec_accepted_tokens for r in reqs] == [0, 1, 2]
    assert [r.spec_acceptance_histogram for r in reqs] == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    assert extend_lens == [1, 2, 3] and keep == [0, 1, 2] and lora_ids == [None] * 3


def test_the_stream_loop_outputs_every_request_its_new_tokens():
    pytest.importorskip("torch")
    reqs = [srh.Req(i) for i in range(2)]
    for r in reqs:
        r.output_ids += [7, 8]                          # two tokens since the last send
    import pickle
    lists = pickle.loads(srh.stream_part(reqs))
    rids, output_ids, completion = lists[0], lists[6], lists[11]
    assert rids == [reqs[0].rid, reqs[1].rid]
    assert output_ids == [[7, 8], [7, 8]] and completion == [102, 102]
    assert all(r.send_token_offset == 102 for r in reqs)


def test_the_recorded_figures_are_the_cost_models():
    text = (ROOT / "benchmarks/results/spec_request_host.md").read_text()
    found = re.search(r"verify ([\d.]+), result ([\d.]+), stream ([\d.]+) µs", text)
    assert found is not None
    recorded = dict(zip(("verify", "result", "stream"), map(float, found.groups())))
    assert recorded == REQUEST_HOST_US
