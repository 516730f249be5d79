"""`epsim validate --published`: docs/published.md regenerates byte for byte from the committed
code and data, every row carries its source and quote, and the predictions use no profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from epsim.validate import published_predict as predict
from epsim.validate.published import published_data, published_rows

ROOT = Path(__file__).resolve().parents[3]


def test_docs_published_regenerates_byte_for_byte(tmp_path):
    out = tmp_path / "published.md"
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "validate", "--published",
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == (ROOT / "docs" / "published.md").read_bytes(), (
        "docs/published.md is stale: run `epsim validate --published --out docs/published.md`")


@pytest.fixture(scope="module")
def rows():
    return published_rows()


def test_every_row_has_source_quote_and_a_finite_prediction(rows):
    tables = {r.table for r in rows}
    assert {"DeepEP V1 normal kernels (H800, InfiniBand)", "DeepEP V1 low-latency kernels (H800, InfiniBand)",
            "DeepEP V2 (SM90 / SM100)", "LMSYS DeepSeek-V3 on 96 H100 (SGLang; DeepSeek's H800 figures)",
            "TensorRT-LLM wide-EP EPLB, DeepSeek-R1 on GB200",
            "TensorRT-LLM Qwen3-235B-A22B offline throughput",
            "EPLB rebalance cost (stop-the-world)"} <= tables
    for r in rows:
        assert r.source and r.quote and r.conditions and r.predicted > 0 and r.published > 0
        # the published figure appears in its quote (read from the source, not typed twice)
        figure = f"{r.published:,.0f}" if r.published >= 100 else f"{r.published:g}"
        if r.table.startswith("Elastic EP throughput"):     # a ratio of two quoted figures
            values = [float(x) for x in r.quote.split("...")[-2:] for x in [x.split("|")[3]]]
            assert r.published == pytest.approx(values[1] / values[0]), (r.case, r.quote)
            continue
        assert figure in r.quote or f"{r.published:g}" in r.quote, (r.case, r.quote)
        if r.missed:
            assert r.why_missed, f"{r.table} {r.case} misses without a named mechanism"


def test_deepep_low_latency_internode_rows_within_target(rows):
    ll = [r for r in rows if r.table.startswith("DeepEP V1 low-latency") and "EP8 " not in r.case]
    assert len(ll) == 10 and all(abs(r.error_pct) <= 15.0 for r in ll)


def test_deepep_logical_bytes_follow_the_tests_definitions():
    # intranode: every rank receives ep * T * P(hit rank) tokens (its own included)
    out = predict.deepep_layer("H800", 8, 4096, "normal", "dispatch")
    hit = 1 - predict.comb(224, 8) / predict.comb(256, 8)
    assert out["logical_bytes"] == pytest.approx(8 * 4096 * hit * 7168 * 2 * predict.FP8_FACTOR)
    # internode EP64: 4 of 8 node groups, E[distinct nodes] of 8 experts among 4 x 32
    out = predict.deepep_layer("H800", 64, 4096, "normal", "combine")
    nodes = 4 * (1 - predict.comb(96, 8) / predict.comb(128, 8))
    assert out["logical_bytes"] == pytest.approx(4096 * nodes * 7168 * 2)
    # the EP64 traffic is group-limited: a token reaches at most 4 of the 8 nodes
    rdma_per_token = out["traffic"].rdma_recv.max() / 4096
    assert rdma_per_token < 4.0 < 8 * 0.62


def test_predictions_use_datasheet_profiles_only():
    cm = predict.cost_model(predict.get_model("DeepSeek-V3"), "H200", 16)
    assert cm.profile.components == {} and cm.profile.hardware == "H200"


def _count_rows(node) -> int:
    """Rows the data file yields: one per entry of each `rows`, and the elastic entry's
    throughput ratios besides (every row but the reference)."""
    if isinstance(node, dict):
        extra = len(node["rows"]) - 1 if "throughput_reference_failed" in node else 0
        return extra + sum(len(v) if k == "rows" else _count_rows(v) for k, v in node.items())
    return 0


def test_published_json_has_every_row_of_the_data_file():
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "validate", "--published", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert len(data["rows"]) == _count_rows(published_data()) >= 40
    assert all({"published", "predicted", "error_pct", "source"} <= set(r) for r in data["rows"])
    assert {s["verdict"] for s in data["summary"]} <= {"pass", "miss", "shown"}
