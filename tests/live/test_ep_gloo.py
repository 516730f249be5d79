"""EP over real gloo process groups (spawned ranks): outputs equal the single-device block's,
and tokens are conserved through dispatch and combine, for every backend that runs on CPU."""

import numpy as np
import pytest

from live.bench.checks import EqualityCase, equality_cases_worker, tolerance
from live.config import MoeConfig
from live.dist import run_ranks

pytestmark = pytest.mark.slow

CONFIG = MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=8, top_k=2, num_layers=2)
TOKENS = (5, 0, 7, 3)                                  # uneven, one rank without tokens
HOTSET = {"kind": "hotset", "num_hot": 2, "hot_frac": 0.7}


def _redundant(world_size: int) -> np.ndarray:
    """8 experts + world_size replicas of the hot experts, shuffled per layer."""
    rng = np.random.default_rng(world_size)
    rows = [rng.permutation(np.concatenate([np.arange(8), rng.choice(8, world_size)]))
            for _ in range(CONFIG.num_layers)]
    return np.array(rows)


def _cases(world_size: int) -> list[EqualityCase]:
    tokens = TOKENS[:world_size]
    redundant = _redundant(world_size)
    out = []
    # torch "static": the static-shape layout without host sync (padding rows masked)
    for backend, mode in (("torch", "normal"), ("torch", "static"), ("none", "normal")):
        name = backend if mode == "normal" else f"{backend}-{mode}"
        out += [
            EqualityCase(CONFIG, backend, tokens, deepep_mode=mode, label=f"{name}/router"),
            EqualityCase(CONFIG, backend, tokens, placement=redundant, skew=HOTSET,
                         load="checkpoint", deepep_mode=mode,
                         label=f"{name}/hotset+redundant/checkpoint"),
            EqualityCase(CONFIG, backend, tokens, placement=redundant,
                         skew={"kind": "zipf", "alpha": 1.5}, dispatch_mode="random",
                         deepep_mode=mode, label=f"{name}/zipf+redundant/random/cache"),
        ]
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=["ep2", "ep4"])
def runs(request):
    world_size = request.param
    cases = _cases(world_size)
    per_rank = run_ranks(equality_cases_worker, world_size, "gloo", (cases,), timeout_s=600)
    return world_size, cases, per_rank


def _each(runs):
    world_size, cases, per_rank = runs
    for i, case in enumerate(cases):
        yield case, [rank_results[i] for rank_results in per_rank]


def test_outputs_equal_the_single_device_block(runs):
    for case, results in _each(runs):
        ref = max(r["ref_max_abs"] for r in results)
        err = max(r["max_abs_err"] for r in results)
        assert ref > 0.1, case.label                    # the comparison is not of zeros
        assert err <= tolerance(case.dtype, ref), (case.label, err)


def test_every_token_gets_back_exactly_top_k_pairs(runs):
    for case, results in _each(runs):
        for rank, r in enumerate(results):
            assert r["conserve_min"] == r["conserve_max"] == CONFIG.top_k, (case.label, rank)


def test_dispatched_pairs_are_tokens_times_top_k(runs):
    world_size, _, _ = runs
    total = sum(TOKENS[:world_size])
    for case, results in _each(runs):
        assert sum(r["conserve_pairs"] for r in results) == total * CONFIG.top_k, case.label
        for layer in range(CONFIG.num_layers):
            pairs = sum(sum(r["stats"][layer]["local_expert_tokens"]) for r in results)
            assert pairs == total * CONFIG.top_k, (case.label, layer)


def test_what_one_rank_sends_the_other_receives(runs):
    world_size, _, _ = runs
    tokens = TOKENS[:world_size]
    for case, results in _each(runs):
        for layer in range(CONFIG.num_layers):
            sent = np.array([r["stats"][layer]["send_tokens_to_rank"] for r in results])
            recv = np.array([r["stats"][layer]["recv_tokens_from_rank"] for r in results])
            np.testing.assert_array_equal(recv, sent.T, err_msg=case.label)
            if case.backend == "none":                 # all-gather: every rank gets every token
                np.testing.assert_array_equal(recv, np.tile(tokens, (world_size, 1)))
            else:                                      # one copy per (token, destination rank)
                assert (sent.sum(axis=1) <= np.array(tokens) * min(CONFIG.top_k, world_size)).all()

