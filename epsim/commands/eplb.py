"""`epsim eplb`: compute an EPLB placement from recorded expert loads and show its balance and
what moving to it costs; `--out DIR` writes the maps, in SGLang's `--init-expert-location`
format among others (`epsim.eplb.export`). The screen shows the summary only: the maps of a
61-layer model are ~100 KB of numbers (`--json` and `--out` carry them)."""

from __future__ import annotations

import numpy as np

from epsim.budget import check_eplb
from epsim.commands.output import Report
from epsim.cost.tables import contiguous_placement
from epsim.eplb import (Placement, compute_placement, plan_moves, read_loads, rebalance_cost,
                        rebalance_params)
from epsim.eplb.export import EXPERT_LOCATION_FILE, write_placement
from epsim.errors import SpecError
from epsim.io import check_output_dir, load_json
from epsim.profile import load_profile
from epsim.spec.hardware import ClusterSpec
from epsim.text import duration, size
from epsim.zoo import get_model, model_names


def _loads_path(args) -> str:
    if args.loads and args.loads_file and args.loads != args.loads_file:
        raise SpecError(f"loads ({args.loads_file!r} and --loads {args.loads!r}) must be given once")
    path = args.loads or args.loads_file
    if not path:
        raise SpecError("loads (missing) must name a file: epsim eplb LOADS ... or --loads LOADS")
    return path


def _previous(path: str, num_logical: int):
    data = load_json(path, "previous placement")
    return Placement.from_dict(data, num_logical=num_logical, where=path)


def _policy(args) -> str:
    if args.algorithm != "deepseek":
        return args.algorithm
    hierarchical = args.groups % args.nodes == 0
    return (f"deepseek ({'hierarchical' if hierarchical else 'global'}: num_groups {args.groups} "
            f"% num_nodes {args.nodes} {'==' if hierarchical else '!='} 0)")


def _expert_bytes(args, num_logical: int) -> tuple[float | None, str]:
    """Bytes of one expert's weights and the model they come from: `--model`, else the one zoo
    model with as many experts as the loads; (None, why) when that is not one model."""
    if args.model is not None:
        if args.model not in model_names():
            raise SpecError(f"--model ({args.model!r}) must be one of {model_names()}")
        model = get_model(args.model)
        if model.num_experts != num_logical:
            raise SpecError(f"--model ({args.model!r}) has {model.num_experts} experts; the loads "
                            f"have {num_logical}")
        return float(model.expert_bytes), model.name
    fits = [get_model(n) for n in model_names() if get_model(n).num_experts == num_logical]
    if len(fits) == 1:
        return float(fits[0].expert_bytes), fits[0].name
    return None, (f"no bytes or times: give --model ({', '.join(m.name for m in fits)} have "
                  f"{num_logical} experts)" if fits else
                  f"no bytes or times: no zoo model has {num_logical} experts")


PRICED_KEYS = ("gpu", "moved_bytes", "nvlink_bytes", "rdma_bytes", "local_copy_bytes",
               "recv_bytes_per_rank", "send_bytes_per_rank", "slowest_rank",
               "slowest_rank_transfer_us", "algorithm_us", "base_us", "stall_us_stop_the_world",
               "spare_buffer_bytes_per_rank")


def move_cost(args, old, new, num_logical: int) -> dict:
    """What moving from `old` to `new` rewrites and costs, from the simulator's rebalance
    model (`epsim.eplb.rebalance_cost`, stop-the-world, all layers in one chunk)."""
    changed = int(new.changed_slots(old).sum())
    expert_bytes, model = _expert_bytes(args, num_logical)
    if expert_bytes is None:
        args.unpriced = model                       # why: a note under the result
    out = {"from": "--previous" if args.previous else "trivial (experts in order, redundant slots "
                                                       "repeating experts 0, 1, ...)",
           "changed_slots": changed, "total_slots": int(new.physical_to_logical.size),
           "model": model if expert_bytes else None, "expert_bytes": expert_bytes}
    if expert_bytes is None:
        return {**out, **dict.fromkeys(PRICED_KEYS)}
    cluster = ClusterSpec(gpu=args.gpu, num_nodes=args.nodes, gpus_per_node=args.gpus // args.nodes)
    profile = load_profile()
    params = rebalance_params(profile if profile.hardware == args.gpu else None, cluster)
    plan = plan_moves(old, new, expert_bytes=expert_bytes)
    pair = plan.bytes_by_pair()                                           # [ranks, ranks]
    recv, send = pair.sum(axis=0), pair.sum(axis=1)                       # [ranks]
    cost = rebalance_cost(old, new, expert_bytes, params, algorithm=args.algorithm)
    return {**out, "gpu": args.gpu, "moved_bytes": cost.moved_bytes,
            "nvlink_bytes": cost.nvlink_bytes, "rdma_bytes": cost.rdma_bytes,
            "local_copy_bytes": plan.num_local_copies * expert_bytes,
            "recv_bytes_per_rank": recv.tolist(), "send_bytes_per_rank": send.tolist(),
            "slowest_rank": int(cost.chunk_slowest_rank[0]),
            "slowest_rank_transfer_us": float(cost.chunk_us[0]),
            "algorithm_us": cost.algorithm_us, "base_us": cost.base_us,
            "stall_us_stop_the_world": cost.stall_us,
            "spare_buffer_bytes_per_rank": cost.spare_buffer_bytes}


def _cost_lines(cost: dict) -> list[str]:
    lines = [f"rebalance from {cost['from']}: {cost['changed_slots']} of {cost['total_slots']} "
             f"slots change"]
    if cost["expert_bytes"] is None:
        return lines
    recv = cost["recv_bytes_per_rank"]
    lines += [
        f"  rewrites   {size(cost['moved_bytes'])} ({cost['model']}, {size(cost['expert_bytes'])} "
        f"per expert): {size(cost['nvlink_bytes'])} over NVLink, {size(cost['rdma_bytes'])} over "
        f"RDMA, {size(cost['local_copy_bytes'])} copied on the same GPU ({cost['gpu']} links)",
        f"  per rank   received max {size(max(recv))}, mean {size(sum(recv) / len(recv))}",
        f"  slowest    rank {cost['slowest_rank']}: {duration(cost['slowest_rank_transfer_us'])} "
        f"to move every layer",
        f"  stall      {duration(cost['stall_us_stop_the_world'])} with stop-the-world (transfers "
        f"+ algorithm {duration(cost['algorithm_us'])} + fixed {duration(cost['base_us'])})"]
    return lines


def scale_free(loads: np.ndarray) -> np.ndarray:
    """Loads `[layers, experts]` scaled by a power of two so that the largest lies in [0.5, 1):
    a placement depends on the loads' shares, not their unit (x1e-50 used to give balancedness
    0.13 instead of 0.98, x1e40 an overflow). A power of two scales every value exactly, so
    loads already in range place as before, bit for bit; all-zero loads stay zero."""
    top = float(loads.max()) if loads.size else 0.0
    if not top > 0:
        return loads
    return np.ldexp(loads, -int(np.frexp(top)[1]))


def run(args):
    out = check_output_dir(args.out) if args.out else None      # checked before the work
    loads = read_loads(_loads_path(args))                                   # [layers, experts]
    num_layers, num_logical = loads.shape
    previous = _previous(args.previous, num_logical) if args.previous else None
    if not args.no_budget_check:
        check_eplb(args.algorithm, num_layers, args.replicas, args.gpus)
    recorded, loads = loads, scale_free(loads)       # placed by shares; exported as recorded
    placement = compute_placement(args.algorithm, loads, args.replicas, args.groups, args.nodes,
                                  args.gpus, previous=previous)
    start = previous if previous is not None else Placement.from_physical_to_logical(
        contiguous_placement(num_layers, num_logical, args.gpus, args.replicas - num_logical),
        num_logical, args.gpus, args.nodes)
    idle = ~loads.any(axis=1)                                               # [layers]
    if idle.any():                # nothing recorded: the layer keeps its placement (as the
        p2l = placement.physical_to_logical.copy()        # simulator's rebalance does)
        p2l[idle] = start.physical_to_logical[idle]
        placement = Placement.from_physical_to_logical(p2l, num_logical, args.gpus, args.nodes)
    after = placement.balancedness(loads)                                   # [layers]
    before = None
    if num_logical % args.gpus == 0:
        before = Placement.contiguous(num_layers, num_logical, args.gpus, args.nodes).balancedness(loads)
    changed = placement.changed_slots(previous) if previous is not None else None
    cost = move_cost(args, start, placement, num_logical)
    data = {"algorithm": args.algorithm, "num_layers": num_layers, "num_logical": num_logical,
            "balancedness_before": None if before is None else before.tolist(),
            "balancedness_after": after.tolist(), **placement.to_dict(), "rebalance": cost}
    if changed is not None:
        data["changed_slots"] = changed.tolist()
    lines = [f"algorithm: {_policy(args)}",
             f"layers {num_layers}, logical experts {num_logical}, physical slots {args.replicas} "
             f"({placement.num_redundant} redundant), GPUs {args.gpus} ({placement.slots_per_rank} "
             f"slots each), nodes {args.nodes}"]
    if before is None:
        lines.append(f"balancedness before: n/a (experts {num_logical} do not divide over "
                     f"{args.gpus} GPUs without redundancy)")
    else:
        lines.append(f"balancedness before (contiguous, no redundancy): mean {before.mean():.4f}, "
                     f"worst layer {before.min():.4f}  (busiest GPU {1 / before.min():.2f}x mean)")
    lines.append(f"balancedness after: mean {after.mean():.4f}, worst layer {after.min():.4f}  "
                 f"(busiest GPU {1 / after.min():.2f}x mean)")
    if changed is not None:
        lines.append(f"changed slots vs previous: {int(changed.sum())} of "
                     f"{placement.physical_to_logical.size}")
    lines += _cost_lines(cost)
    notes = [f"rebalance cost: {args.unpriced}"] if cost["expert_bytes"] is None else []
    files = []
    if out is not None:
        summary = {k: v for k, v in data.items() if k not in ("phy2log", "log2phy", "logcnt")}
        files = write_placement(out, placement, recorded, summary)
        lines.append(f"for SGLang: --init-expert-location {out / EXPERT_LOCATION_FILE} (with "
                     f"--ep-size {args.gpus} --ep-num-redundant-experts {placement.num_redundant})")
    else:
        lines.append("maps (phy2log, log2phy, logcnt): --out DIR writes them, with the file SGLang's "
                     "--init-expert-location reads; --json prints them")
    return Report(data, lines, files=files, notes=notes)
