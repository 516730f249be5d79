"""EPLB weight moves: many tensors in one `batch_isend_irecv` against one large copy of the same bytes.

A rebalance moves each expert's weights (`gate_up_proj` and `down_proj`, two tensors per expert)
between ranks, batched per layer chunk. Timing the same bytes as `n` tensors and as one buffer
separates the two terms of the rebalance-cost model (docs/model.md): a per-transfer overhead
and the wire rate, fitted as

    time_us = base_us + num_transfers * per_transfer_us + bytes / (wire_gbps * 1e3)

by least squares over every (bytes, n) point of one run. Both ranks send to each other at once,
as a swap of experts does; the slower rank's time counts.

    python benchmarks/rebalance_traffic.py --out benchmarks/results/rebalance_traffic_h200x2    # 2 GPUs
    python benchmarks/rebalance_traffic.py --cpu --out /tmp/rt          # gloo dry run (numbers mean nothing)

Writes `records.jsonl` (`p2p_copy` MeasurementRecords with `extra.num_transfers`), `fit.json`
and `table.md` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# one expert of Qwen3-30B-A3B in BF16: gate_up [2*768, 2048] + down [2048, 768] = 9.44 MB
GPU_EXPERT_BYTES = 3 * 2048 * 768 * 2
CPU_EXPERT_BYTES = 3 * 64 * 32 * 4
EXPERTS = (1, 4, 16, 64)          # experts moved per chunk (2 tensors each)


def worker(rank: int, world_size: int, group, args: dict) -> list[dict]:
    import torch
    import torch.distributed as dist

    from live.timing import summarize_us

    cuda = args["device"] == "cuda"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    peer = dist.get_global_rank(group, 1 - dist.get_rank(group))
    records = []
    for num_experts in args["experts"]:
        total = num_experts * args["expert_bytes"]
        for num_transfers in (2 * num_experts, 1):         # per tensor, then one buffer
            size = total // num_transfers
            sends = [torch.empty(size, dtype=torch.uint8, device=device) for _ in range(num_transfers)]
            recvs = [torch.empty_like(t) for t in sends]
            samples = []
            for it in range(args["iters"] + 1):
                dist.barrier(group=group)
                start = time.perf_counter()
                ops = [dist.P2POp(dist.isend, t, peer, group) for t in sends]
                ops += [dist.P2POp(dist.irecv, t, peer, group) for t in recvs]
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
                if cuda:
                    torch.cuda.synchronize(device)
                if it:                                     # the first is a warm-up
                    samples.append((time.perf_counter() - start) * 1e6)
            table = torch.tensor(samples, dtype=torch.float64, device=device if cuda else "cpu")
            dist.all_reduce(table, op=dist.ReduceOp.MAX, group=group)   # the slower rank
            stats = summarize_us(table.cpu().tolist())
            records.append(dict(kind="p2p_copy", backend="p2p", ep_size=2, num_tokens_per_rank=0,
                                hidden_size=0, bytes=float(size * num_transfers),
                                num_iters=args["iters"], **stats,
                                extra={"num_transfers": num_transfers, "transfer_bytes": size,
                                       "transport": f"batch_isend_irecv ({dist.get_backend(group)})",
                                       "direction": "bidirectional, bytes per direction"}))
            del sends, recvs
    return records


def fit(records: list[dict]) -> dict:
    """Least squares of median_us on [1, num_transfers, bytes]; the three terms above."""
    design = np.array([[1.0, r["extra"]["num_transfers"], r["bytes"]] for r in records])
    median_us = np.array([r["median_us"] for r in records])
    (base_us, per_transfer_us, us_per_byte), *_ = np.linalg.lstsq(design, median_us, rcond=None)
    predicted = design @ np.array([base_us, per_transfer_us, us_per_byte])
    return {"base_us": float(base_us), "per_transfer_us": float(per_transfer_us),
            "wire_gbps": float(1e-3 / us_per_byte) if us_per_byte > 0 else float("inf"),
            "mape_pct": float(np.mean(np.abs(predicted / median_us - 1)) * 100),
            "num_points": len(records)}


def table(records: list[dict], coefficients: dict, device: str) -> str:
    lines = [f"# EPLB weight moves: n tensors vs one buffer ({device})", "",
             "| bytes per direction | transfers | median µs | GB/s |", "|---:|---:|---:|---:|"]
    for r in records:
        lines.append(f"| {r['bytes'] / 1e6:.2f} MB | {r['extra']['num_transfers']} | "
                     f"{r['median_us']:.1f} | {r['bytes'] / (r['median_us'] * 1e3):.1f} |")
    lines += ["", f"Fit over {coefficients['num_points']} points: base {coefficients['base_us']:.1f} µs, "
              f"{coefficients['per_transfer_us']:.2f} µs per transfer, wire "
              f"{coefficients['wire_gbps']:.1f} GB/s (MAPE {coefficients['mape_pct']:.1f}%)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--cpu", action="store_true", help="gloo ranks on CPU (a dry run)")
    parser.add_argument("--iters", type=int, default=5, help="timed iterations per point (>= 1)")
    parser.add_argument("--experts", type=int, nargs="+", default=list(EXPERTS),
                        help="experts moved per chunk (default 1 4 16 64)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    args = parser.parse_args(argv)
    if args.iters < 1:
        parser.error(f"--iters ({args.iters}) must be >= 1")

    import torch

    from live.bench.provenance import collect
    from live.dist import run_ranks

    cuda = not args.cpu
    if cuda and torch.cuda.device_count() < 2:
        print(f"rebalance_traffic: error: 2 GPUs needed, {torch.cuda.device_count()} visible; use "
              f"--cpu for a gloo dry run", file=sys.stderr)
        return 2
    config = {"device": "cuda" if cuda else "cpu", "experts": args.experts, "iters": args.iters,
              "expert_bytes": GPU_EXPERT_BYTES if cuda else CPU_EXPERT_BYTES}
    records = run_ranks(worker, 2, "nccl" if cuda else "gloo", (config,), timeout_s=900)[0]
    provenance = collect(2, "nccl" if cuda else "gloo")
    coefficients = fit(records)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "records.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(dict(r, provenance=provenance)) + "\n")
    (args.out / "fit.json").write_text(json.dumps(coefficients, indent=1) + "\n")
    text = table(records, coefficients, provenance["device"])
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
