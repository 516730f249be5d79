"""Probe (issue 37): NCCL's own tuner model as the prior for which ring protocol runs a message,
on the `none/dispatch` tokens hold-out (nccl-tests all-gathers priced by the all-reduce fit).

NCCL picks a (algorithm, protocol) per message by its latency-bandwidth model (NCCL 2.27.3,
`src/graph/tuning.cc` at tag v2.27.3-1): ring latency `baseLat + nsteps * hwLat` (lines 134-137,
143-147, 337-356: LL 6.6 + 0.6, LL128 14.0 + 1.9, Simple 8.4 + 3.4 µs a step on NVLink; `nsteps`
2 (n - 1) an all-reduce, n - 1 an all-gather, line 250), bus bandwidths from one figure, the
channels' NVLink bandwidth (`nChannels * bwIntra`, line 276: per link 20.6 GB/s on SM90, 40.0 on
SM100, `src/graph/topo.h` lines 19-21, 18 links: 0.82 / 0.80 of the datasheet's 450 / 900), LL at
half of it capped at 141 (Hopper) / 282 GB/s (Blackwell) (lines 165-170, 279), LL128 at 0.92
(line 280), Simple all of it; time `lat + (nsteps / n) S / busBw` (lines 320-327, 569). The
tables agree with its picks where they jump: B200's 4-GPU all-gather 25 -> 50 µs from 4 to 8 MiB
(LL -> Simple), 8 GPUs 44 -> 102 µs from 8 to 16 MiB (LL -> LL128); H100's 4 GPUs 19 -> 37 µs
from 2 to 4 MiB (LL -> Simple). After each switch the real time is above the extrapolated line of
the protocol before it: what NCCL runs is its model's pick, not the fastest line, which the
shipped fit's min-of-lines assumes.

Variants, each fitted on the all-reduce rows up to 1024 tokens (8 MiB) and judged on the
all-gathers of 2048-16384 tokens, as `benchmarks/aic_holdout.py --only none/dispatch` does:

  current   the shipped fit (`epsim.calibrate.allreduce._fit_nccl`, min of lines)
  labels    the tuner's picks label the points (LL and LL128: the `ll_` line; Simple: the plain
            line, with the shipped bounds), priced by the tuner's pick
  local     labels, the Simple line with its local step (`local_gbps`, <= HBM / 2)
  shared    the three protocols as NCCL models them: one fitted bus bandwidth scale for all
            three (NCCL's ratios), each protocol's fixed cost fitted, steps at NCCL's hwLat
  gathers   labels, the fit set's own all-gathers (<= 8 MiB, one pass) fitted beside the
            all-reduces: Simple shows at 2 and 4 GPUs, so the link and the local step part
  +local    gathers, with the local step; `NCCL cap`: Simple's link <= NCCL's own bus figure
  tuned     the fit `epsim.calibrate.allreduce` ships (`_fit_tuned`): gathers, local step, NCCL
            cap, and LL128 on a line of its own (its fixed cost; its per-step latency NCCL's;
            0.92 of Simple's link rate) where the others lumped it with LL

    python benchmarks/nccl_tuner_prior.py [--systems h100_sxm ...] [--whole-tables DIR]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.cost.allreduce import (NVLINK_EFFICIENCY, PROTOCOLS, TUNER_BASE_US as BASE_US,  # noqa: E402
                                  TUNER_LL_MAX_GBPS as LL_MAX_GBPS, TUNER_STEP_US as STEP_US,
                                  ring_features, ring_local_kb, tuner_gbps)
from epsim.cost.allreduce import tuner_protocol as _pick  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO  # noqa: E402
VERBOSE = False
NCCL_NVLINK_RATIO = NVLINK_EFFICIENCY  # NCCL's per-link figure over the datasheet (topo.h:19-21)


def protocol_gbps(bus_gbps: float, blackwell: bool) -> dict[str, float]:
    """NCCL's ring bus bandwidth of each protocol (GB/s) from the channels' `bus_gbps`."""
    return tuner_gbps(bus_gbps, LL_MAX_GBPS[blackwell])


def tuner_protocol(num_bytes: float, num_ranks: int, passes: int, bus_gbps: float,
                   blackwell: bool) -> str:
    """The ring protocol NCCL's tuner picks (`epsim.cost.allreduce.tuner_protocol`), by name."""
    return PROTOCOLS[int(_pick(num_bytes, num_ranks, passes, bus_gbps, LL_MAX_GBPS[blackwell]))]


def _predict(gathers, line, ll, bus_gbps: float, blackwell: bool) -> list[float]:
    """The judged all-gathers (one pass) on the protocol NCCL picks: Simple on the fitted `line`
    (base, step, 1/link, 1/local), LL on the `ll` line."""
    predicted = []
    for g in gathers:
        row = ring_features(g.num_bytes, g.num_ranks, 1)
        if tuner_protocol(g.num_bytes, g.num_ranks, 1, bus_gbps, blackwell) == "Simple":
            predicted.append(row @ line[:3] + ring_local_kb(g.num_bytes, g.num_ranks) * line[3])
        else:
            predicted.append(row @ ll[:3])
    return predicted


def _mape(predicted, measured) -> float:
    return float(100.0 * np.mean(np.abs(np.asarray(predicted) / np.asarray(measured) - 1.0)))


def _shared(fit, judged, cluster, blackwell):
    """The `shared` variant's judged predictions: one bandwidth scale (grid), per-protocol
    fixed cost (bounded least squares), steps at NCCL's hwLat."""
    from scipy.optimize import lsq_linear
    bus = NCCL_NVLINK_RATIO * cluster.nvlink_gbps_resolved
    us = np.array([p.latency_us for p in fit])
    weight = 1.0 / np.sqrt(us)
    labels = [tuner_protocol(p.num_bytes, p.num_ranks, 2, bus, blackwell) for p in fit]
    best = None
    for scale in np.linspace(0.3, 1.25, 96):
        gbps = protocol_gbps(scale * bus, blackwell)
        rows = np.zeros((len(fit), 3))
        rest = us.copy()
        for i, (p, proto) in enumerate(zip(fit, labels)):
            steps = 2 * (p.num_ranks - 1)
            rows[i, PROTOCOLS.index(proto)] = 1.0
            rest[i] -= steps * STEP_US[proto] + steps / p.num_ranks * p.num_bytes / (1e3 * gbps[proto])
        used = rows.any(axis=0)
        base = np.array([BASE_US[p] for p in PROTOCOLS])
        base[used] = lsq_linear(rows[:, used] * weight[:, None], rest * weight, bounds=(0, np.inf)).x
        err = float(np.sum((rows @ base - rest) ** 2 / us))
        if best is None or err < best[0]:
            best = (err, scale, base)
    _, scale, base = best
    gbps = protocol_gbps(scale * bus, blackwell)
    out = []
    for p in judged:
        proto = tuner_protocol(p.num_bytes, p.num_ranks, 1, bus, blackwell)
        steps = p.num_ranks - 1
        out.append(base[PROTOCOLS.index(proto)] + steps * STEP_US[proto]
                   + steps / p.num_ranks * p.num_bytes / (1e3 * gbps[proto]))
    return out


def probe(system: str) -> dict[str, float]:
    """{variant: judged MAPE %} of one AIC system (module doc)."""
    from benchmarks.aic_holdout import records_of
    from epsim.calibrate.aic_tables import AIC_TO_ZOO
    from epsim.calibrate.allreduce import _fit_nccl, _solve, record_point
    from epsim.calibrate.inputs import merge_passes
    from epsim.cost.allreduce import LL_BANDWIDTH_RATIO, ring_us
    from epsim.spec.hardware import ClusterSpec
    from epsim.validate.extrapolation import split_tokens

    cluster = ClusterSpec(gpu=AIC_TO_ZOO[system], num_nodes=1)
    hw = cluster.hardware
    blackwell = hw.fp4_tflops is not None
    nvl = cluster.nvlink_gbps_resolved
    bus = NCCL_NVLINK_RATIO * nvl
    raw, _ = records_of(system)
    fit_raw, judged_raw = split_tokens(merge_passes(raw))
    fit = [p for p in (record_point(s.record, hw.gpus_per_host or 8) for s in fit_raw)
           if p is not None and p.algorithm == "nccl" and p.passes == 2]      # the all-reduces
    judged = [s.record for s in judged_raw if s.record.backend == "none" and s.record.kind == "dispatch"]
    measured = [r.median_us for r in judged]

    class Gather:                      # a judged all-gather as the fit's point shape
        def __init__(self, r):
            self.num_bytes, self.num_ranks = r.bytes, r.ep_size
    gathers = [Gather(r) for r in judged]
    out = {}
    current = _fit_nccl(fit, nvl, hw.hbm_gbps)
    out["current"] = _mape([ring_us(g.num_bytes, g.num_ranks, 1, current, passes=1) for g in gathers],
                           measured)
    rows = np.array([ring_features(p.num_bytes, p.num_ranks) for p in fit])
    local_kb = np.array([ring_local_kb(p.num_bytes, p.num_ranks) for p in fit])
    us = np.array([p.latency_us for p in fit])
    simple = np.array([tuner_protocol(p.num_bytes, p.num_ranks, 2, bus, blackwell) == "Simple"
                       for p in fit])
    ll = _solve(rows[~simple], us[~simple], nvl * LL_BANDWIDTH_RATIO)
    for name, local_cap in (("labels", 0.0), ("local", hw.hbm_gbps / 2.0)):
        wide = np.column_stack([rows, local_kb])[simple]
        line = _solve(wide, us[simple], nvl, True, nvl * LL_BANDWIDTH_RATIO, local_cap)
        predicted = _predict(gathers, line, ll, bus, blackwell)
        out[name] = _mape(predicted, measured)
    out["shared"] = _mape(_shared(fit, gathers, cluster, blackwell), measured)
    # gathers: the fit set's own all-gathers (<= 8 MiB, one pass) fitted beside the all-reduces
    fit_gathers = [s.record for s in fit_raw if s.record.backend == "none" and s.record.kind == "dispatch"]
    points = [(p.num_bytes, p.num_ranks, 2, p.latency_us) for p in fit] + \
        [(r.bytes, r.ep_size, 1, r.median_us) for r in fit_gathers]
    rows = np.array([ring_features(b, n, k) for b, n, k, _ in points])
    local_kb = np.array([ring_local_kb(b, n) for b, n, _, _ in points])
    us = np.array([t for *_, t in points])
    simple = np.array([tuner_protocol(b, n, k, bus, blackwell) == "Simple" for b, n, k, _ in points])
    ll = _solve(rows[~simple], us[~simple], nvl * LL_BANDWIDTH_RATIO)
    for name, local_cap, cap in (("gathers", 0.0, nvl), ("gathers+local", hw.hbm_gbps / 2.0, nvl),
                                 ("gathers+local, NCCL cap", hw.hbm_gbps / 2.0, bus)):
        wide = np.column_stack([rows, local_kb])[simple]
        line = _solve(wide, us[simple], cap, True, nvl * LL_BANDWIDTH_RATIO, local_cap)
        predicted = _predict(gathers, line, ll, bus, blackwell)
        out[name] = _mape(predicted, measured)
        out[name + " line"] = line
        if VERBOSE:
            for g, t, m in zip(gathers, predicted, measured):
                pick = tuner_protocol(g.num_bytes, g.num_ranks, 1, bus, blackwell)
                print(f"   {system} {name} n{g.num_ranks} {g.num_bytes / 2**20:.0f}M {pick} "
                      f"{m:.1f} {t:.1f} {100 * (t / m - 1):+.0f}%")
    # tuned: the shipped fit (`epsim.calibrate.allreduce._fit_tuned`): LL128 on its own fixed
    # cost at 0.92 of Simple's link, the all-gathers fitted beside the all-reduces
    from epsim.calibrate.allreduce import AllReducePoint
    from epsim.cost.allreduce import tuner_params
    tuned = _fit_nccl(fit + [AllReducePoint(r.bytes, r.ep_size, r.median_us, "nccl", passes=1)
                             for r in fit_gathers], nvl, hw.hbm_gbps, tuner_params(cluster))
    out["tuned"] = _mape([ring_us(g.num_bytes, g.num_ranks, 1, tuned, passes=1) for g in gathers],
                         measured)
    return out


def whole_tables(system: str, profiles: Path) -> dict[str, float]:
    """{collective: MAPE %} of a profile's NCCL ring (`<profiles>/aic_<gpu>.json`,
    `any/allreduce/graph/nccl`) on every nccl-tests all-reduce and all-gather of the system."""
    from benchmarks.aic_holdout import records_of
    from epsim.calibrate.aic_tables import AIC_TO_ZOO
    from epsim.calibrate.allreduce import record_point
    from epsim.calibrate.inputs import merge_passes
    from epsim.cost.allreduce import ring_us
    from epsim.profile import load_profile
    profile = load_profile(profiles / f"aic_{AIC_TO_ZOO[system].lower()}.json")
    nccl = profile.params("any", "allreduce", "graph/nccl")
    points = [p for p in (record_point(s.record, 8) for s in merge_passes(records_of(system)[0]))
              if p is not None and p.algorithm == "nccl"]
    return {name: _mape([ring_us(p.num_bytes, p.num_ranks, 1, nccl, passes=k) for p in points
                         if p.passes == k], [p.latency_us for p in points if p.passes == k])
            for name, k in (("all-reduce", 2), ("all-gather", 1))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--systems", nargs="+", choices=[s for s, g in AIC_TO_ZOO.items() if g],
                        default=["h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"])
    parser.add_argument("--whole-tables", metavar="DIR",
                        help="instead: the MAPE of DIR's aic_<gpu>.json NCCL ring on each system's "
                             "whole nccl-tests tables (a shipped profile: epsim/data/profiles)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.whole_tables:
        print("| system | all-reduce | all-gather |\n|---|---:|---:|")
        for system in args.systems:
            got = whole_tables(system, Path(args.whole_tables))
            print(f"| {system} | {got['all-reduce']:.1f} | {got['all-gather']:.1f} |")
        return 0
    names = ("current", "labels", "local", "shared", "gathers", "gathers+local",
             "gathers+local, NCCL cap", "tuned")
    print("| system | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
    for system in args.systems:
        got = probe(system)
        print(f"| {system} | " + " | ".join(f"{got[k]:.1f}" for k in names) + " |")
        line = got["gathers+local line"]
        print(f"<!-- {system} Simple line: base {line[0]:.1f} us, step {line[1]:.2f} us, link "
              f"{1 / line[2]:.0f} GB/s, local {1 / line[3] if line[3] else 0:.0f} GB/s -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
