"""The `torch` backend's static ("static") layout: same counts as the exact layout, a
fixed number of rows per rank, and the side-by-side benchmark's dry run on gloo ranks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from live.backends import BackendSpec, make_backend
from live.errors import LiveError

ROOT = Path(__file__).resolve().parents[2]


def _spec(mode: str, tokens: int = 6) -> BackendSpec:
    return BackendSpec(hidden_size=16, num_physical_experts=8, top_k=3, max_tokens_per_rank=tokens,
                       dtype=torch.float32, mode=mode)


def test_static_layout_matches_exact_layout_on_one_rank():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 16, generator=gen)
    ids = torch.stack([torch.randperm(8, generator=gen)[:3] for _ in range(6)])
    ids[2, 1] = -1                                             # a dropped choice
    weights = torch.rand(6, 3, generator=gen)
    outs, counts = {}, {}
    for mode in ("normal", "static"):
        backend = make_backend("torch", _spec(mode), None)
        dispatched = backend.dispatch(x, ids, weights)
        rows, slot_counts = backend.expert_rows(dispatched)
        counts[mode] = slot_counts.tolist()
        payload = backend.expert_payload(rows * 2.0, dispatched)     # experts: times two
        outs[mode] = backend.combine(payload, dispatched)
        assert dispatched.stats.send_tokens_to_rank.tolist() == [6]
    assert counts["normal"] == counts["static"]
    expected = 2.0 * x * torch.where(ids >= 0, weights, 0).sum(dim=1, keepdim=True)
    for mode, out in outs.items():
        torch.testing.assert_close(out, expected, msg=mode)


def test_static_layout_refuses_more_tokens_than_its_capacity():
    backend = make_backend("torch", _spec("static", tokens=4), None)
    with pytest.raises(LiveError, match=r"tokens \(6\) must be <= max_tokens_per_rank \(4\)"):
        backend.dispatch(torch.zeros(6, 16), torch.zeros(6, 3, dtype=torch.int64),
                         torch.ones(6, 3))


def test_unknown_mode_is_refused():
    with pytest.raises(LiveError, match=r"mode \('fast'\) must be one of normal, static"):
        make_backend("torch", _spec("fast"), None)


@pytest.mark.slow
def test_side_by_side_benchmark_dry_run(tmp_path):
    proc = subprocess.run([sys.executable, "benchmarks/torch_a2a_vs_nccl.py", "--cpu", "--gpus",
                           "2", "--tokens", "1", "5", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(r["tokens_per_rank"], r["mode"]) for r in rows] == [
        (1, "normal"), (1, "static"), (5, "normal"), (5, "static")]
    for r in rows:
        assert r["path_us"] > 0 and r["raw_us"] > 0
        if r["mode"] == "static":                 # capacity rows to every rank
            assert r["rows_sent"] == 2 * r["tokens_per_rank"]
        else:                                          # one row per (token, destination)
            assert 1 <= r["rows_sent"] <= 2 * r["tokens_per_rank"]
    assert "| tokens/rank | mode |" in (tmp_path / "table.md").read_text()


@pytest.mark.slow
def test_rebalance_traffic_benchmark_dry_run(tmp_path):
    from epsim.records import read_records

    proc = subprocess.run([sys.executable, "benchmarks/rebalance_traffic.py", "--cpu", "--experts",
                           "1", "2", "--iters", "1", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    records = read_records(tmp_path / "records.jsonl")          # valid MeasurementRecords
    expert_bytes = 3 * 64 * 32 * 4            # the CPU shape's expert, fp32
    assert [(r.bytes, r.extra["num_transfers"]) for r in records] == [
        (expert_bytes, 2), (expert_bytes, 1), (2 * expert_bytes, 4), (2 * expert_bytes, 1)]
    fit = json.loads((tmp_path / "fit.json").read_text())
    assert fit["num_points"] == 4 and set(fit) >= {"base_us", "per_transfer_us", "wire_gbps"}
