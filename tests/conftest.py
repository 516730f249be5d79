"""Shared fixtures: a seeded rng and the tiny shape (2 layers, 8 experts, 4 ranks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@dataclass(frozen=True)
class TinyShape:
    num_layers: int = 2
    num_experts: int = 8
    num_ranks: int = 4
    top_k: int = 2
    hidden_size: int = 64
    moe_intermediate_size: int = 32


@pytest.fixture
def tiny() -> TinyShape:
    return TinyShape()
