"""The all-reduce model's extrapolation hold-outs on aiconfigurator-core's op tables, against
the two baselines (docs/model.md, "TP attention and MoE-TP").

For each system with both tables, epsim's importer (`epsim calibrate --records aic:SYSTEM/sglang`,
`epsim.calibrate.aic`) reads SGLang's `custom_allreduce_perf` (rows captured in a CUDA graph:
device time, BF16) and the `nccl_perf` the system's spec names (nccl-tests, FP16 all-reduce) as
records; `epsim.calibrate.allreduce.points_from_records` makes the custom rows below the kernel's
8 MiB buffer points of the algorithm SGLang runs at their size and GPU count, and every NCCL row
an NCCL point. A table's `message_size` counts elements, 2 bytes each (the importer's `bytes`).

Two extrapolation axes, each refitting `epsim.calibrate.allreduce.fit_allreduce` on one side:
  size  fit each (algorithm, GPU count)'s messages up to a quarter of its largest, judge the top
        two octaves (NCCL: fit <= 128 MiB, judge 256-512 MiB; one-shot on 2 GPUs: fit <= 1 MiB,
        judge 2-4 MiB)
  gpus  fit the smaller GPU counts, judge the largest (where the fit sees two counts or more)
Baselines from the same fit points: the median of the fit points of the same GPU count (size
axis) or size (gpus axis), and log-log interpolation along the axis
(`epsim.validate.extrapolation.loglog`).

    python benchmarks/allreduce_holdout.py            # print the tables
    python benchmarks/allreduce_holdout.py --write    # record benchmarks/results/allreduce_holdout.md
"""

from __future__ import annotations

import argparse
import platform
from collections import defaultdict
from pathlib import Path

import numpy as np

from epsim.calibrate.aic import import_source
from epsim.calibrate.aic_tables import parse_source
from epsim.calibrate.allreduce import AllReducePoint, fit_allreduce, points_from_records
from epsim.cost.allreduce import ALGORITHMS, allreduce_us, ring_us
from epsim.errors import EpsimError
from epsim.spec.hardware import ClusterSpec
from epsim.validate.extrapolation import loglog

RESULT = Path(__file__).resolve().parent / "results" / "allreduce_holdout.md"
SYSTEMS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "gb200": "GB200",
           "gb300": "GB300"}
TABLES = ("custom_allreduce_perf", "nccl_perf")
COMMAND = "python benchmarks/allreduce_holdout.py --write"


def system_points(system: str) -> tuple[list[AllReducePoint], list[str]] | None:
    """(points, table files) of an installed aiconfigurator-core system, through epsim's
    importer (`aic:<system>/sglang`: the SGLang custom all-reduce table and the NCCL table the
    system's spec names); None without both tables (or without the package)."""
    try:
        source = parse_source(f"aic:{system}/sglang")
        tables = [t for t in source.tables() if t.name in TABLES]
    except EpsimError:
        return None
    if {t.name for t in tables} != set(TABLES):
        return None
    imported = import_source(source, tables, grid=False)
    hw = ClusterSpec(gpu=SYSTEMS[system]).hardware
    points = points_from_records(imported.fit + imported.pending,
                                 hw.gpus_per_host or hw.gpus_per_node)
    return points, [t.rel for t in tables]


def predict(p: AllReducePoint, params: dict) -> float:
    """The model's µs for a point of one node, by the point's own algorithm (a custom point's
    is the one SGLang picks at its size; an nccl-tests point is NCCL at every size)."""
    if p.algorithm == "nccl":
        return float(ring_us(p.num_bytes, p.num_ranks, 1, params["nccl"]))
    return allreduce_us(p.num_bytes, p.num_ranks, 1, params, num_hosts=1)


def split(points: list[AllReducePoint], axis: str) -> tuple[list, list]:
    """(fit, judged) of one axis (module doc)."""
    fit, judged = [], []
    if axis == "size":
        groups = defaultdict(list)
        for p in points:
            groups[(p.algorithm, p.num_ranks)].append(p)
        for group in groups.values():
            top = max(p.num_bytes for p in group)
            for p in group:
                (judged if p.num_bytes > top / 4 else fit).append(p)
        return fit, judged
    by_algo = defaultdict(list)
    for p in points:
        by_algo[p.algorithm].append(p)
    for group in by_algo.values():
        counts = sorted({p.num_ranks for p in group})
        if len(counts) < 3:                # the fit needs two counts to tell fixed from per-GPU
            fit += group
            continue
        for p in group:
            (judged if p.num_ranks == counts[-1] else fit).append(p)
    return fit, judged


def judge(points: list[AllReducePoint], cluster: ClusterSpec, axis: str) -> list[dict]:
    """One row per algorithm: model, constant and log-log MAPE (%) on the judged points."""
    fit, judged = split(points, axis)
    params = fit_allreduce(fit, cluster)
    rows = []
    for algo in ALGORITHMS:
        mine = [p for p in judged if p.algorithm == algo]
        if not mine:
            continue
        model, const, ll = [], [], []
        for p in mine:
            same = [q for q in fit if q.algorithm == algo and (
                q.num_ranks == p.num_ranks if axis == "size" else q.num_bytes == p.num_bytes)]
            x = (lambda q: q.num_bytes) if axis == "size" else (lambda q: q.num_ranks)
            model.append(predict(p, params) / p.latency_us - 1.0)
            const.append(np.median([q.latency_us for q in same]) / p.latency_us - 1.0)
            ll.append(loglog([(x(q), q.latency_us) for q in same], x(p)) / p.latency_us - 1.0)
        mape = [100.0 * float(np.mean(np.abs(v))) for v in (model, const, ll)]
        rows.append({"algorithm": algo, "axis": axis, "judged": len(mine),
                     "gpus": sorted({p.num_ranks for p in mine}),
                     "sizes": (min(p.num_bytes for p in mine), max(p.num_bytes for p in mine)),
                     "model": mape[0], "constant": mape[1], "loglog": mape[2],
                     "max_ape": 100.0 * float(np.max(np.abs(model)))})
    return rows


def _size(num_bytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:g} {unit}"
    return f"{num_bytes:g} B"


def report() -> str:
    lines = ["# All-reduce model: extrapolation hold-outs on aiconfigurator-core's op tables", "",
             f"Generated by `{COMMAND}` on {platform.machine()} ({platform.python_version()}); "
             f"the tables are those of the installed aiconfigurator-core. MAPE in %.", "",
             "| system | algorithm | axis | judged | GPUs | sizes | model | constant | log-log | "
             "model max | beats both |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    fits = ["", "## Fitted on every point", "",
            "| system | algorithm | coefficients | in-sample MAPE |", "|---|---|---|---|"]
    sources = ["", "## Tables read", ""]
    for system, gpu in SYSTEMS.items():
        found = system_points(system)
        if found is None:
            continue
        points, files = found
        cluster = ClusterSpec(gpu=gpu)
        sources.append(f"- {system}: " + ", ".join(f"`{f}`" for f in files))
        for axis in ("size", "gpus"):
            for r in judge(points, cluster, axis):
                beats = r["model"] < r["constant"] and r["model"] < r["loglog"]
                lines.append(f"| {system} | {r['algorithm']} | {axis} | {r['judged']} | "
                             f"{','.join(map(str, r['gpus']))} | {_size(r['sizes'][0])} - "
                             f"{_size(r['sizes'][1])} | {r['model']:.1f} | {r['constant']:.1f} | "
                             f"{r['loglog']:.1f} | {r['max_ape']:.1f} | "
                             f"{'yes' if beats else '**no**'} |")
        params = fit_allreduce(points, cluster)
        for algo in ALGORITHMS:
            mine = [p for p in points if p.algorithm == algo]
            ape = [abs(predict(p, params) / p.latency_us - 1.0) for p in mine]
            coef = ", ".join(f"{k} {v:.3g}" for k, v in params[algo].items() if k != "rdma_gbps")
            fits.append(f"| {system} | {algo} | {coef} | {100 * np.mean(ape):.1f} "
                        f"({len(mine)} points) |")
    return "\n".join(lines + fits + sources) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"record {RESULT.name}")
    args = parser.parse_args()
    text = report()
    print(text)
    if args.write:
        tmp = RESULT.with_suffix(".md.tmp")
        tmp.write_text(text)
        tmp.replace(RESULT)                       # never left half-written
        print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
