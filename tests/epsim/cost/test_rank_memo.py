"""Per-rank memos (`epsim.cost.rank_memo`) give the bits of pricing the batch alone: on the
batches a real closed-loop decode instance runs (a silicon row's, hundreds of requests per rank,
its shape changing at nearly every step)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from epsim.cost.attention import BatchCounts
from epsim.cost.model import CostModel
from epsim.cost.rank_memo import RankMemo, order_free_key
from epsim.sim.engine import Simulation
from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon.mapping import plan_row
from epsim.validate.silicon.rows import read_rows
from epsim.validate.silicon.run import closed_round

# a GB300 P/D row at 1,024 clients: a decode instance of EP 8 with DP attention
ROW = "2026_04_06_deepseek_r1_gb300_sglang_fp8_disagg_8192x1024_c1024_tp8_ep8_1424"
ROW_CSV = Path(__file__).parent / "data" / "silicon_row_1424.csv"      # the row, as the CSV has it


def _decode_batches(num_steps: int = 120) -> tuple[CostModel, list[BatchCounts]]:
    """The batches of the first steps of ROW's decode instance under its closed loop, and the
    cost model that priced them."""
    (row,) = read_rows(ROW_CSV)
    assert row.id == ROW
    decode = next(i for i in plan_row(row).instances if i.role == "decode")
    data = closed_round(decode, 2.0, 0.0186, row.osl, 1.9)
    data["workload"].update(duration_s=1.5, warmup_s=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulation(scenario_from_dict(data, where="test"))
    batches = []
    price = sim.stepper.price

    def keep(batch, now_s, step):
        if len(batches) < num_steps:
            batches.append(batch)
        return price(batch, now_s, step)

    sim.stepper.price = keep
    sim.run()
    return sim.cost_model, batches


def _fresh_terms(cm: CostModel, batch: BatchCounts):
    cm._terms_memo.clear()
    return cm._token_terms(batch, batch)


def test_real_decode_batches_change_shape_yet_hit_the_rank_memos():
    cm, batches = _decode_batches()
    assert len(batches) >= 50 and len(batches[0].tokens) > 1
    shapes = {b.tokens.tobytes() for b in batches}
    assert len(shapes) > len(batches) // 2          # the whole-batch memos would miss
    # projections: per rank, the bits of the batch-wide call; most ranks looked up
    priced = cm._rank_projections.num_priced
    for b in batches:
        direct = cm._projections_of(b.tokens, b.decode_tokens)
        assert np.array_equal(cm._projections(b), direct)
    assert cm._rank_projections.num_priced - priced < len(batches) * len(batches[0].tokens) / 4
    # token terms: the memo keyed by the ranks' counts in any order gives the terms of the
    # batch priced afresh, and serves batches whose ranks hold the same counts in another order
    for b in batches:
        remembered = cm._token_terms(b, b)
        assert remembered == _fresh_terms(cm, b)
    b = batches[-1]
    order = np.roll(np.arange(len(b.tokens)), 3)
    shuffled = BatchCounts(b.decode_tokens[order], b.decode_context[order], b.prefill_tokens[order],
                           b.prefill_context[order], b.prefill_pairs[order],
                           b.sampled_tokens[order], b.phase)
    cm._token_terms(b, b)
    assert cm._token_terms(shuffled, shuffled) is cm._token_terms(b, b)
    assert cm._token_terms(shuffled, shuffled) == _fresh_terms(cm, shuffled)


def test_rank_memo_is_the_function_elementwise():
    def fn(a, b):
        return np.sqrt(a) * 3.1 + b / 7.0

    priced = []
    memo = RankMemo(lambda a, b: (priced.append(len(a)), fn(a, b))[1])
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.integers(0, 6, 12).astype(np.float64)
        b = rng.integers(0, 3, 12).astype(np.float64)
        assert np.array_equal(memo(a, b), fn(a, b))
    # every (a, b) pair priced once: 6 x 3 at most, whatever the 20 calls asked
    assert sum(priced) == memo.num_priced <= 18


def test_order_free_key_forgets_the_ranks_order_only():
    a, b = np.array([3.0, 1.0, 2.0]), np.array([0.0, 5.0, 6.0])
    key = order_free_key(a, b)
    assert order_free_key(a[[2, 0, 1]], b[[2, 0, 1]]) == key
    assert order_free_key(a, b[[1, 0, 2]]) != key               # pairs kept together
