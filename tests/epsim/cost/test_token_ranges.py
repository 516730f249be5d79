"""The fitted token-range check as steps are priced (`CostModel._check_tokens`): a step is judged
against the ranges of the components that price it, not against another DeepEP kernel mode's."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from epsim.cost import CostModel, build_tables, contiguous_placement
from epsim.eplb import Placement
from epsim.profile import ExtrapolationWarning, Profile
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_model

PROFILES = Path(__file__).resolve().parents[3] / "epsim" / "data" / "profiles"


def _token_warnings(cm, tokens: float, phase: str) -> list[str]:
    tables = build_tables(Placement.on_cluster(contiguous_placement(1, 256, 8), 256, 8, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cm.moe(np.full((1, 256), 8 * tokens * 8 / 256), np.full(8, tokens), tables, phase=phase)
    return [str(w.message) for w in caught if issubclass(w.category, ExtrapolationWarning)
            and "num_tokens_per_rank" in str(w.message)]


def test_prefill_on_deepep_normal_is_not_judged_by_the_low_latency_range():
    """GB300's DeepEP normal kernels are fitted on 1-131072 tokens per rank, its low-latency
    ones on 1-1024: a prefill step of 8192 tokens per rank runs the normal kernels, inside
    their range; a decode step of 2048 runs the low-latency ones, outside theirs."""
    profile = Profile.load(PROFILES / "aic_gb300.json")
    assert profile.components["deepep/dispatch/normal/fp8"].valid_range[
        "num_tokens_per_rank"] == [1.0, 131072.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = CostModel(get_model("DeepSeek-V3"), ClusterSpec(gpu="GB300"),
                       DeploymentSpec(ep_size=8, moe_a2a_backend="deepep"), profile)
    assert not [m for m in _token_warnings(cm, 8192.0, "prefill") if "deepep/" in m]
    decode = _token_warnings(cm, 2048.0, "decode")
    assert any("deepep/" in m and "outside fitted [1, 1024]" in m for m in decode), decode
