"""The same checks on GPUs (NCCL, Mooncake); skipped without them. The GPU suite
(scripts/gpu_suite.sh) is the one-call version the lead runs on 2x H200."""

import pytest
import torch

from live.bench.checks import EqualityCase, equality_cases_worker, tolerance
from live.config import MoeConfig
from live.dist import run_ranks

pytestmark = pytest.mark.gpu

CONFIG = MoeConfig(hidden_size=2048, moe_intermediate_size=768, num_experts=16, top_k=4)


def _need_gpus(count: int) -> None:
    if torch.cuda.device_count() < count:
        pytest.skip(f"needs {count} CUDA GPUs; {torch.cuda.device_count()} visible")


@pytest.mark.parametrize("backend, mode", [("torch", "normal"), ("torch", "static"),
                                           ("none", "normal"), ("mooncake", "normal")])
def test_ep2_equals_single_device_in_bf16(backend, mode):
    _need_gpus(2)
    if backend == "mooncake":
        pytest.importorskip("mooncake.mooncake_ep_buffer", reason="Mooncake EP is not installed")
    cases = [EqualityCase(CONFIG, backend, (64, 48), dtype="bfloat16", device="cuda",
                          skew={"kind": "hotset", "num_hot": 4, "hot_frac": 0.6},
                          deepep_mode=mode)]
    results = run_ranks(equality_cases_worker, 2, "nccl", (cases,), timeout_s=300)
    for rank_results in results:
        r = rank_results[0]
        assert r["max_abs_err"] <= tolerance("bfloat16", r["ref_max_abs"])
        assert r["conserve_min"] == r["conserve_max"] == CONFIG.top_k


def test_torch_static_layout_captures_in_a_cuda_graph():
    """No host sync in the static layout: dispatch + combine record into a CUDA graph."""
    _need_gpus(1)
    from live.backends import BackendSpec, make_backend

    device = torch.device("cuda", 0)
    spec = BackendSpec(hidden_size=256, num_physical_experts=8, top_k=2, max_tokens_per_rank=32,
                       dtype=torch.bfloat16, device=device, mode="static")
    backend = make_backend("torch", spec, None)
    x = torch.randn(32, 256, dtype=torch.bfloat16, device=device)
    ids = torch.randint(0, 8, (32, 2), device=device)
    weights = torch.full((32, 2), 0.5, device=device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dispatched = backend.dispatch(x, ids, weights)
        out = backend.combine(dispatched.handle.recv_x, dispatched)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), x.float(), atol=0.02, rtol=0.02)
