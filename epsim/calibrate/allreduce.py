"""Fit the all-reduce model (`epsim.cost.allreduce`) on measured op timings, each coefficient
bounded by the datasheet.

A point is one timed all-reduce (message bytes, GPUs, device µs, the algorithm that ran it).
SGLang's two custom kernels are one family (sgl-kernel `custom_all_reduce.cuh`): the same launch
and the same two barriers, a flag exchange with every peer at the start and one more at the end
of a one-shot or, fenced, between a two-shot's reduce-scatter and all-gather. One bounded least
squares fits both on their points together: columns (1, H(n - 1): the barriers' slowest peer,
`epsim.cost.allreduce.barrier_peers`) shared, the two-shot's second
stage (its all-gather, a second round of peer reads after the fenced barrier: 1 and n - 1) and a
bandwidth each. A two-shot runs only at 512 KiB and up on 4 GPUs of a GB200 / GB300 tray (4
points a table): fitted alone, its fixed and per-peer terms were collinear and the fit put 0.55
µs fixed and 1.66 µs a peer beside the one-shot's 3.9 and 0.14 (2-4 MiB judged at 42-43 %); on
one shared launch the second stage alone is what its points fix (9 %). Sharing the per-peer term
too (a two-shot's own bandwidth alone) misses Hopper's two-shots by 39-46 %: their fixed cost
grows 0.4-0.8 µs a peer against the one-shot's 0.14-0.22, the all-gather's reads from every
peer. The block ramp (`epsim.cost.allreduce`: blocks up to 36 at 288 KiB, each with its own
barriers) is one column both kernels share: one launch. NCCL is the smallest of two
ring protocol lines, and of a third, NVLS, where it wins: fitted by alternating assignment
(each point goes to the line that predicts it faster, as NCCL's tuner picks; all refitted until
no point moves), started from a split at each decile of the message sizes (with NVLS: each
pair of deciles), the split with the smallest error kept. NVLS is kept where its fit is better
and it wins at least 3 points (on AIC's H100 and H200 tables it halves the error on 256-512
MiB fitted up to 128 MiB: 12-14 % -> 6 %); else the ring's two lines stand alone. Residuals are
weighted by `1 / sqrt(measured)`, a middle way between absolute error (the large messages
alone) and relative error (the small ones alone).
Bounds: fixed costs >= 0, bandwidths <= the datasheet (NVLink per direction of the cluster's
GPU; NCCL's LL line <= half of it, the share of each 16-byte LL line that is data), and NCCL's
Simple line >= that same half: Simple moves whole lines of data, so it is the wide line, the one
NCCL switches to for large messages. NCCL has three protocols (LL, LL128, Simple); a table that
stops at 8 MiB (the tokens hold-out of benchmarks/aic_holdout.py) shows LL and LL128 on every
GPU count and Simple only at 4-8 MiB on 2-4 GPUs, and two free lines fitted there took LL and
LL128 (B200: 12 and 262 GB/s, where the whole table's Simple runs at 558): 16-128 MiB all-gathers
priced 50-66 % too slow on Blackwell. Bounded below, the two lines are LL / LL128 and Simple
(B200: 274 and 450) and those hold-outs fall to 10-18 %; on whole tables the bound binds nowhere.

With NCCL's tuner figures (`epsim.cost.allreduce.tuner_params`, the default) each NCCL point is
labelled by the protocol NCCL's own model picks (`epsim.cost.allreduce.tuner_protocol`) instead
(`_fit_tuned`): the `ll_` line on LL's points, one bounded least squares for Simple's (fixed,
per-step, link and local-step columns) and LL128's (its fixed column, its per-step latency NCCL's,
its bytes at 0.92 of Simple's link rate), Simple's link at most NCCL's own bus figure (0.8 of
NVLink), and NVLS by alternating assignment against the labelled ring. nccl-tests' all-gathers
(one pass) are fitted beside the all-reduces: a table cut at 8 MiB shows Simple only on 2 GPUs'
all-reduces, where its link and local-step columns are one (`S / 2` each), and on 2 and 4 GPUs'
all-gathers, where they part. The min-of-lines fit below stays for `tuned=False` and for points
too few on either line.

NCCL's Simple line carries the ring's local step (`epsim.cost.allreduce`: `S / n / local_gbps`,
one chunk a loop copied out of the FIFO): refitted with that column from the two lines' (or
three's) assignment alone (other starts, picked by the mean relative error as the plain fit
picks them, land on a local step slower than the link: H200 cut at 8 MiB, 188 GB/s) where the
points show Simple's bandwidth (the plain fit's Simple rate off its floor: at it, the points are
LL / LL128's and the fixed, link and local columns trade off freely -- on AIC's tables cut at 8
MiB that fit put the local step at 186-420 GB/s and priced 16-128 MiB all-gathers 27-89 % off,
where the plain line gives 10-18 %), and kept where its rate is at least the link's (an on-GPU
copy is not slower than NVLink; below, the column is taking some other misfit) and unless its
weighted squared error (the fit's own objective) is worse than the plain line's by more than
`LOCAL_TOLERANCE`: the step is physical (every ring loop ends with it), the points only say
whether they see it; bounded by HBM (a copy reads and writes it: `<= hbm_gbps / 2`) the column
cannot vanish, so points without a local step (a synthetic table) keep the plain line. The all-
reduce points alone barely tell the two rates apart where the table has 2 and 4 GPUs only
(GB300's squared error 71.5 either way; GB200's 74.5 -> 71.8), while the all-gathers, one pass
with the same local step, do (GB200's 16-128 MiB: 15.3 -> 7 %).

CustomAllReduceV2 (SGLang 0.5.14 on; `epsim.cost.allreduce`) fuses its two-shot into one pass
whose loads and stores run at its one-shot's rate: its points share one bandwidth column and
keep the second-stage fixed columns (its fenced end barrier after stores to every peer: B200's
two-shot costs ~12-13 µs fixed, its one-shot ~4.5). On a GB200 / GB300 tray its two-shot runs only
on 4 GPUs at 4-16 MiB: fitted up to 4 MiB (one point), a bandwidth of its own took the point
(8-16 MiB +21 / +43 % on the size hold-out's split); shared, 1.1 % (docs/calibration.md).

Op tables only (ours, or aiconfigurator-core's `custom_allreduce_perf` and `nccl_perf`):
end-to-end measurements never reach this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.calibrate.fit import ComponentFit
from epsim.calibrate.inputs import SourcedRecord

from epsim.cost.allreduce import (ALGORITHMS, LL_BANDWIDTH_RATIO, TUNER_BASE_US, TUNER_LL128_RATIO,
                                  TUNER_STEP_US, algorithm, allreduce_defaults, allreduce_us,
                                  custom_features, is_sm100, nvls_features, record_generation,
                                  ring_features, ring_local_kb, ring_us, tuner_params,
                                  tuner_protocol)
from epsim.cost.record import is_nccl_allgather
from epsim.profile import GRAPH, component_key
from epsim.records import MeasurementRecord
from epsim.spec.hardware import ClusterSpec

MAX_ROUNDS = 40
MIN_POINTS = 3                        # a line's fit needs this many points (else the datasheet)
CUSTOM = ("oneshot", "twoshot")
SPLITS = np.linspace(0.1, 0.9, 9)     # the NCCL fit's starting splits: deciles of the bytes
LOCAL_TOLERANCE = 1e-3                # Simple's local step kept unless it fits this much worse


@dataclass(frozen=True)
class AllReducePoint:
    """One timed all-reduce.

    Attributes:
        num_bytes: message size (bytes).
        num_ranks: GPUs in the group (one node).
        latency_us: measured device time (µs).
        algorithm: "oneshot", "twoshot" or "nccl" (what ran it).
        generation: the custom kernel's generation (`epsim.cost.allreduce.algorithm`; 1 for
            NCCL's).
        passes: an NCCL point's ring passes: 2 an all-reduce, 1 an all-gather (nccl-tests'
            all-gathers, fitted beside the all-reduces on NCCL's lines).
    """

    num_bytes: float
    num_ranks: int
    latency_us: float
    algorithm: str
    generation: int = 1
    passes: int = 2


def record_point(record: MeasurementRecord, gpus_per_host: int,
                 sm100: bool = False) -> AllReducePoint | None:
    """An all-reduce record (kind `allreduce` with `bytes`: the op tables' collectives,
    `epsim.calibrate.aic_comm`) as a point: NCCL's (`extra.kernel` "NCCL") as `nccl` at every
    size; SGLang's device-time one (a CUDA-graph capture) as the algorithm SGLang runs at its
    size on hosts of `gpus_per_host` GPUs (by its kernel generation, `record_generation`, on
    an SM100 GPU or not); None for any other record, and for SGLang's rows beyond its custom
    kernel (SGLang calling NCCL) or timed eagerly. An nccl-tests all-gather
    (`epsim.cost.record.is_nccl_allgather`) is an `nccl` point of one pass."""
    if is_nccl_allgather(record) and (record.bytes or 0) > 0:
        return AllReducePoint(record.bytes, record.ep_size, record.median_us, "nccl", passes=1)
    if record.kind != "allreduce" or record.bytes <= 0:
        return None
    if record.extra.get("kernel") == "NCCL":
        return AllReducePoint(record.bytes, record.ep_size, record.median_us, "nccl")
    if record.timing == "device":
        generation = record_generation(record)
        algo = algorithm(record.bytes, record.ep_size, -(-record.ep_size // gpus_per_host),
                         generation, sm100)
        if algo != "nccl":
            return AllReducePoint(record.bytes, record.ep_size, record.median_us, algo,
                                  generation)
    return None


def points_from_records(records: list[MeasurementRecord], gpus_per_host: int,
                        sm100: bool = False) -> list[AllReducePoint]:
    """The all-reduce points among `records` (`record_point`), in order."""
    points = (record_point(r, gpus_per_host, sm100) for r in records)
    return [p for p in points if p is not None]


def _rows(points: list[AllReducePoint], algo: str) -> tuple[np.ndarray, np.ndarray]:
    """([points, 3] design rows, [points] µs) of `points` under `algo`'s form."""
    rows = [custom_features(p.num_bytes, p.num_ranks, algo, p.generation) if algo != "nccl"
            else ring_features(p.num_bytes, p.num_ranks, p.passes) for p in points]
    return np.array(rows, dtype=np.float64), np.array([p.latency_us for p in points])


def _solve(rows: np.ndarray, us: np.ndarray, max_gbps: float, hops: bool = True,
           min_gbps: float = 0.0, max_local_gbps: float = 0.0) -> np.ndarray:
    """[4] (fixed µs, µs per latency count, µs per KB, µs per local KB) minimising the weighted
    squared error, the fixed terms >= 0, the bandwidth <= `max_gbps` and >= `min_gbps` (0:
    unbounded below; `hops` False: no latency count, the column held at 0) and, where `rows`
    has a fourth column (the ring's local step, `ring_local_kb`) and `max_local_gbps` > 0, the
    local rate <= `max_local_gbps` (else that column held at 0)."""
    from scipy.optimize import lsq_linear       # scipy waits for the fit (epsim's import rule)
    weight = 1.0 / np.sqrt(us)
    cols = ([0, 1, 2] if hops else [0, 2]) + ([3] if rows.shape[1] > 3 and max_local_gbps > 0 else [])
    lower = np.array([0.0, 0.0, 1.0 / max_gbps, 1.0 / max(max_local_gbps, 1e-12)])[cols]
    upper = np.array([np.inf, np.inf, 1.0 / min_gbps if min_gbps > 0 else np.inf, np.inf])[cols]
    # one GPU count makes the fixed and per-peer columns collinear: the solver's trust region
    # then meets 0 / 0 on its way (it still returns a bounded least-squares solution)
    with np.errstate(invalid="ignore"):
        fit = lsq_linear(rows[:, cols] * weight[:, None], us * weight,
                         bounds=(lower, upper))
    out = np.zeros(4)
    out[cols] = fit.x
    return out


def _line(x: np.ndarray, names: tuple[str, str, str]) -> dict[str, float]:
    return {names[0]: float(x[0]), names[1]: float(x[1]), names[2]: float(1.0 / x[2]),
            **({"local_gbps": float(1.0 / x[3])} if len(x) > 3 and x[3] > 0 else {})}


def _assign(forms: list[np.ndarray], caps: list[float], hops: list[bool], us: np.ndarray,
            starts: list[np.ndarray], floors: list[float], local_caps: list[float] | None = None
            ) -> tuple[float, list[np.ndarray], np.ndarray]:
    """(mean relative error, [lines], [points] line index) of min-of-lines, by alternating
    assignment from each start ([points] line index), the best kept: the assignment alone can
    stall in a split that is not the protocols'. Line i's bandwidth lies in [floors[i],
    caps[i]] GB/s; its local step (a fourth column of `forms[i]`) <= local_caps[i] GB/s (0 or
    None: no local step)."""
    best = None
    local_caps = local_caps or [0.0] * len(forms)
    for side in starts:
        for _ in range(MAX_ROUNDS):
            lines = []
            for i, (rows, cap, hop, floor, local) in enumerate(zip(forms, caps, hops, floors,
                                                                   local_caps)):
                pick = side == i if (side == i).sum() >= 3 else np.ones(len(us), dtype=bool)
                lines.append(_solve(rows[pick], us[pick], cap, hop, floor, local))
            predicted = np.stack([rows @ line[:rows.shape[1]] for rows, line in zip(forms, lines)],
                                 axis=1)
            error = float(np.mean(np.abs(predicted.min(axis=1) / us - 1.0)))
            moved_to = predicted.argmin(axis=1)
            if best is None or error < best[0]:
                best = (error, lines, moved_to)
            if (moved_to == side).all():
                break
            side = moved_to
    return best


def _squares(forms: list[np.ndarray], lines: list[np.ndarray], us: np.ndarray) -> float:
    """The weighted squared error of min-of-lines (`_solve`'s objective, weights
    `1 / sqrt(us)`)."""
    predicted = np.stack([rows @ line[:rows.shape[1]] for rows, line in zip(forms, lines)],
                         axis=1).min(axis=1)
    return float(np.sum((predicted - us) ** 2 / us))


def _fit_tuned(points: list[AllReducePoint], nvl_gbps: float, hbm_gbps: float,
               tuner: dict[str, float]) -> dict[str, float] | None:
    """NCCL's coefficients with each point on the ring protocol line NCCL's tuner picks
    (`epsim.cost.allreduce.tuner_protocol`; module doc): the `ll_` line on LL's points (<= half
    of NVLink); Simple's and LL128's in one bounded least squares: each its own fixed and
    per-step columns (LL128's held at NCCL's tuner latencies without points of its own), one
    link rate (LL128's moved bytes at 0.92 of it, NCCL's ratio) between half of NVLink and
    NCCL's own bus figure (`tuner_bus_gbps`), and Simple's local step (<= half of HBM); then
    NVLS, an all-reduce line (NCCL's tuner weighs it against the ring's wide protocols), where
    it wins at least `MIN_POINTS` all-reduce points of LL128's and Simple's and lowers the
    weighted squared error (alternating assignment against the labelled ring lines, started from
    each decile of those points). None where LL or Simple has fewer than `MIN_POINTS` points."""
    from scipy.optimize import lsq_linear       # scipy waits for the fit (epsim's import rule)
    rows, us = _rows(points, "nccl")
    num_bytes = np.array([p.num_bytes for p in points])
    ranks = np.array([p.num_ranks for p in points])
    pick = np.array([int(tuner_protocol(p.num_bytes, p.num_ranks, p.passes, tuner["tuner_bus_gbps"],
                                        tuner["tuner_ll_max_gbps"])) for p in points])
    low, mid, simple = pick == 0, pick == 1, pick == 2
    if low.sum() < MIN_POINTS or simple.sum() < MIN_POINTS:
        return None
    local_kb = ring_local_kb(num_bytes, ranks)
    nvls_rows = np.array([nvls_features(b) for b in num_bytes])
    reduce = np.array([p.passes == 2 for p in points])
    floor = nvl_gbps * LL_BANDWIDTH_RATIO
    cap = min(nvl_gbps, tuner["tuner_bus_gbps"])
    held = np.array([TUNER_BASE_US["LL128"], TUNER_STEP_US["LL128"]])
    local_cap = hbm_gbps / 2.0 if hbm_gbps > 0 else 0.0

    def ring_lines(keep):
        """(LL line [4], wide line: Simple base, hop, LL128 base, hop, 1/link, 1/local, [points]
        µs) fitted on the points in `keep`."""
        ll = _solve(rows[low & keep], us[low & keep], floor)
        # columns: Simple's 1 and steps, LL128's 1 and steps, link KB, local KB
        design = np.zeros((len(us), 6))
        design[simple, 0:2] = rows[simple, 0:2]
        design[mid, 2:4] = rows[mid, 0:2]
        design[:, 4] = np.where(mid, rows[:, 2] / TUNER_LL128_RATIO, rows[:, 2])
        design[simple, 5] = local_kb[simple]
        fit = (simple | mid) & keep
        cols = [0, 1, 4] + ([2] if mid[fit].any() else []) + ([5] if local_cap > 0 else [])
        lower = np.array([0.0, 0.0, 0.0, 0.0, 1.0 / cap, 1.0 / max(local_cap, 1e-12)])
        upper = np.array([np.inf, np.inf, np.inf, np.inf, 1.0 / floor, np.inf])
        # LL128's per-step latency is NCCL's (its few points, often at one GPU count, cannot
        # tell it from the fixed cost); its fixed cost too where it has no points
        rest = us - design[:, 3] * held[1] - (0.0 if mid[fit].any() else design[:, 2] * held[0])
        weight = 1.0 / np.sqrt(us[fit])
        with np.errstate(invalid="ignore"):     # one GPU count: collinear columns (`_solve`)
            x = lsq_linear(design[fit][:, cols] * weight[:, None], rest[fit] * weight,
                           bounds=(lower[cols], upper[cols])).x
        wide = np.zeros(6)
        wide[cols] = x
        wide[3] = held[1]
        if not mid[fit].any():
            wide[2] = held[0]
        return ll, wide, np.where(low, rows @ ll[:3], design @ wide)

    ll, wide, ring = ring_lines(np.ones(len(us), dtype=bool))
    best = (float(np.sum((ring - us) ** 2 / us)), ll, wide, None)
    moved = rows[:, 2]
    wide_reduce = reduce & ~low             # NVLS (a Simple-protocol algorithm) vies with these
    starts = np.unique(np.quantile(moved[wide_reduce], SPLITS)) if wide_reduce.any() else []
    for cut in starts:
        on = wide_reduce & (moved >= cut)
        for _ in range(MAX_ROUNDS):
            if on.sum() < MIN_POINTS:
                break
            nvls = _solve(nvls_rows[on], us[on], np.inf, hops=False)
            # Simple's line keeps its points where NVLS would leave it too few to fit
            ll, wide, ring = ring_lines(~on if (simple & ~on).sum() >= MIN_POINTS else ~on | simple)
            over = nvls_rows @ nvls[:3]
            error = float(np.sum((np.where(reduce, np.minimum(ring, over), ring) - us) ** 2 / us))
            moved_to = reduce & (over < ring)
            if error < best[0] and moved_to.sum() >= MIN_POINTS:
                best = (error, ll, wide, nvls)
            if (moved_to == on).all():
                break
            on = moved_to
    _, ll, wide, nvls = best
    out = {**_line(ll[:3], ("ll_base_us", "ll_hop_us", "ll_gbps")),
           **_line(wide[[0, 1, 4, 5]], ("base_us", "hop_us", "nvl_gbps")),
           "ll128_base_us": float(wide[2]), "ll128_hop_us": float(wide[3]), **tuner}
    if nvls is not None:
        out.update(nvls_base_us=float(nvls[0]), nvls_gbps=float(1.0 / nvls[2]))
    return out


def _fit_nccl(points: list[AllReducePoint], nvl_gbps: float,
              hbm_gbps: float = 0.0, tuner: dict[str, float] | None = None) -> dict[str, float]:
    """NCCL's coefficients: with NCCL's tuner figures (`tuner`, `epsim.cost.allreduce.
    tuner_params`), each point on the line NCCL picks (`_fit_tuned`) where both lines have
    points; else the LL and Simple ring lines as the faster of the two, and NVLS where it is
    kept, then Simple's local step where its points allow it (`hbm_gbps` > 0 bounds it; module
    doc)."""
    if tuner:
        tuned = _fit_tuned(points, nvl_gbps, hbm_gbps, tuner)
        if tuned is not None:
            return tuned
    points = [p for p in points if p.passes == 2]        # all-gathers: the tuned fit's alone
    rows, us = _rows(points, "nccl")
    nvls = np.array([nvls_features(p.num_bytes) for p in points])
    moved = rows[:, 2]
    cuts = np.unique(np.quantile(moved, SPLITS))
    caps = [nvl_gbps * LL_BANDWIDTH_RATIO, nvl_gbps, nvl_gbps]
    # Simple is the wide line: at least LL's ceiling (module doc)
    floors = [0.0, nvl_gbps * LL_BANDWIDTH_RATIO, 0.0]
    two_starts = [(moved >= c).astype(int) for c in cuts]
    three_starts = [np.searchsorted([a, b], moved, side="right")
                    for i, a in enumerate(cuts) for b in cuts[i + 1:]]
    ring = _assign([rows, rows], caps[:2], [True, True], us, two_starts, floors[:2])
    three = _assign([rows, rows, nvls], caps, [True, True, False], us, three_starts, floors)
    best, forms, hops = ring, [rows, rows], [True, True]
    if three[0] < ring[0] and (three[2] == 2).sum() >= 3:
        best, forms, hops = three, [rows, rows, nvls], [True, True, False]
    # the local step separates from the link's only where the points show Simple's bandwidth:
    # its link rate off the floor (at it, the line is LL128's or unseen; module doc)
    seen = 1.0 / best[1][1][2] > floors[1] * (1.0 + 1e-3)
    if hbm_gbps > 0 and seen and (best[2] == 1).sum() >= MIN_POINTS:
        wide = np.column_stack([rows, ring_local_kb(np.array([p.num_bytes for p in points]),
                                                    np.array([p.num_ranks for p in points]))])
        wide_forms = [rows, wide, *forms[2:]]
        local = _assign(wide_forms, caps[:len(forms)], hops, us, [best[2]],
                        floors[:len(forms)], [0.0, hbm_gbps / 2.0, 0.0][:len(forms)])
        simple = local[1][1]
        if (simple[3] > 0 and 1.0 / simple[3] >= 1.0 / simple[2] and _squares(wide_forms, local[1], us)
                <= _squares(forms, best[1], us) * (1.0 + LOCAL_TOLERANCE)):
            best = local
    out = {**_line(best[1][0][:3], ("ll_base_us", "ll_hop_us", "ll_gbps")),
           **_line(best[1][1], ("base_us", "hop_us", "nvl_gbps"))}
    if len(forms) == 3:
        out.update(nvls_base_us=float(best[1][2][0]), nvls_gbps=float(1.0 / best[1][2][2]))
    return out


def _fit_custom(points: list[AllReducePoint], nvl_gbps: float,
                sm100: bool = False) -> dict[str, dict[str, float]]:
    """{algorithm: coefficients} of the custom kernels fitted together (module doc): columns
    (1, n - 1, the two-shot's second stage: 1 and n - 1, blocks, one-shot KB, two-shot KB), the
    launch, barrier and block terms shared (a two-shot's `base_us` and `per_peer_us` are the one-shot's plus
    its second stage's); an algorithm without points keeps its datasheet bandwidth
    (CustomAllReduceV2's points: one KB column, one bandwidth for both). Both carry
    the kernel the points ran (`kernel_generation`, and `sm100`: its switch points,
    `epsim.cost.allreduce.algorithm`).

    Raises:
        ValueError: points of two kernel generations (one kernel, one fit)."""
    from scipy.optimize import lsq_linear       # scipy waits for the all-reduce fit
    generations = sorted({p.generation for p in points})
    if len(generations) > 1:
        raise ValueError(f"custom all-reduce points' generations ({generations}) must be one; "
                         f"fit one framework version's records at a time")
    shared = generations[0] == 2        # V2: one bandwidth for both (module doc)
    rows = np.zeros((len(points), 7))
    for i, p in enumerate(points):
        one, peers, blocks, kb = custom_features(p.num_bytes, p.num_ranks, p.algorithm,
                                                 p.generation)
        two = p.algorithm == "twoshot"
        rows[i, :5] = one, peers, float(two), float(two) * peers, blocks
        rows[i, 5 + (two and not shared)] = kb
    us = np.array([p.latency_us for p in points])
    weight = 1.0 / np.sqrt(us)
    cols = [0, 1, 2, 3, 4, 5] if shared else list(range(7))
    lower = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0 / nvl_gbps, 1.0 / nvl_gbps])[cols]
    with np.errstate(invalid="ignore"):         # one GPU count: collinear columns (`_solve`)
        x = lsq_linear(rows[:, cols] * weight[:, None], us * weight,
                       bounds=(lower, np.full(len(cols), np.inf))).x
    seen = {p.algorithm for p in points}
    return {algo: {"base_us": float(x[0] + (x[2] if algo == "twoshot" else 0.0)),
                   "per_peer_us": float(x[1] + (x[3] if algo == "twoshot" else 0.0)),
                   "per_block_us": float(x[4]),
                   **({"nvl_gbps": float(1.0 / x[5 + i * (not shared)])}
                      if algo in seen or (shared and seen) else {}),
                   **({"kernel_generation": float(generations[0]), "sm100": float(sm100)}
                      if generations[0] != 1 else {})}
            for i, algo in enumerate(CUSTOM)}


def _check(points: list[AllReducePoint]) -> None:
    for p in points:
        if p.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm ({p.algorithm!r}) must be one of {list(ALGORITHMS)}")
        if not p.latency_us > 0:
            raise ValueError(f"latency_us ({p.latency_us}) must be > 0")


def fit_allreduce(points: list[AllReducePoint], cluster: ClusterSpec,
                  tuned: bool = True) -> dict[str, dict[str, float]]:
    """{algorithm: coefficients} fitted on `points`: the custom kernels together, NCCL apart
    (with fewer than `MIN_POINTS` points they keep their datasheet defaults,
    `allreduce_defaults`), each NCCL point on the line NCCL's tuner picks (`tuned`, `_fit_tuned`)
    or, `tuned` False or too few points a line, as the faster line.

    Raises:
        ValueError: a point of an unknown algorithm or with a non-positive time.
    """
    _check(points)
    nvl = cluster.nvlink_gbps_resolved
    out = {algo: dict(values) for algo, values in allreduce_defaults(cluster).items()}
    custom = [p for p in points if p.algorithm in CUSTOM]
    if len(custom) >= MIN_POINTS:
        for algo, values in _fit_custom(custom, nvl, is_sm100(cluster.hardware)).items():
            out[algo].update(values)
    nccl = [p for p in points if p.algorithm == "nccl"]
    if len(nccl) >= MIN_POINTS:
        out["nccl"].update(_fit_nccl(nccl, nvl, cluster.hardware.hbm_gbps,
                                     tuner_params(cluster) if tuned else None))
    return out


def predict_point(p: AllReducePoint, params: dict[str, dict[str, float]]) -> float:
    """The model's µs for a point on one NVLink domain by the point's own algorithm (a custom
    point's is the one SGLang picks at its size; an nccl-tests point is NCCL at every size)."""
    if p.algorithm == "nccl":
        return float(ring_us(p.num_bytes, p.num_ranks, 1, params["nccl"], passes=p.passes))
    return allreduce_us(p.num_bytes, p.num_ranks, 1, params, num_hosts=1)


def fit_allreduce_records(records: list[SourcedRecord], cluster: ClusterSpec
                          ) -> dict[str, ComponentFit]:
    """The profile components (`any/allreduce/graph/<algorithm>`) fitted on the all-reduce
    records among `records` (`record_point`), each with the records it was fitted on; an
    algorithm with fewer than `MIN_POINTS` of them (custom: together) gets none."""
    hw = cluster.hardware
    pairs = [(s, record_point(s.record, hw.gpus_per_host or cluster.gpus_per_node_resolved,
                              is_sm100(hw)))
             for s in records]
    pairs = [(s, p) for s, p in pairs if p is not None]
    params = fit_allreduce([p for _, p in pairs], cluster)
    fits = {}
    for algos in (CUSTOM, ("nccl",)):
        if sum(p.algorithm in algos for _, p in pairs) < MIN_POINTS:
            continue
        for algo in algos:
            mine = [(s, p) for s, p in pairs if p.algorithm == algo]
            if not mine:
                continue
            gpus = [p.num_ranks for _, p in mine]
            sizes = [p.num_bytes for _, p in mine]
            shared = " (launch and barriers shared by the custom kernels)" \
                if algo in CUSTOM else ""
            fits[component_key("any", "allreduce", f"{GRAPH}/{algo}")] = ComponentFit(
                component_key("any", "allreduce", f"{GRAPH}/{algo}"), params[algo],
                np.array([predict_point(p, params) for _, p in mine]),
                np.array([p.latency_us for _, p in mine]), [s for s, _ in mine], 1,
                f"epsim.calibrate.allreduce{shared}",
                {"bytes": [float(min(sizes)), float(max(sizes))],
                 "ep_size": [float(min(gpus)), float(max(gpus))]})
    return fits
