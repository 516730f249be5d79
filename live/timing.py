"""The timer a forward marks its stages on (CUDA events on GPU, a monotonic clock on CPU), and
the median / p10 / p90 every record of a sample of times carries.

The block calls `timer.mark(stage)` after the router, dispatch, experts and combine; the gaps
between marks are the stages' times. Records store microseconds; CUDA events give ms. How the
benches time stages across ranks (fences, device-only launches) is `live.bench.stage_timing`'s.
"""

from __future__ import annotations

import time

import numpy as np
import torch


class StageTimer:
    """Marks named points of one forward; `stage_us()` gives the time between marks."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._marks: list[tuple[str, object]] = []

    def start(self) -> None:
        """Forget earlier marks and mark the start."""
        self._marks = []
        self.mark("start")

    def mark(self, name: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((name, event))
        else:
            self._marks.append((name, time.perf_counter()))

    def stage_us(self) -> dict[str, float]:
        """{stage: microseconds since the previous mark}, plus "total" (synchronizes on GPU)."""
        if len(self._marks) < 2:
            return {}
        if self.cuda:
            self._marks[-1][1].synchronize()
            gaps = [(name, prev.elapsed_time(ev) * 1e3)
                    for (_, prev), (name, ev) in zip(self._marks, self._marks[1:])]
            total = self._marks[0][1].elapsed_time(self._marks[-1][1]) * 1e3
        else:
            gaps = [(name, (t - prev) * 1e6)
                    for (_, prev), (name, t) in zip(self._marks, self._marks[1:])]
            total = (self._marks[-1][1] - self._marks[0][1]) * 1e6
        out: dict[str, float] = {}
        for name, gap in gaps:
            out[name] = out.get(name, 0.0) + gap
        out["total"] = total
        return out


def summarize_us(samples) -> dict[str, float]:
    """median / p10 / p90 of a sample of microseconds."""
    values = np.asarray(samples, dtype=np.float64)
    return {"median_us": float(np.median(values)), "p10_us": float(np.percentile(values, 10)),
            "p90_us": float(np.percentile(values, 90))}
