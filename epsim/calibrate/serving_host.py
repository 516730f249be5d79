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

The medians are carried as measured (nothing is fitted: one host, one run);
`epsim.cost.scheduler_host` prices each of its terms with the figure that times the same call.

    python -m epsim.calibrate.serving_host RESULT.json --profile PROFILE.json

writes that component into a profile in place (atomically), leaving the others, and lists the
result file in the profile's provenance (its sha256, the combined `records_sha256`, the device).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from epsim.calibrate.in_place import missing_file, put_component
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m epsim.calibrate.serving_host",
                                     description="write any/serving_host of a profile in place")
    parser.add_argument("result", type=Path, help="serving_host.json (benchmarks/serving_host_gpu.py)")
    parser.add_argument("--profile", type=Path, required=True)
    args = parser.parse_args(argv)
    if missing_file(args.result, args.profile):
        return 2
    result = json.loads(args.result.read_text())
    try:
        component = component_of(result, str(args.result))
    except (ValueError, KeyError) as e:
        print(f"result ({args.result}): {e}", file=sys.stderr)
        return 2
    put_component(args.profile, KEY, component, args.result, len(component.params),
                  [device_of(result)])
    print(json.dumps(component.params))
    return 0


if __name__ == "__main__":
    sys.exit(main())
