"""Device time, host overhead and eager time of one single-GPU op, as three distributions.

A serving engine runs decode steps as CUDA-graph replays (the GPU's time alone) and prefill
eagerly (device time plus whatever the host adds). So one op is timed three ways:

- **device**: the op captured in a CUDA graph and replayed, each replay between two CUDA events,
  all replays launched ahead of the GPU (it first spins in `torch.cuda._sleep` while the host
  enqueues), so no host work lies between the events. Where capture fails, the eager op is
  launched ahead the same way (`method: launched_ahead`).
- **host**: the host's time to issue one eager call (Python, torch dispatch, kernel launches),
  a monotonic clock around the call without waiting for the device.
- **eager**: one eager call from an idle GPU, CUDA events around it: device time plus the gaps
  the host leaves between kernels.

Before every timed call the L2 cache is flushed (a buffer larger than L2 is zeroed): in a model,
other layers run between two calls of this op, so its weights come from HBM, not from L2.
On CPU there is no device time apart from the host's: only `eager` (a monotonic clock) is timed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from live.timing import summarize_us

FLUSH_BYTES = 256 << 20       # > H200's 60 MB L2 several times over
SLEEP_CYCLES_PER_ITER = 200_000   # ~0.1 ms of GPU spin per queued replay: the host stays ahead


@dataclass
class OpTimes:
    """Samples of one op, microseconds; `method` says how device time was taken."""

    device_us: list[float] = field(default_factory=list)
    host_us: list[float] = field(default_factory=list)
    eager_us: list[float] = field(default_factory=list)
    method: str = ""              # "cuda_graph" | "launched_ahead" | "perf_counter" (CPU)
    graph_error: str = ""         # why capture failed, when it did

    def summaries(self) -> dict[str, dict[str, float]]:
        """{timing: {median_us, p10_us, p90_us}} for each timing that has samples."""
        out = {}
        for timing in ("device", "host", "eager"):
            samples = getattr(self, f"{timing}_us")
            if samples:
                out[timing] = summarize_us(samples)
        return out


class L2Flush:
    """Zeroes a buffer larger than the L2 cache (CUDA only; a no-op on CPU)."""

    def __init__(self, device: torch.device, num_bytes: int = FLUSH_BYTES):
        self.buffer = (torch.empty(num_bytes, dtype=torch.uint8, device=device)
                       if device.type == "cuda" else None)

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


def time_op(fn: Callable[[], object], device: torch.device, num_iters: int = 20,
            num_warmup: int = 3, flush: L2Flush | None = None, graph: bool = True) -> OpTimes:
    """Time `fn` (no arguments; all inputs preallocated) as the module doc says.

    Args:
        fn: the op; it must not synchronize with the host (or capture fails; then device time
            is taken launched ahead, which such an op also spoils: its samples are then host-bound).
        num_iters: timed calls per timing; num_warmup: untimed calls first.
        graph: try CUDA-graph capture for device time (else launched ahead).
    """
    if device.type != "cuda":
        return _time_cpu(fn, num_iters, num_warmup)
    flush = flush or L2Flush(device)
    times = OpTimes()
    for _ in range(num_warmup):
        fn()
    torch.cuda.synchronize()
    _time_eager(fn, flush, num_iters, times)
    replay = fn
    times.method = "launched_ahead"
    cuda_graph = None
    if graph:
        try:
            cuda_graph = _capture(fn)
            replay = cuda_graph.replay
            times.method = "cuda_graph"
        except Exception as exc:  # noqa: BLE001 - an op that cannot be captured is timed ahead
            times.graph_error = f"{type(exc).__name__}: {exc}"[:200]
            torch.cuda.synchronize()
    times.device_us = _launched_ahead(replay, flush, num_warmup, num_iters)
    del cuda_graph
    return times


def _time_cpu(fn, num_iters: int, num_warmup: int) -> OpTimes:
    for _ in range(num_warmup):
        fn()
    samples = []
    for _ in range(num_iters):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return OpTimes(eager_us=samples, method="perf_counter")


def _time_eager(fn, flush: L2Flush, num_iters: int, times: OpTimes) -> None:
    """host and eager samples: one call at a time, from an idle GPU."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(num_iters):
        flush()
        torch.cuda.synchronize()
        begin.record()
        t0 = time.perf_counter()
        fn()
        host_us = (time.perf_counter() - t0) * 1e6
        end.record()
        end.synchronize()
        times.host_us.append(host_us)
        times.eager_us.append(begin.elapsed_time(end) * 1e3)


def _capture(fn) -> torch.cuda.CUDAGraph:
    """`fn` captured in a CUDA graph (warmed up on a side stream first, as capture requires)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph


def _launched_ahead(call, flush: L2Flush, num_warmup: int, num_iters: int) -> list[float]:
    """Device time of `call`: all calls enqueued while the GPU spins, events around each."""
    total = num_warmup + num_iters
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(total)]
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES_PER_ITER * total)
    for begin, end in events:
        flush()
        begin.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [begin.elapsed_time(end) * 1e3 for begin, end in events[num_warmup:]]
