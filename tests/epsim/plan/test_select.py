"""Constraints, objectives, the Pareto frontier and the infeasible message (epsim.plan.select)."""

from __future__ import annotations

import numpy as np
import pytest

from epsim.errors import SpecError
from epsim.plan.select import (Constraint, infeasible_message, lexicographic_best, pareto_mask,
                               parse_constraint, parse_objective)

KNOWN = ["num_gpus", "tpot_ms.p99", "ttft_ms.p90", "throughput_tokens_per_s_per_gpu"]


def test_parse_constraint_and_objective():
    c = parse_constraint(" tpot_ms.p99 <= 50 ", KNOWN)
    assert (c.metric, c.op, c.bound, c.text) == ("tpot_ms.p99", "<=", 50.0, "tpot_ms.p99<=50")
    o = parse_objective("max:throughput_tokens_per_s_per_gpu", KNOWN)
    assert o.sense == "max" and o.text == "max:throughput_tokens_per_s_per_gpu"


@pytest.mark.parametrize("text, match", [
    ("tpot_ms.p99 50", r"must look like METRIC<=VALUE"),
    ("tpot_ms.p99<=fast", r"value \(fast\) must be a number"),
    ("tpot.p99<=50", r"unknown metric \(tpot.p99\); did you mean tpot_ms.p99"),
])
def test_bad_constraints(text, match):
    with pytest.raises(SpecError, match=match):
        parse_constraint(text, KNOWN)


@pytest.mark.parametrize("text, match", [
    ("num_gpus", r"must look like min:METRIC or max:METRIC"),
    ("least:num_gpus", r"must look like min:METRIC"),
    ("min:gpus", r"unknown metric \(gpus\)"),
])
def test_bad_objectives(text, match):
    with pytest.raises(SpecError, match=match):
        parse_objective(text, KNOWN)


def test_constraints_never_met_by_nan():
    c = Constraint("x", "<=", 10.0)
    values = np.array([5.0, 10.0, 12.0, np.nan])
    assert c.met(values).tolist() == [True, True, False, False]
    assert c.miss(values).tolist() == [0.0, 0.0, pytest.approx(0.2), np.inf]
    assert c.best(values) == 5.0
    assert Constraint("x", ">=", 10.0).best(values) == 12.0


def brute_force_pareto(costs: np.ndarray) -> np.ndarray:
    keep = []
    for i, a in enumerate(costs):
        if not np.isfinite(a).all():
            keep.append(False)
            continue
        keep.append(not any(np.all(b <= a) and np.any(b < a) for j, b in enumerate(costs)
                            if j != i and np.isfinite(b).all()))
    return np.array(keep)


def test_pareto_mask_matches_brute_force(rng):
    costs = rng.integers(0, 6, size=(60, 3)).astype(float)     # ties and duplicates included
    costs[rng.integers(0, 60, 5), 1] = np.inf                   # NaN metrics arrive as inf
    np.testing.assert_array_equal(pareto_mask(costs), brute_force_pareto(costs))
    # a small case by hand: (1,3) and (2,2) and (3,1) trade off; (3,3) is dominated
    assert pareto_mask(np.array([[1., 3.], [2., 2.], [3., 1.], [3., 3.]])).tolist() == [True, True, True, False]


def test_lexicographic_best_breaks_ties_with_the_next_objective():
    costs = np.array([[8., -100.], [8., -300.], [4., np.inf], [16., -900.]])
    assert lexicographic_best(costs, np.array([True, True, False, True])) == 1
    assert lexicographic_best(costs, np.zeros(4, dtype=bool)) is None


def test_infeasible_message_names_the_closest_constraint():
    cols = {"tpot_ms.p99": np.array([80.0, 61.2, 70.0]), "num_gpus": np.array([8.0, 16.0, 32.0])}
    cons = [Constraint("tpot_ms.p99", "<=", 50.0), Constraint("num_gpus", "<=", 64.0)]
    msg = infeasible_message(cols, cons, lambda i: f"ep={[8, 16, 32][i]}")
    assert msg == ("no configuration meets all constraints (3 points): closest is tpot_ms.p99<=50, "
                   "best value 61.2 at ep=16")
    # each met alone, never together: the point closest overall and what it misses
    cons = [Constraint("tpot_ms.p99", "<=", 65.0), Constraint("num_gpus", ">=", 32.0)]
    msg = infeasible_message(cols, cons, lambda i: f"ep={[8, 16, 32][i]}")
    assert "each alone is met somewhere" in msg and "closest is ep=32, which misses tpot_ms.p99<=65 with 70" in msg
    nan = {"tpot_ms.p99": np.array([np.nan, np.nan])}
    assert "NaN everywhere" in infeasible_message(nan, [Constraint("tpot_ms.p99", "<=", 5)], str)

