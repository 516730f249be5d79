"""The clock under which aiconfigurator-core's collector times a long GEMM: its own burst.

AIC's dense-GEMM collector (`collector/sglang/collect_gemm.py`, `helper.benchmark_with_power`,
ai-dynamo/aiconfigurator) runs 6 copies of the op back to back as one call, 3 times eagerly and
3 times as a CUDA-graph replay to warm up, then times 6 replays: `BURST_CALLS` (72) calls of the
op with the GPU busy throughout, the last `TIMED_CALLS` (36) timed. A call of `t` ms has kept
the GPU busy for 36 t when the timed window opens and 72 t when it closes. Compute-bound work
draws the board to its power limit, and the limit pulls the SM clock down after a few tens of
milliseconds of it (`epsim.cost.sustained`; docs/calibration.md, "Burst-timed tables against
sustained serving"). So the tables' longest calls are timed partly or wholly at a capped clock,
their short ones at the boost clock, and a fit that prices every row at one rate misses both.

The capped clock, call by call, from our own H100 ramps
(`benchmarks/results/sustained_clock_h100/graph_sweep/`, `--ramp-s 3`: each call of a busy GPU
timed from the first): a DeepSeek-V3 layer of 4096 tokens +2 % at 29 ms, +10 % at 85 ms; of 8192
tokens +2 % at 30 ms, +8 % at 100 ms; both ~1.10 at the end of the 3-s ramp (1.097, 1.099).
Hence the slowdown of a call timed at busy time `tau`: 1 before `CAP_START_MS`, rising linearly
to `CAPPED_RATIO` at `CAP_FULL_MS`, held after; the timed window's mean over [36 t, 72 t]:

    factor(t) = 1 + (CAPPED_RATIO - 1) x mean_{tau in [36 t, 72 t]} clip((tau - 30) / (100 - 30), 0, 1)

`CAPPED_RATIO` is bounded by the 45-s sustained ratio of the same H100's compute-bound GEMMs
(1.163-1.164: the clock keeps falling for seconds after the collector's burst is over). Measured
on an H100 (700 W) and held on its die (`RAMP_MEASURED_GPUS`). Blackwell's power limits' ramp is
not in our records, and its tables fall further: B200's FP8 GEMM of n 7168, k 16384 runs 1.27x
slower a FLOP at 16384 rows (2.3 ms a call) than at 4096 (0.45 ms), GB200's block-FP8 one of the
same shape 1.31x (1.6 against 0.3 ms), where the H100's ramp gives 1.10. So there the ramp's
shape is kept and its end, `capped_ratio - 1` (`epsim.cost.dense_gemm`'s `cap_slowdown_ratio`),
is fitted on the component's own rows -- only where at least two are timed mostly past the ramp
(`capped_ratio_readable`), the H100's held otherwise. Memory-bound calls keep the full clock
(the same table: a weight-streaming GEMM 0.968, a 2 GiB copy 0.995), so the factor applies to
the compute side only. A record-level term: it prices what the collector measured; the simulator
prices its kernels at the boost clock and a prefill step at the sustained one
(`epsim.cost.sustained`).
"""

from __future__ import annotations

import numpy as np

BURST_CALLS = 72            # (3 eager + 3 graph warm-ups + 6 timed) x 6 copies, back to back
TIMED_CALLS = 36            # the last 6 replays x 6 copies
CAP_START_MS = 30.0         # busy time at which the clock starts to fall (graph_sweep ramps)
CAP_FULL_MS = 100.0         # ... and by which it sits at the capped clock
CAPPED_RATIO = 1.10         # capped / boost call time at the end of the ramps (1.097, 1.099)
# GPUs whose ramp is the measured one: the H100's GH100 die at its 700 W board limit (H100 SXM,
# H800 SXM, H200 SXM: 700 W datasheet TDP). Elsewhere the capped ratio is fitted
# (`epsim.cost.dense_gemm`'s `cap_slowdown_ratio`, the GEMM records' last column)
RAMP_MEASURED_GPUS = ("H100", "H200", "H800")
# ... and only where the fit set times the plateau itself: rows whose timed window sits mostly
# past the ramp (`burst_share` > 1/2), at least two of them (one is any row's outlier); where
# fewer, the column is mostly the carried ramp's shape, not the cap, and the ratio is held
CAP_READ_SHARE = 0.5
CAP_READ_ROWS = 2


def _ramp_integral(tau_ms: np.ndarray) -> np.ndarray:
    """[...] integral from 0 to `tau_ms` of the ramp's share clip((tau - start) / width, 0, 1), ms."""
    width = CAP_FULL_MS - CAP_START_MS
    rising = np.clip(tau_ms - CAP_START_MS, 0.0, width)
    return rising ** 2 / (2.0 * width) + np.maximum(tau_ms - CAP_FULL_MS, 0.0)


def burst_share(call_us) -> np.ndarray:
    """The timed window's mean share of the clock's ramp, mean_{tau in [36 t, 72 t]}
    clip((tau - 30) / (100 - 30), 0, 1), for a call of `t` µs at the boost clock: 0 where the
    burst ends before the clock falls, 1 where the window opens at the capped clock.

    Args:
        call_us: [...] float64, the call's time at the boost clock (µs).
    Returns:
        [...] float64 in [0, 1].
    """
    t_ms = np.maximum(np.asarray(call_us, dtype=np.float64), 0.0) * 1e-3
    opens, closes = (BURST_CALLS - TIMED_CALLS) * t_ms, BURST_CALLS * t_ms
    window = np.maximum(closes - opens, 1e-12)
    return np.clip((_ramp_integral(closes) - _ramp_integral(opens)) / window, 0.0, 1.0)


def burst_factor(call_us, capped_ratio: float = CAPPED_RATIO) -> np.ndarray:
    """Timed / boost-clock time of a compute-bound call the collector times in its burst
    (module docstring's formula), `1 + (capped_ratio - 1) burst_share(call_us)`.

    Args:
        call_us: [...] float64, the call's time at the boost clock (µs).
        capped_ratio: capped / boost call time once the clock has settled at the cap.
    Returns:
        [...] float64, >= 1 and <= `capped_ratio`.
    """
    return 1.0 + (capped_ratio - 1.0) * burst_share(call_us)


def capped_ratio_readable(call_us) -> bool:
    """Whether calls of `call_us` [records] µs (a fit set's measured calls) determine the
    capped ratio: at least `CAP_READ_ROWS` of them timed mostly at the capped clock
    (`burst_share` > `CAP_READ_SHARE`)."""
    return int((burst_share(call_us) > CAP_READ_SHARE).sum()) >= CAP_READ_ROWS
