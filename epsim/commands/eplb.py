"""`epsim eplb`: compute an EPLB placement from recorded expert loads and show its balance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from epsim.errors import SpecError


def _loads_path(args) -> str:
    if args.loads and args.loads_file and args.loads != args.loads_file:
        raise SpecError(f"loads ({args.loads_file!r} and --loads {args.loads!r}) must be given once")
    path = args.loads or args.loads_file
    if not path:
        raise SpecError("loads (missing) must name a file: epsim eplb LOADS ... or --loads LOADS")
    return path


def _previous(path: str, num_logical: int):
    from epsim.eplb import Placement
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SpecError(f"{path}: cannot read previous placement ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return Placement.from_dict(data, num_logical=num_logical, where=path)


def _policy(args) -> str:
    if args.algorithm != "deepseek":
        return args.algorithm
    hierarchical = args.groups % args.nodes == 0
    return (f"deepseek ({'hierarchical' if hierarchical else 'global'}: num_groups {args.groups} "
            f"% num_nodes {args.nodes} {'==' if hierarchical else '!='} 0)")


def run(args) -> int:
    from epsim.eplb import Placement, compute_placement, read_loads
    loads = read_loads(_loads_path(args))                                   # [layers, experts]
    num_layers, num_logical = loads.shape
    previous = _previous(args.previous, num_logical) if args.previous else None
    placement = compute_placement(args.algorithm, loads, args.replicas, args.groups, args.nodes,
                                  args.gpus, previous=previous)
    after = placement.balancedness(loads)                                   # [layers]
    before = None
    if num_logical % args.gpus == 0:
        before = Placement.contiguous(num_layers, num_logical, args.gpus, args.nodes).balancedness(loads)
    changed = placement.changed_slots(previous) if previous is not None else None
    if args.json:
        out = {"algorithm": args.algorithm, "num_layers": num_layers, "num_logical": num_logical,
               "balancedness_before": None if before is None else before.tolist(),
               "balancedness_after": after.tolist(), **placement.to_dict()}
        if changed is not None:
            out["changed_slots"] = changed.tolist()
        print(json.dumps(out))
        return 0
    print(f"algorithm: {_policy(args)}")
    print(f"layers {num_layers}, logical experts {num_logical}, physical slots {args.replicas} "
          f"({placement.num_redundant} redundant), GPUs {args.gpus} ({placement.slots_per_gpu} "
          f"slots each), nodes {args.nodes}")
    if before is None:
        print(f"balancedness before: n/a (experts {num_logical} do not divide over {args.gpus} GPUs "
              f"without redundancy)")
    else:
        print(f"balancedness before (contiguous, no redundancy): mean {before.mean():.4f}, "
              f"worst layer {before.min():.4f}  (busiest GPU {1 / before.min():.2f}x mean)")
    print(f"balancedness after: mean {after.mean():.4f}, worst layer {after.min():.4f}  "
          f"(busiest GPU {1 / after.min():.2f}x mean)")
    if changed is not None:
        print(f"changed slots vs previous: {int(changed.sum())} of {placement.physical_to_logical.size}")
    width = len(str(num_logical - 1))
    print("phy2log (slots grouped by GPU):")
    for layer in range(num_layers):
        gpus = placement.physical_to_logical[layer].reshape(args.gpus, -1)
        row = " | ".join(" ".join(f"{e:>{width}}" for e in gpu) for gpu in gpus)
        print(f"  layer {layer:>3}: {row}")
    print("logcnt:")
    for layer in range(num_layers):
        print(f"  layer {layer:>3}: {np.array2string(placement.logical_count[layer], max_line_width=10**6)}")
    return 0
