"""Single-process parts of the GPU suite: copy bandwidth, equality with transformers, and the
IPC weight-cache load path; plus the suite's context (shapes, device, budget, provenance).
"""

from __future__ import annotations

import gc
import logging
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.multiprocessing as mp

from live.bench.checks import DTYPES, tolerance
from live.config import MoeConfig
from live.errors import BackendUnavailableError
from live.model import Qwen3MoeModel
from live.weights import fused_names, random_weights, save_hf_safetensors, serve_weight_cache

log = logging.getLogger("live.bench.gpu_suite")

class PartFailed(Exception):
    """A part that failed after measuring something: `records` are kept."""

    def __init__(self, message: str, records: list[dict]):
        super().__init__(message)
        self.records = records


# Qwen3-235B-A22B's MoE block (epsim zoo), one layer; the quick run uses a tiny one
GPU_CONFIG = MoeConfig(hidden_size=4096, moe_intermediate_size=1536, num_experts=128, top_k=8)
QUICK_CONFIG = MoeConfig(hidden_size=256, moe_intermediate_size=64, num_experts=8, top_k=2)
HOTSET = {"kind": "hotset", "num_hot": 16, "hot_frac": 0.5}
QUICK_HOTSET = {"kind": "hotset", "num_hot": 2, "hot_frac": 0.5}


@dataclass
class SuiteContext:
    out: Path
    quick: bool
    world_size: int
    deadline: float                      # time.time() by which every part must be done
    provenance: dict = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cpu" if self.quick else "cuda"

    @property
    def dist_backend(self) -> str:
        return "gloo" if self.quick else "nccl"

    @property
    def dtype(self) -> str:
        return "float32" if self.quick else "bfloat16"

    @property
    def config(self) -> MoeConfig:
        return QUICK_CONFIG if self.quick else GPU_CONFIG

    @property
    def hotset(self) -> dict:
        return QUICK_HOTSET if self.quick else HOTSET

    def remaining_s(self) -> float:
        return self.deadline - time.time()


def record(ctx: SuiteContext, **fields) -> dict:
    base = dict(ep_size=1, num_tokens_per_rank=0, hidden_size=ctx.config.hidden_size,
                moe_intermediate_size=ctx.config.moe_intermediate_size,
                num_experts=ctx.config.num_experts, top_k=ctx.config.top_k,
                dispatch_dtype="bf16" if ctx.dtype == "bfloat16" else "",
                provenance=ctx.provenance)
    base.update(fields)
    return base


def part_hf_equality(ctx: SuiteContext) -> list[dict]:
    """Our single-device block vs transformers' on the same weights and tokens."""
    import transformers
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock as HFBlock

    cfg, dtype = ctx.config, DTYPES[ctx.dtype]
    device = torch.device("cuda", 0) if ctx.device == "cuda" else torch.device("cpu")
    weights = random_weights(cfg, [0], seed=1, dtype=dtype, device=device)
    num_tokens = 16 if ctx.quick else 512
    gen = torch.Generator(device=device).manual_seed(2)
    x = torch.randn(num_tokens, cfg.hidden_size, generator=gen, device=device).to(dtype)
    ours = Qwen3MoeModel(cfg, 0, 1, dtype=dtype, device=device)
    ours.load_weight_cache(weights)
    router, gate_up, down = fused_names(0)
    out = []
    for impl in ("grouped_mm", "eager"):
        hf = HFBlock(cfg.hf_config(impl)).to(device=device, dtype=dtype)
        hf.gate.weight.data.copy_(weights[router])
        hf.experts.gate_up_proj.data.copy_(weights[gate_up])
        hf.experts.down_proj.data.copy_(weights[down])
        with torch.no_grad():
            ref = hf(x[None])[0]
            y = ours.block(0)(x)
        err = float((y.float() - ref.float()).abs().max())
        ref_max = float(ref.float().abs().max())
        timing = {"ours_us": _median_forward_us(lambda: ours.block(0)(x), device),
                  "transformers_us": _median_forward_us(lambda block=hf: block(x[None]), device)}
        passed = err <= tolerance(ctx.dtype, ref_max)
        log.info("hf_equality %s: max|ours - transformers| = %.3g (ref max %.3g) -> %s; %s",
                 impl, err, ref_max, "PASS" if passed else "FAIL", timing)
        out.append(record(ctx, kind="equality", backend="none", num_tokens_per_rank=num_tokens,
                           value=err, extra={"reference": "transformers", "check": "hf_block",
                                             "transformers": transformers.__version__,
                                             "hf_experts_implementation": impl,
                                             "ref_max_abs": ref_max, "passed": passed,
                                             "dtype": ctx.dtype, **timing}))
        del hf
    return out


def _median_forward_us(fn, device: torch.device, iters: int = 10) -> float:
    with torch.no_grad():
        fn()
        samples = []
        for _ in range(iters):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            samples.append((time.perf_counter() - start) * 1e6)
    return float(np.median(samples))


def part_weight_cache_ipc(ctx: SuiteContext) -> list[dict]:
    """A spawned producer serves fused weights (CUDA IPC / shared memory); we load them and
    compare with the checkpoint path."""
    cfg = replace(QUICK_CONFIG, num_layers=2)      # the load path, not the size, is checked
    dtype = DTYPES[ctx.dtype]
    device = torch.device("cuda", 0) if ctx.device == "cuda" else torch.device("cpu")
    with tempfile.TemporaryDirectory() as tmp:
        path = save_hf_safetensors(random_weights(cfg, range(2), seed=5, dtype=dtype),
                                   Path(tmp) / "w.safetensors")
        spawn = mp.get_context("spawn")
        queue, done = spawn.Queue(), spawn.Event()
        producer = spawn.Process(target=serve_weight_cache,
                                 args=(queue, done, str(path), cfg, str(device)))
        producer.start()
        try:
            cache = queue.get(timeout=120)
            via_cache = Qwen3MoeModel(cfg, dtype=dtype, device=device)
            zero_copy = via_cache.load_weight_cache(cache)
            descriptor = via_cache.routed_experts_weights_of_layer
            same_storage = all(descriptor[layer][0].data_ptr() == cache[fused_names(layer)[1]].data_ptr()
                               for layer in descriptor.keys())
            via_file = Qwen3MoeModel(cfg, dtype=dtype, device=device)
            via_file.load_safetensors(path)
            x = torch.randn(32, cfg.hidden_size, device=device).to(dtype)
            with torch.no_grad():
                err = float((via_cache(x).float() - via_file(x).float()).abs().max())
            del via_cache, descriptor, cache
            gc.collect()                  # release the IPC tensors before the producer exits
            if device.type == "cuda":
                torch.cuda.synchronize()
        finally:
            done.set()
            producer.join(timeout=30)
    passed = err == 0.0 and all(zero_copy.values()) and same_storage
    log.info("weight_cache_ipc (%s): max|cache - checkpoint| = %.3g, zero copy %s, descriptor on "
             "shared storage %s -> %s", device.type, err, zero_copy, same_storage,
             "PASS" if passed else "FAIL")
    return [record(ctx, kind="equality", backend="none", num_tokens_per_rank=32, value=err,
                    num_layers=2, extra={"check": "weight_cache_ipc", "transport":
                                         "cuda_ipc" if device.type == "cuda" else "shared_memory",
                                         "zero_copy": zero_copy, "same_storage": same_storage,
                                         "passed": passed})]


def part_p2p_copy(ctx: SuiteContext) -> list[dict]:
    """Reference GPU-to-GPU copy bandwidth (cuda:0 -> cuda:1) at a few sizes."""
    if ctx.quick or torch.cuda.device_count() < 2:
        raise BackendUnavailableError("p2p_copy needs 2 CUDA GPUs")
    src_dev, dst_dev = torch.device("cuda", 0), torch.device("cuda", 1)
    peer = torch.cuda.can_device_access_peer(0, 1)
    out = []
    for num_bytes in (1 << 20, 16 << 20, 256 << 20):
        src = torch.empty(num_bytes, dtype=torch.uint8, device=src_dev)
        dst = torch.empty(num_bytes, dtype=torch.uint8, device=dst_dev)
        samples = []
        for it in range(23):
            torch.cuda.synchronize(src_dev)
            torch.cuda.synchronize(dst_dev)
            start = time.perf_counter()
            dst.copy_(src)
            torch.cuda.synchronize(src_dev)
            torch.cuda.synchronize(dst_dev)
            if it >= 3:
                samples.append((time.perf_counter() - start) * 1e6)
        stats = {"median_us": float(np.median(samples)), "p10_us": float(np.percentile(samples, 10)),
                 "p90_us": float(np.percentile(samples, 90))}
        gbps = num_bytes / (stats["median_us"] * 1e3)                 # 1 GB/s = 1e3 bytes/us
        log.info("p2p_copy %d bytes: %.1f us median, %.1f GB/s (peer access %s)", num_bytes,
                 stats["median_us"], gbps, peer)
        out.append(record(ctx, kind="p2p_copy", backend="p2p", ep_size=2, bytes=float(num_bytes),
                           num_iters=len(samples), **stats,
                           extra={"gbps": gbps, "peer_access": peer, "timer": "host, synchronized"}))
        del src, dst
    return out
