"""The all-reduce model's extrapolation hold-outs on aiconfigurator-core's op tables, against
the two baselines (docs/model.md, "TP attention and MoE-TP").

For each system with both tables, the newest SGLang `custom_allreduce_perf` (rows captured in a
CUDA graph: device time, BF16) gives the custom algorithm's points below its 8 MiB buffer, each
assigned the algorithm SGLang runs at its size and GPU count (`epsim.cost.allreduce.algorithm`),
and the newest `nccl_perf` (nccl-tests, FP16 all-reduce) the NCCL points. A table's
`message_size` counts elements (AIC's collectors: `size // bytes_per_element`), 2 bytes each.

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

from epsim.calibrate.allreduce import AllReducePoint, fit_allreduce
from epsim.cost.allreduce import ALGORITHMS, algorithm, allreduce_us, ring_us
from epsim.spec.hardware import ClusterSpec
from epsim.validate.extrapolation import loglog

RESULT = Path(__file__).resolve().parent / "results" / "allreduce_holdout.md"
SYSTEMS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "gb200": "GB200",
           "gb300": "GB300"}
BYTES_PER_ELEMENT = 2          # BF16 / FP16 rows
COMMAND = "python benchmarks/allreduce_holdout.py --write"


def _newest(folder: Path, name: str) -> Path | None:
    from packaging.version import Version
    found = sorted(folder.glob(f"*/{name}"), key=lambda p: Version(p.parent.name))
    return found[-1] if found else None


def system_points(system: str) -> tuple[list[AllReducePoint], dict[str, str]] | None:
    """(points, {table: file}) of an installed aiconfigurator-core system; None without both
    tables (or without the package)."""
    try:
        from importlib import resources
        root = Path(str(resources.files("aiconfigurator_core"))) / "systems" / "data" / system
    except ModuleNotFoundError:
        return None
    import pandas as pd
    custom = _newest(root / "comm" / "sglang", "custom_allreduce_perf.parquet")
    nccl = _newest(root / "comm" / "nccl", "nccl_perf.parquet")
    if custom is None or nccl is None:
        return None
    points = []
    hw = ClusterSpec(gpu=SYSTEMS[system]).hardware
    per_host = hw.gpus_per_host or hw.gpus_per_node
    frame = pd.read_parquet(custom)
    frame = frame[frame.backend.str.contains("graph") & (frame.allreduce_dtype == "bfloat16")]
    for row in frame.itertuples(index=False):
        size = float(row.message_size) * BYTES_PER_ELEMENT
        hosts = -(-int(row.num_gpus) // per_host)
        algo = algorithm(size, int(row.num_gpus), hosts)
        if algo != "nccl":      # the table's rows beyond the custom kernel are SGLang calling NCCL
            points.append(AllReducePoint(size, int(row.num_gpus), float(row.latency) * 1e3, algo))
    frame = pd.read_parquet(nccl)
    frame = frame[(frame.op_name == "all_reduce") & (frame.nccl_dtype == "half")]
    for row in frame.itertuples(index=False):
        points.append(AllReducePoint(float(row.message_size) * BYTES_PER_ELEMENT,
                                     int(row.num_gpus), float(row.latency) * 1e3, "nccl"))
    rel = root.parents[2]
    return points, {"custom": str(custom.relative_to(rel)), "nccl": str(nccl.relative_to(rel))}


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
        sources.append(f"- {system}: `{files['custom']}`, `{files['nccl']}`")
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
