"""DeepEP low-latency's MoE runner on block-FP8 experts: DeepGEMM's m-grouped masked GEMM, at
the layout DeepGEMM picks for it, as AIC's collector times it (under a CUDA graph) and as the
simulator prices it.

SGLang's low-latency path (`forward_deepgemm_masked`) hands DeepGEMM one group a local expert,
`[groups, max_m, K]` rows of which `masked_m` count, and the expected rows a group
(`expected_m`; AIC's collector `ceil(mean(masked_m))`, `collect_wideep_deepep_moe.py`,
`benchmark_moe_layer_decode`). DeepGEMM sizes its tiles on `expected_m` and the groups
(`csrc/jit_kernels/heuristics/common.hpp`, `get_best_config`: blocks `ceil(m / block_m)
ceil(n / block_n) num_groups`, block_n 16 to 256 by 16, the fewest waves first): at a few
experts of a few rows each it narrows the tile to fill the SMs in one wave (one DeepSeek-V3
expert at 8 rows: 16 x 32 and 16 x 64 tiles on 132 SMs), so a CTA's MMAs are a fraction of a
64 x 128 tile's and the kernel streams its weights (AIC's H200 rows: 1 / 2 / 4 / 8 experts
30 / 43 / 66 / 113 µs, ~12 µs an expert, where a 64 x 128 tile a wave prices ~10 µs of MMAs
for one expert whatever its rows). The layout is `epsim.cost.deepgemm`'s (the dense kernel's
heuristic, `batch` the groups).

    tiles argument  expected rows a group (`masked_rows`), not `row_tiles`
    waves, MFLOP, k-blocks  `deepgemm_work(expected_m, N, K, SMs, gpu, groups)` of each GEMM
"""

from __future__ import annotations

import dataclasses

import numpy as np

from epsim.cost.deepgemm import deepgemm_runs, deepgemm_work
from epsim.cost.experts import ExpertGemm


@dataclasses.dataclass(frozen=True)
class MaskedExpertGemm(ExpertGemm):
    """`ExpertGemm` of DeepGEMM's masked grouped GEMM over `num_groups` local experts on `gpu`:
    its tile counts (`quantized_mflops`, `waves`, `scale_blocks`) take the expected rows a
    group [...] where `ExpertGemm` takes row tiles."""

    num_groups: int = 1
    gpu: str = ""

    def _layouts(self, expected_rows) -> list[tuple[np.ndarray, ...]]:
        return [deepgemm_work(expected_rows, n, k, self.num_sms, self.gpu, self.num_groups)
                for n, k in self.gemm_shapes()]

    def _waves(self, expected_rows) -> tuple[np.ndarray, np.ndarray]:
        work = self._layouts(expected_rows)
        return sum(w[1] for w in work), sum(w[0] for w in work)

    def scale_blocks(self, expected_rows) -> np.ndarray:
        """[...] the busiest SM's k-blocks over both GEMMs' waves (each rescales its partial
        sums once)."""
        return sum(w[2] for w in self._layouts(expected_rows))


def masked_gemm(gemm: ExpertGemm, gpu: str, fmt: str, num_groups: int) -> ExpertGemm:
    """`gemm` as DeepGEMM's masked grouped GEMM over `num_groups` local experts on `gpu` where
    DeepGEMM runs `fmt` there (`deepgemm_runs`: block-FP8 on SM90 and SM100); `gemm` otherwise."""
    if not deepgemm_runs(fmt, gpu) or num_groups < 1:
        return gemm
    fields = {f.name: getattr(gemm, f.name) for f in dataclasses.fields(ExpertGemm)}
    return MaskedExpertGemm(**fields, num_groups=int(num_groups), gpu=gpu)


def masked_rows(pairs, gemm: ExpertGemm, tiles) -> np.ndarray:
    """[...] the tiles argument `gemm` takes: a `MaskedExpertGemm`'s expected rows a group,
    `ceil(pairs / num_groups)` (`pairs` [...] the rank's rows); `tiles` [...] (row tiles)
    for any other."""
    if not isinstance(gemm, MaskedExpertGemm):
        return np.asarray(tiles, dtype=np.float64)
    return np.ceil(np.asarray(pairs, dtype=np.float64) / gemm.num_groups)
