"""A GPU serving host's CPU side, timed: what `epsim.cost.scheduler_host` prices from our VM.

    python serving_host_gpu.py --out "$OUT"     # on a GPU machine; writes serving_host.json

The scheduler's exposed host time (overlap scheduling off, and every speculative cycle) is priced
from two figures measured on our harness's VM, not on a GPU serving host: one eager launch's host
time (`any/block_ops/host` per launch, 29.3 µs) and one gloo message (`monitored_barrier`
between two local ranks, 107.7 µs). This times, on the host of a GPU machine (torch only):

  launch        host time to issue one small eager CUDA op (`x.add_(1)` on 8 floats), the
                fastest of 21 bursts of 200, GPU work excluded (issue only)
  h2d_tensor    `torch.tensor(list_of_6, device="cuda")` (the DP-info / positions uploads)
  readback      `.tolist()` of a 2-element CUDA tensor after the stream is idle (a read-back)
  gloo          per collective over n local ranks (n = 2, 8, 16 processes, gloo over TCP on
                localhost), 6 x int64 `all_gather_into_tensor`, 1 x int64 `broadcast` and
                `all_reduce`, and `monitored_barrier` (the profile's measure): median and min of
                200 after 20 warm-up, rank 0's clock; per message = time / gloo's message count
                (ring all-gather n - 1, binomial broadcast ceil(log2 n), ring all-reduce
                2 (n - 1))
  concat        SGLang 0.4.9's `init_incremental_detokenize` list concatenation at 65,536 +
                2,048 tokens on this CPU (benchmarks/lmsys_plain_host.py times it on the VM)

Messages between two nodes (TCP over the hosts' network) are not reproducible on one host; the
localhost figures are a floor for them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RANKS = (2, 8, 16)
ITERS, WARMUP = 200, 20
HOPS = {"all_gather": lambda n: n - 1, "broadcast": lambda n: math.ceil(math.log2(n)),
        "all_reduce": lambda n: 2 * (n - 1)}


def fastest_per_call_us(fn, bursts: int = 21, calls: int = 200) -> float:
    best = float("inf")
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def cuda_host() -> dict:
    """Host time of an eager launch, a small upload and a read-back (µs)."""
    x = torch.zeros(8, device="cuda")
    small = torch.zeros(2, dtype=torch.int64, device="cuda")
    for _ in range(2000):
        x.add_(1)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(21):          # issue only: the GPU runs far behind 200 tiny kernels' issue
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            x.add_(1)
        best = min(best, (time.perf_counter() - t0) / 200)
        torch.cuda.synchronize()
    torch.cuda.synchronize()
    h2d = fastest_per_call_us(lambda: torch.tensor([2, 1, 2, 0, 0, 0], device="cuda"), 11, 100)
    torch.cuda.synchronize()
    readback = fastest_per_call_us(lambda: small.tolist(), 11, 100)
    return {"launch_us": best * 1e6, "h2d_tensor_us": h2d, "readback_us": readback,
            "device": torch.cuda.get_device_name()}


def concat_us() -> float:
    rng = random.Random(0)
    prompt = [rng.randrange(1000, 129280) for _ in range(65536)]
    output = [rng.randrange(1000, 129280) for _ in range(2048)]
    return fastest_per_call_us(lambda: (prompt + output)[65531:], 41, 20)


def _worker(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    info = torch.tensor([2, 1, 2, 0, 0, 0], dtype=torch.int64)
    gathered = torch.empty(world * 6, dtype=torch.int64)
    one = torch.zeros(1, dtype=torch.int64)
    ops = {"all_gather": lambda: dist.all_gather_into_tensor(gathered, info),
           "broadcast": lambda: dist.broadcast(one, src=0),
           "all_reduce": lambda: dist.all_reduce(one),
           "monitored_barrier": lambda: dist.monitored_barrier()}
    out = {}
    for name, op in ops.items():
        times = []
        for i in range(WARMUP + ITERS):
            dist.barrier()
            t0 = time.perf_counter()
            op()
            if i >= WARMUP:
                times.append(time.perf_counter() - t0)
        times.sort()
        out[name] = {"median_us": times[len(times) // 2] * 1e6, "min_us": times[0] * 1e6}
    if rank == 0:
        queue.put(out)
    dist.barrier()
    dist.destroy_process_group()


def gloo(world: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    out = queue.get(timeout=200)
    for p in procs:
        p.join(timeout=60)
    for name, hops in HOPS.items():
        out[name]["messages"] = hops(world)
        out[name]["per_message_us"] = out[name]["median_us"] / hops(world)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = {"platform": platform.platform(), "processor": platform.processor(),
              "cpus": os.cpu_count(), "torch": torch.__version__,
              "python": platform.python_version(), "iters": ITERS}
    result["cuda"] = cuda_host() if torch.cuda.is_available() else None
    result["concat_us"] = concat_us()
    result["gloo"] = {}
    for world in RANKS:
        if world <= (os.cpu_count() or 1):
            result["gloo"][str(world)] = gloo(world)
            print(world, json.dumps(result["gloo"][str(world)]), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "serving_host.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "gloo"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
