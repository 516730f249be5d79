"""benchmarks/h200_agg_tpot_diagnosis.py and deepseek_h200_decode_stages.py: the uniform-routing
HBM floor on a small exact case, and both recorded results regenerating (every table row and
conclusion line, not the header's date and machine; skipped without aiconfigurator-core, which
holds the op tables and the silicon sample)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.benchmarks.test_recorded_results import RESULTS, _run  # noqa: E402

import h200_agg_tpot_diagnosis as diagnosis  # noqa: E402


def test_active_experts_counts_the_fused_shared_expert():
    assert diagnosis.active_experts(1) == pytest.approx(9.0)        # 8 routed + the shared one
    assert diagnosis.active_experts(4096) == pytest.approx(257.0)   # every routed expert


def test_floor_of_four_added_clients_without_a_cache():
    # 4 -> 8 clients with no context: only the newly activated experts' MoE-TP8 slices,
    # 256 ((31/32)^4 - (31/32)^8) = 26.89 experts x 3 x 7168 x 2048 / 8 bytes x 58 layers
    # = 8.586 GB at H200's 4,800 GB/s = 1.789 ms; the measured grew 2.0 ms
    data = {("h200_sxm", "img:v0", 0, 0): {4: (10.0, 11.0), 8: (12.0, 14.5)}}
    lines, found = diagnosis.floor_rows(data)
    assert lines[-1] == "| h200_sxm, v0, 0/0 | 4 -> 8 | +2.00 | +3.50 | 1.79 | 89% |"
    assert found[0]["floor_frac"] == pytest.approx(1.7887 / 2.0, rel=1e-3)


@pytest.mark.parametrize("script, result", [
    ("h200_agg_tpot_diagnosis.py", "h200_agg_tpot_diagnosis.md"),
    ("deepseek_h200_decode_stages.py", "deepseek_h200_decode_stages.md")])
def test_recorded_result_regenerates(script, result, tmp_path):
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / result
    _run(f"benchmarks/{script}", "--out", str(out))
    body = lambda text: [line for line in text.splitlines()   # noqa: E731
                         if line.startswith(("|", "##", "- ", "epsim's step"))]
    committed = body((RESULTS / result).read_text())
    assert len(committed) > 20 and body(out.read_text()) == committed
