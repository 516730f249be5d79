"""The `torch` backend's static ("static") layout: same counts and outputs as the exact layout,
a fixed number of rows per rank, and the rebalance-traffic benchmark's dry run on gloo ranks
(the torch-vs-NCCL benchmark: tests/benchmarks/test_torch_a2a_vs_nccl.py)."""

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


def static_vs_normal_worker(rank: int, world_size: int, group, tokens: list[int]) -> dict:
    """One round trip (dispatch, experts = times two, combine) in both layouts on this rank's
    tokens; returns both outputs and the reference (bf16 values as float32 numpy arrays, exact,
    so nothing rides on shared memory after the rank exits) and both layouts' counts."""
    gen = torch.Generator().manual_seed(100 + rank)
    num_tokens, hidden, experts, top_k = tokens[rank], 32, 4 * world_size, 3
    x = torch.randn(num_tokens, hidden, generator=gen).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(num_tokens)]
                      ) if num_tokens else torch.zeros(0, top_k, dtype=torch.int64)
    if num_tokens > 1:
        ids[1, 0] = -1                                              # a dropped choice
    weights = torch.rand(num_tokens, top_k, generator=gen)
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpNames(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    out = {}
    for mode in ("normal", "static"):
        spec = BackendSpec(hidden_size=hidden, num_physical_experts=experts, top_k=top_k,
                           max_tokens_per_rank=max(tokens), dtype=torch.bfloat16, mode=mode)
        backend = make_backend("torch", spec, group)
        seen: set[str] = set()
        plain = {name: getattr(torch.Tensor, name) for name in ("item", "tolist")}

        def reads_back(name):
            def call(self, *args, **kwargs):
                seen.add(name)                # a value read back to the host
                return plain[name](self, *args, **kwargs)
            return call

        for name in plain:
            setattr(torch.Tensor, name, reads_back(name))
        try:
            with OpNames():               # every aten op of the round trip, stats left out
                dispatched = backend.dispatch(x, ids, weights)
                rows, counts = backend.expert_rows(dispatched)
                payload = backend.expert_payload(rows * 2.0, dispatched)
                combined = backend.combine(payload, dispatched)
        finally:
            for name, fn in plain.items():
                setattr(torch.Tensor, name, fn)
        out[f"{mode}_ops"] = sorted(seen)
        assert combined.dtype == torch.bfloat16 and combined.shape == (num_tokens, hidden)
        out[mode] = combined.float().numpy()
        out[f"{mode}_stats"] = dispatched.stats.to_host()
        out[f"{mode}_counts"] = counts.tolist()
    # what the single device computes: experts times two, weighted in bf16, summed in fp32
    kept = torch.where(ids >= 0, weights, 0.0)                    # [tokens, top_k]
    out["reference"] = ((x * 2.0).unsqueeze(1) * kept.to(torch.bfloat16).unsqueeze(-1)
                        ).float().sum(dim=1).to(torch.bfloat16).float().numpy()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [[5, 0], [7, 3, 4]], ids=["ep2-rank-without-tokens", "ep3"])
def test_static_layout_equals_exact_layout_over_gloo(tokens):
    """The static layout (all-gather; reduce-scatter at two ranks, all-to-all and a sum with
    fp32 accumulation at three) returns the exact layout's outputs in bf16: bitwise at two
    ranks, within one bf16 rounding at three; its counts are the exact layout's, a rank without
    tokens included; and no op of its round trip reads a value back to the host."""
    from live.dist import run_ranks

    import numpy as np

    results = run_ranks(static_vs_normal_worker, len(tokens), "gloo", (tokens,), timeout_s=300)
    for rank, r in enumerate(results):
        assert r["static"].shape == (tokens[rank], 32)
        if len(tokens) == 2:
            assert np.array_equal(r["static"], r["normal"]), rank
        else:
            np.testing.assert_allclose(r["static"], r["normal"], rtol=0.0079, atol=1e-2)
        np.testing.assert_allclose(r["static"], r["reference"], rtol=0.02, atol=0.02)
        assert r["static_stats"] == r["normal_stats"], rank
        assert r["static_counts"] == r["normal_counts"]
        # no host sync: nothing reads a value back (.item/.tolist) or sizes by data (nonzero);
        # the exact layout does both, which shows the check sees them
        syncs = {"item", "tolist", "_local_scalar_dense", "nonzero", "masked_select", "unique",
                 "bincount"}
        assert syncs.isdisjoint(r["static_ops"]), sorted(syncs & set(r["static_ops"]))
        assert {"tolist", "nonzero"} <= set(r["normal_ops"])
    assert sum(sum(r["static_stats"]["local_expert_tokens"]) for r in results) == \
        sum(3 * t for t in tokens) - sum(1 for t in tokens if t > 1)   # pairs conserved
