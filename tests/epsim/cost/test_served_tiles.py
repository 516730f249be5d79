"""SGLang's served fused-MoE tiles: the shipped ratio is the record's, and where it applies."""

from pathlib import Path

import numpy as np
import pytest

from epsim.cost import served_tiles

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_ratios_are_the_records():
    assert served_tiles.ratios_from_record(root=ROOT) == served_tiles.RATIOS


def test_factor_is_the_ratio_at_measured_tokens_held_beyond_them():
    tokens = sorted(served_tiles.RATIOS)
    assert served_tiles.factor(tokens) == pytest.approx([served_tiles.RATIOS[t] for t in tokens])
    assert served_tiles.factor(0.5) == pytest.approx(served_tiles.RATIOS[1])
    assert served_tiles.factor(32768) == pytest.approx(served_tiles.RATIOS[8192])
    between = float(served_tiles.factor(np.sqrt(16 * 32)))      # log-midpoint of 16 and 32
    assert between == pytest.approx((served_tiles.RATIOS[16] + served_tiles.RATIOS[32]) / 2)


def test_applies_only_to_the_served_h200_e257_problem():
    served = dict(gpu="H200", fused_fit=True, weight_dtype="fp8_block", intermediate_per_gpu=256,
                  fused_shared=1, backend="none", served_tiles=True)
    assert served_tiles.applies(**served)
    for field, other in (("gpu", "H100"), ("fused_fit", False), ("weight_dtype", "bf16"),
                         ("intermediate_per_gpu", 512), ("fused_shared", 0),
                         ("backend", "deepep"), ("served_tiles", False)):
        assert not served_tiles.applies(**{**served, field: other}), field
