"""benchmarks/aic_grouped_routing.py: grouped top-k of AIC's balanced logits, and its recorded
result regenerating from the installed aiconfigurator-core's tables (all but the header line,
which names the date and machine)."""

from __future__ import annotations

import numpy as np

from epsim.calibrate.aic_records import grouped_balanced_counts
from tests.benchmarks.regenerate import assert_out_regenerates


def test_grouped_topk_of_balanced_logits_keeps_the_four_lowest_groups():
    counts = grouped_balanced_counts(16384, 256, 8, 8, 4)
    assert counts.sum() == 16384 * 8                        # every slot lands once
    assert counts[128:].sum() == 0                          # groups 4-7 never win a tie
    assert np.array_equal(counts[:4], [16384] * 4)          # the lowest-index fillers
    # without groups to choose (one group holding every expert) the marked experts win:
    # the balanced counts, 512 pairs each
    assert np.array_equal(grouped_balanced_counts(16384, 256, 8, 1, 1), [512] * 256)


def test_recorded_result_regenerates(tmp_path):
    assert_out_regenerates("aic_grouped_routing.py", "aic_grouped_routing.md", tmp_path)
