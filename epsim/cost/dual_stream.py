"""SGLang's dual-stream shared expert: how much of the shorter branch hides behind the longer.

`DeepseekV2MoE.forward_normal_dual_stream` runs the unfused shared expert on the main stream
while the router, top-k and routed experts run on an alternate one (`epsim.cost.shared_experts.
shared_beside`). The two streams share the GPU's SMs and HBM, so the MoE part of the layer is

    beside_us = max(shared, routed) + (1 - overlap) * min(shared, routed)

with `overlap` in [0, 1]: 1 the ideal overlap (the longer branch alone, a bound), 0 none (the
two in series). `overlap` is measured per token count on the rank by `benchmarks/
dual_stream_overlap_gpu.py` (both branches alone, in series and on two streams inside CUDA
graphs) and carried into the shipped profile as `any/dual_stream` by `epsim.calibrate.
dual_stream` (pooled over the TP splits measured, one overlap for every count up to its
`PLATEAU_TOKENS`); here it is interpolated in log2(tokens) between the measured counts and held at
the nearest beyond them (extrapolated).
It was measured on one GPU type in BF16 and is applied as a ratio to every GPU and weight format
(extrapolated: a ratio of two branches' times, not a rate). Without the component, the bound.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from epsim.profile import Component, Profile, default_profile_path

KEY = "any/dual_stream"
# a component parameter: the overlap measured at `tokens` on the rank (pooled over TP splits)
PARAM = re.compile(r"^t(\d+)_overlap_frac$")


def param_name(tokens: int) -> str:
    """The `any/dual_stream` parameter of the overlap at a token count on the rank."""
    return f"t{tokens}_overlap_frac"


def beside_us(shared_us, routed_us, overlap_frac: float):
    """The MoE part of a dual-stream layer (module doc): the longer branch plus the part of the
    shorter that does not overlap it. Exactly `np.maximum(shared_us, routed_us)` at overlap 1.

    Args:
        shared_us: float or [..., layers] float64, the shared expert's MLP (µs).
        routed_us: [..., layers] float64, the router, top-k and routed experts (µs).
        overlap_frac: the overlap at the step's tokens (`DualStreamOverlap.at`), in [0, 1].
    Returns:
        the broadcast shape of the two, µs.
    """
    longer = np.maximum(shared_us, routed_us)
    if overlap_frac == 1.0:                  # the bound: no arithmetic, the bits of the max
        return longer
    return longer + (1.0 - overlap_frac) * np.minimum(shared_us, routed_us)


@dataclass(frozen=True)
class DualStreamOverlap:
    """The measured overlap by token count on the rank.

    Attributes:
        tokens: [n] float64, measured token counts, ascending.
        overlap_frac: [n] float64, the overlap at each, in [0, 1].
        tp_range: (lo, hi) the TP splits it was measured at (pooled).
        tp_size: the deployment's TP size (outside `tp_range`: extrapolated in TP).
        note: where it was measured (the component's note).
    """

    tokens: tuple[float, ...]
    overlap_frac: tuple[float, ...]
    tp_range: tuple[float, float]
    tp_size: int
    note: str

    @cached_property
    def _log2_tokens(self) -> np.ndarray:
        """[n] log2 of the measured counts, once: `at` runs for every priced step."""
        return np.log2(self.tokens)

    def at(self, tokens: float) -> float:
        """The overlap at `tokens` on the rank (> 0): interpolated in log2(tokens), held at the
        nearest measured count beyond the measured range."""
        return float(np.interp(math.log2(tokens), self._log2_tokens, self.overlap_frac))

    def outside(self, lo_tokens: float, hi_tokens: float) -> list[str]:
        """What a use at `lo_tokens`..`hi_tokens` on the rank extrapolates, one line each."""
        axes = []
        if lo_tokens < self.tokens[0] or hi_tokens > self.tokens[-1]:
            axes.append(f"dual-stream overlap: tokens ({lo_tokens:g}-{hi_tokens:g}) outside "
                        f"measured [{self.tokens[0]:g}, {self.tokens[-1]:g}], held")
        lo, hi = self.tp_range
        if not lo <= self.tp_size <= hi:
            axes.append(f"dual-stream overlap: TP {self.tp_size} outside measured [{lo:g}, {hi:g}]")
        return axes


@lru_cache(maxsize=1)
def shipped_component() -> Component | None:
    """`any/dual_stream` of the shipped profile (None without it): a ratio measured on one GPU,
    used whatever GPU a scenario names (as `scheduler_host.serving_host_params`). Read once."""
    return Profile.load(default_profile_path()).component("any", "dual_stream")


def dual_stream_overlap(tp_size: int, component: Component | None = None
                        ) -> DualStreamOverlap | None:
    """The overlap curve for a deployment of `tp_size` GPUs from `component` (an
    `any/dual_stream`; the shipped profile's unless given). None where no overlap was measured
    (the caller prices the bound)."""
    component = shipped_component() if component is None else component
    points = sorted((float(m[1]), float(v)) for k, v in
                    (component.params if component is not None else {}).items()
                    if (m := PARAM.match(k)))
    if not points:
        return None
    lo, hi = component.valid_range.get("tp_size", (tp_size, tp_size))
    return DualStreamOverlap(tuple(t for t, _ in points), tuple(f for _, f in points),
                             (float(lo), float(hi)), tp_size, component.note)


def provenance_lines(overlap: DualStreamOverlap | None, lo_tokens: float, hi_tokens: float
                     ) -> list[str]:
    """What the shared expert's price assumes where it runs beside the routed experts at
    `lo_tokens`..`hi_tokens` on the rank (`epsim.cost.provenance`): the measured overlap and
    what it extrapolates, or the bound."""
    if overlap is None:
        return ["beside the routed experts on a second stream: the ideal overlap (the longer "
                "branch alone), a bound (no any/dual_stream)"]
    return [f"beside the routed experts on a second stream: the overlap of any/dual_stream "
            f"({overlap.note})"] + overlap.outside(lo_tokens, hi_tokens)
