"""`time_breakdown.png`'s stack (epsim.report.figures.layer_stack): the parts reach the layer's
time, and the layer-time marks are labelled by what they show (overlap only when it is on)."""

from __future__ import annotations

import numpy as np

from epsim.report.figures import layer_stack


def _means(layer, **parts):
    out = {k: np.asarray(v, dtype=float) for k, v in parts.items()}
    out["layer_us"] = np.asarray(layer, dtype=float)
    return out


def test_a_fitted_sync_term_is_its_own_part_and_the_stack_is_the_layer():
    means = _means([110.0, 120.0], attention_us=[10, 10], dispatch_us=[20, 20], experts_us=[50, 60],
                   combine_us=[20, 20], shared_experts_us=[0, 0])
    parts, marks = layer_stack(means, two_batch_overlap=False)
    assert marks is None                                     # nothing drawn above the bars
    assert list(parts) == ["attention", "dispatch", "experts", "combine", "sync (fitted)"]
    np.testing.assert_allclose(np.sum(list(parts.values()), axis=0), means["layer_us"])


def test_overlap_marks_say_overlap_only_when_it_is_on():
    means = _means([80.0], attention_us=[10], dispatch_us=[20], experts_us=[50], combine_us=[20])
    _, with_tbo = layer_stack(means, two_batch_overlap=True)
    _, without = layer_stack(means, two_batch_overlap=False)
    assert "two-batch overlap" in with_tbo
    assert "two-batch overlap" not in without and "sync term is negative" in without


def test_exact_parts_need_no_marks():
    means = _means([100.0], attention_us=[10], dispatch_us=[20], experts_us=[50], combine_us=[20])
    parts, marks = layer_stack(means, two_batch_overlap=False)
    assert marks is None and "sync (fitted)" not in parts
