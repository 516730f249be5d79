"""`any/serving_host`: a GPU serving host's CPU-side figures, carried from their record.

`benchmarks/serving_host_gpu.py` times, on the host of a lent GPU machine, what SGLang's
scheduler loop issues between forwards (its docstring says what each figure is):

  launch_us          one minimal eager CUDA op's issue (`x.add_(1)` on 8 floats: no
                     allocation, no slicing, fastest burst) - a floor for a real op
  h2d_tensor_us      `torch.tensor(6 ints, device="cuda")`: the loop's small uploads
  readback_us        `.tolist()` of a 2-element CUDA tensor, the stream idle: a read-back's host
                     part (the wait for the GPU is the GPU's time)
  gloo_<op>_<n>_us   one gloo collective over n local ranks (median, rank 0's clock): `broadcast`
                     of 1 int64, `all_gather` (`all_gather_into_tensor`) of 6 int64 a rank,
                     `all_reduce` of 1 int64, `monitored_barrier`

and `benchmarks/serving_loop_ops_gpu.py` (`--loop-ops`) times the loop's own kinds of eager op
(clone, cast, index_put, slice copies, cumsum, argmax, softmax, arange, full: real ops with
arguments, their outputs allocated) on a GPU host:

  loop_launch_us     their host time per launch (the record's `mean_us`): what the loop's eager
                     launches outside the CUDA graph are priced at

The figures are carried as measured (nothing is fitted: one host, one run);
`epsim.cost.scheduler_host` prices each of its terms with the figure that times the same call.

    python -m epsim.calibrate.serving_host RESULT.json [--loop-ops LOOP_OPS.json
        --loop-ops-date YYYY-MM-DD] --profile PROFILE.json

writes that component into a profile in place (atomically), leaving the others, and lists the
result files in the profile's provenance (their sha256, the combined `records_sha256`, the
devices); the loop-ops record's path, host and date close the component's note (`LOOP_NOTE`),
which the scheduler host names as its launches' source. The date is the record's `date` field,
else `--loop-ops-date` (the 2026-12-06 record predates the field).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from epsim.calibrate.in_place import missing_file, put_component
from epsim.cost.scheduler_host import LOOP_NOTE
from epsim.profile import Component

KEY = "any/serving_host"
CUDA_FIGURES = ("launch_us", "h2d_tensor_us", "readback_us")
GLOO_OPS = ("broadcast", "all_gather", "all_reduce", "monitored_barrier")


def device_of(result: dict) -> str:
    """The measuring host in words: its GPU and CPU count."""
    gpu = (result.get("cuda") or {}).get("device", "no GPU")
    return f"{gpu} host, {result['cpus']} CPUs ({result['processor']}), torch {result['torch']}"


def component_of(result: dict, path: str) -> Component:
    """`any/serving_host` from `serving_host_gpu.py`'s output `result` (read from `path`).

    Raises:
        ValueError: naming the missing field.
    """
    cuda = result.get("cuda")
    if not cuda:
        raise ValueError(f"{path}: field 'cuda' is empty (the run had no GPU)")
    params = {}
    for name in CUDA_FIGURES:
        if name not in cuda:
            raise ValueError(f"{path}: field 'cuda.{name}' is missing")
        params[name] = float(cuda[name])
    ranks = sorted(int(n) for n in result.get("gloo", {}))
    if not ranks:
        raise ValueError(f"{path}: field 'gloo' holds no rank count")
    for n in ranks:
        for op in GLOO_OPS:
            params[f"gloo_{op}_{n}_us"] = float(result["gloo"][str(n)][op]["median_us"])
    return Component(params=params, source="fit", valid_range={"gloo_ranks": [ranks[0], ranks[-1]]},
                     residuals={"num_records": float(len(params))},
                     note=f"measured on a GPU host: {device_of(result)}; medians of "
                          f"{result['iters']} as measured (benchmarks/serving_host_gpu.py)",
                     data_source="epsim records", tables=[path])


def loop_launch_of(result: dict, path: str, date: str | None) -> tuple[float, str]:
    """(µs, provenance) of one scheduler-loop launch from `serving_loop_ops_gpu.py`'s output
    `result` (read from `path`): its `mean_us`, and "<host>, <date> (<path>)".

    Raises:
        ValueError: naming the missing or bad field.
    """
    for name in ("mean_us", "device", "cpus", "torch", "launches"):
        if name not in result:
            raise ValueError(f"{path}: field '{name}' is missing")
    mean_us = float(result["mean_us"])
    if not mean_us > 0:
        raise ValueError(f"{path}: field 'mean_us' ({result['mean_us']}) must be > 0")
    date = result.get("date") or date
    if not date:
        raise ValueError(f"{path}: field 'date' is missing; pass --loop-ops-date YYYY-MM-DD")
    launches = sum(result["launches"].values())
    return mean_us, (f"{launches} launches of {len(result['launches'])} eager ops, "
                     f"{loop_device_of(result)}, {date} ({path})")


def loop_device_of(result: dict) -> str:
    """The loop-ops record's host in words: its GPU and CPU count."""
    return f"{result['device']} host, {result['cpus']} CPUs, torch {result['torch']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m epsim.calibrate.serving_host",
                                     description="write any/serving_host of a profile in place")
    parser.add_argument("result", type=Path, help="serving_host.json (benchmarks/serving_host_gpu.py)")
    parser.add_argument("--loop-ops", type=Path,
                        help="loop_ops.json (benchmarks/serving_loop_ops_gpu.py)")
    parser.add_argument("--loop-ops-date", help="the loop-ops run's date where its record has none")
    parser.add_argument("--profile", type=Path, required=True)
    args = parser.parse_args(argv)
    if missing_file(args.result, args.profile, *([args.loop_ops] if args.loop_ops else [])):
        return 2
    result = json.loads(args.result.read_text())
    try:
        component = component_of(result, str(args.result))
    except (ValueError, KeyError) as e:
        print(f"result ({args.result}): {e}", file=sys.stderr)
        return 2
    sources, devices = {args.result: len(component.params)}, [device_of(result)]
    if args.loop_ops:
        loop = json.loads(args.loop_ops.read_text())
        try:
            us, where = loop_launch_of(loop, str(args.loop_ops), args.loop_ops_date)
        except ValueError as e:
            print(f"loop-ops ({args.loop_ops}): {e}", file=sys.stderr)
            return 2
        component = component.model_copy(update={
            "params": {**component.params, "loop_launch_us": us},
            "tables": [*component.tables, str(args.loop_ops)],
            "note": f"{component.note}; {LOOP_NOTE}{where}"})
        sources[args.loop_ops] = len(loop["launches"])
        devices.append(loop_device_of(loop))
    put_component(args.profile, KEY, component, sources, devices)
    print(json.dumps(component.params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
