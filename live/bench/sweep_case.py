"""What the calibration sweep (`live.bench.sweep`) runs: its cases (a backend, model shape and
dispatch dtype over token counts and skews) and the settings every point is measured with.
Both the plan and the ranks' loop (`live.bench.sweep_worker`) speak these, and the records of a
point (`live.bench.sweep_records`) are shaped from them."""

from __future__ import annotations

from dataclasses import dataclass

from live.config import MoeConfig


@dataclass(frozen=True)
class BenchCase:
    """One backend, model shape and dispatch dtype, timed over token counts and skews.

    Attributes:
        model: zoo name of the shape (or a label for the CPU shapes).
        config: block sizes (one layer is run).
        token_counts: tokens per rank, ascending.
        skews: `epsim.routing` skew descriptors.
    """

    backend: str
    model: str
    config: MoeConfig
    dispatch_dtype: str
    token_counts: tuple[int, ...]
    skews: tuple[dict, ...]

    @property
    def label(self) -> str:
        return f"{self.backend}/{self.model}/{self.dispatch_dtype}"


@dataclass(frozen=True)
class BenchSettings:
    """How every point is measured."""

    device: str = "cuda"
    dtype: str = "bfloat16"
    num_iters: int = 20
    num_warmup: int = 3
    seed: int = 0
    device_only: bool = True
    num_passes: int = 1      # sweeps over the whole grid, each in its own shuffled token order
    eager: bool = True       # time the eager forward (records without a mode)
    graph: bool = False      # also time forwards launched ahead (records with mode "graph")
    graph_iters: int = 15
