"""benchmarks/pd_floor_probe.py: the descriptor lists on a small exact case, the P/D pairs of its
recorded result regenerating from the whole-set record, and the before/after table of
`pd_floor_rows.md` regenerating from the two committed runs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import pd_floor_probe as probe  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def test_one_descriptor_a_layer_a_run_contiguous_on_both_sides():
    src = np.array([0, 1, 2, 7, 8], dtype=np.int32)
    dst = np.array([10, 11, 20, 21, 22], dtype=np.int32)   # runs: [0,1] [2] [7,8]
    assert probe.build_descriptors(src, dst, 4096) == 3 * probe.LAYERS
    assert probe.build_descriptors(*probe._runs(15, scattered=False), 4096) == probe.LAYERS
    assert probe.build_descriptors(*probe._runs(15, scattered=True), 4096) == 15 * probe.LAYERS


def test_the_pairs_regenerate_from_the_record():
    recorded = (RESULTS / "pd_floor_probe.md").read_text()
    assert probe.pd_pairs() in recorded


def test_the_before_after_table_regenerates_from_the_committed_runs():
    runs = RESULTS / "pd_floor"
    table = probe.compare(str(runs / "before_65.json.gz"), str(runs / "after_45.json.gz"))
    assert table in (RESULTS / "pd_floor_rows.md").read_text()
    assert "| all | 45 |" in table
