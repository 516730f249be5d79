"""benchmarks/qwen_h200_fa3_splits.py: its copy of FA3's split rules against the cases FA3's own
comments state, and a split plan that covers every key block once."""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import qwen_h200_fa3_splits as bench  # noqa: E402  (a script folder, not a package)


def test_static_splits_matches_fa3_comments():
    # heuristics.h: "batch * n_heads = 48 and 108 SMs: 2 splits (efficiency 0.89) beats 3 (0.67)"
    assert bench.static_splits(48, 100, num_sm=108) == 2
    # "we never split for hdim = 128 and seqlen_k = 512" (4 blocks of 128 keys)
    assert bench.static_splits(1, 4) == 1
    # enough query blocks to fill the SMs: no split
    assert bench.static_splits(120, 300) == 1


def test_decode_plan_covers_each_request_once():
    plan = bench.decode_splits(clients=9, context=5000, kv_heads=1, context_len=40960)
    assert plan["bs"] == 12                          # 9 requests replay the 12-row graph
    assert plan["splits"] * plan["chain"] >= math.ceil(5000 / bench.BLOCK_N)
    assert plan["chain"] < plan["one_pass"]          # the splits shorten the serial chain
    assert plan["ctas"] <= bench.NUM_SM              # one wave at these shapes
