"""The host time of the eager ops SGLang's scheduler loop issues outside the CUDA graph, on a GPU
host: what `epsim.cost.scheduler_host` prices each launch at.

    python serving_loop_ops_gpu.py --out "$OUT"     # on a GPU machine; writes loop_ops.json

`benchmarks/serving_host_gpu.py` timed a minimal eager op (`x.add_(1)` on 8 floats: no output
allocated, no view, no index) at 5.7 µs on an H100 host: a floor. The loop's launches are real
ops with arguments (SGLang 0.4.9-0.5, `event_loop_normal`, DP attention, CUDA-graph decode, a
batch of `BS` requests): these are timed one by one, each as the host time to issue it (the
fastest of 21 bursts of 100 calls, the GPU far behind; every op's device work is tiny):

  clone           `seq_lens.clone()`                          (prepare_for_decode)
  add_            `seq_lens.add_(1)`                          (prepare_for_decode)
  cast            `out_cache_loc.to(torch.int32)`             (prepare_for_decode, replay inputs)
  index_put       `req_to_token[req_pool_indices, seq_lens] = out_cache_loc` (the table write)
  sub_clamp       `torch.clamp(seq_lens - 1, min=0)`          (ForwardBatch.init_new positions)
  slice_copy      `input_ids_buf[:BS].copy_(input_ids)`       (replay_prepare's input copies)
  fill_slice      `seq_lens_buf[BS:].fill_(1)`                (replay_prepare's padding)
  cumsum          `torch.cumsum(seq_lens, 0, dtype=int32)`    (attention metadata)
  argmax          `torch.argmax(logits, -1)`                  (greedy sampler)
  softmax         `torch.softmax(logits, -1)`                 (sampler)
  arange          `torch.arange(BS, device="cuda")`           (tree / verify indices)
  full            `torch.full((BS,), 2, device="cuda")`       (draft token counts)

and their mean (`mean_us`): one launch of the loop, what `launch_us` prices. Nothing else is
run; torch only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

BS = 32
BURSTS, CALLS = 21, 100


def issue_us(fn) -> float:
    """Host time to issue one call (µs): the fastest burst's mean, the GPU running behind."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(BURSTS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        best = min(best, (time.perf_counter() - t0) / CALLS)
    torch.cuda.synchronize()
    return best * 1e6


def ops() -> dict:
    dev = "cuda"
    seq_lens = torch.randint(1000, 2000, (BS,), device=dev)
    req_pool_indices = torch.arange(BS, device=dev)
    out_cache_loc = torch.randint(0, 1 << 20, (BS,), device=dev)
    req_to_token = torch.zeros((BS * 4, 4096), dtype=torch.int32, device=dev)
    small_lens = torch.randint(0, 4000, (BS,), device=dev)
    input_ids = torch.randint(0, 129280, (BS,), device=dev)
    input_ids_buf = torch.zeros(512, dtype=torch.int64, device=dev)
    seq_lens_buf = torch.ones(512, dtype=torch.int64, device=dev)
    logits = torch.randn((BS, 1024), device=dev)
    out32 = out_cache_loc.to(torch.int32)

    def index_put():
        req_to_token[req_pool_indices, small_lens] = out32

    return {
        "clone": lambda: seq_lens.clone(),
        "add_": lambda: seq_lens.add_(0),
        "cast": lambda: out_cache_loc.to(torch.int32),
        "index_put": index_put,
        "sub_clamp": lambda: torch.clamp(seq_lens - 1, min=0),
        "slice_copy": lambda: input_ids_buf[:BS].copy_(input_ids),
        "fill_slice": lambda: seq_lens_buf[BS:].fill_(1),
        "cumsum": lambda: torch.cumsum(seq_lens, 0, dtype=torch.int32),
        "argmax": lambda: torch.argmax(logits, -1),
        "softmax": lambda: torch.softmax(logits, -1),
        "arange": lambda: torch.arange(BS, device=dev),
        "full": lambda: torch.full((BS,), 2, device=dev),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    per_op = {name: issue_us(fn) for name, fn in ops().items()}
    # sub_clamp is two launches (the subtraction, the clamp)
    launches = {name: 2 if name == "sub_clamp" else 1 for name in per_op}
    result = {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
              "python": platform.python_version(), "device": torch.cuda.get_device_name(),
              "date": time.strftime("%Y-%m-%d", time.gmtime()),      # the profile's provenance
              "batch": BS, "bursts": BURSTS, "calls": CALLS, "ops_us": per_op,
              "launches": launches,
              "mean_us": sum(per_op.values()) / sum(launches.values())}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "loop_ops.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
