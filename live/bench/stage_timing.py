"""How the benches time a forward's stages across EP ranks: fences that give all ranks a common
start, stages isolated behind them, and device-only timing behind a GPU sleep.

Events between the stages time dispatch and combine as a pair (a Mooncake combine needs its
dispatch's handle, so the two are never timed apart). Records store microseconds; CUDA events
give ms.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from live.timing import StageTimer

STAGES = ("dispatch", "experts", "combine")
SLEEP_CYCLES = 2_000_000    # >= 1 ms of GPU spin (clocks <= 2 GHz): the host launches meanwhile
MAX_LAUNCH_US = 500.0       # a launch slower than this may have outrun the sleep: discarded
GRAPH_SLEEP_CYCLES = 8_000_000   # >= 4 ms of GPU spin: an eager forward launches meanwhile
GRAPH_MAX_LAUNCH_US = 3000.0     # ... and must have finished launching well before it ends
GRAPH_WARMUP = 2


class IsolatingTimer(StageTimer):
    """A StageTimer that makes all ranks wait (device sync + barrier) before each stage.

    `stage_us()` then holds each stage timed from a common start; the gaps spent waiting are
    named "_fence" and left out of the stages.
    """

    def __init__(self, device: torch.device, group):
        super().__init__(device)
        self.group = group

    def _fence(self) -> None:
        fence(self.device, self.group)

    def start(self) -> None:
        self._fence()
        super().start()

    def mark(self, name: str) -> None:
        super().mark(name)
        self._fence()
        super().mark("_fence")


class DeviceFenceTimer(StageTimer):
    """A StageTimer whose marks are followed by a device-side barrier (a one-element
    all-reduce on the stream): stages launched ahead are timed from a common device start
    without a host sync; the barrier's own time is named "_fence" and left out."""

    def __init__(self, device: torch.device, group):
        super().__init__(device)
        self.group = group
        self._one = torch.zeros(1, device=device)

    def mark(self, name: str) -> None:
        super().mark(name)
        dist.all_reduce(self._one, group=self.group)
        super().mark("_fence")


def fence(device: torch.device, group) -> None:
    """Every rank's queued work done, then a barrier."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier(group=group)
    if device.type == "cuda":
        torch.cuda.synchronize()


def device_experts_us(block, counts: torch.Tensor, rows: torch.Tensor) -> tuple[float, float]:
    """Device time of the grouped GEMM alone (launched behind a GPU sleep) and host launch time.

    Returns:
        (device_us, launch_us); device_us is NaN when the host needed longer to launch than
        the sleep lasted (then the gap would include host time).
    """
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    t0 = time.perf_counter()
    begin.record()
    block.experts(rows, counts)
    end.record()
    launch_us = (time.perf_counter() - t0) * 1e6
    end.synchronize()
    device_us = begin.elapsed_time(end) * 1e3
    return (device_us if launch_us < MAX_LAUNCH_US else float("nan")), launch_us


def launched_ahead(block, x, routing, group, device: torch.device, num_iters: int) -> dict:
    """Stage times of forwards launched ahead of the GPU (`live.bench.sweep_worker`'s module doc, item 4).

    Returns:
        {stage: [iters] us, "layer": [iters], "launch_us": [iters]}; NaN where the host's launch
        outlasted the sleep (the stage times would then include host time).
    """
    # stages: each from a common device start (a device barrier after every mark), so one
    # rank's slow experts do not show up as the other rank's combine; the layer: a plain forward
    isolated, plain = DeviceFenceTimer(device, group), StageTimer(device)
    align = torch.zeros(1, device=device)
    out = {s: [] for s in STAGES} | {"layer": [], "launch_us": []}

    def ahead(timer) -> tuple[dict, float]:
        fence(device, group)
        dist.all_reduce(align, group=group)          # the GPUs leave this together
        torch.cuda._sleep(GRAPH_SLEEP_CYCLES)
        t0 = time.perf_counter()
        block(x, routing=routing, timer=timer)
        launch_us = (time.perf_counter() - t0) * 1e6
        return timer.stage_us(), launch_us

    for it in range(GRAPH_WARMUP + num_iters):
        stages, launch_us = ahead(isolated)
        layer, layer_launch_us = ahead(plain)
        if it < GRAPH_WARMUP:
            continue
        ok = max(launch_us, layer_launch_us) < GRAPH_MAX_LAUNCH_US
        for stage in STAGES:
            out[stage].append(stages.get(stage, 0.0) if ok else float("nan"))
        out["layer"].append(layer["total"] if ok else float("nan"))
        out["launch_us"].append(max(launch_us, layer_launch_us))
    return out
