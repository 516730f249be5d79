"""The live `torch` backend's dispatch + combine against a raw `all_to_all_single` of the same bytes.

Issue #18's target: the live `torch` backend within 1.3x of NCCL moving the same bytes, from 1
to 4096 tokens per rank. Three timings per token count, side by side in one run, on the same
ranks and routing (uniform top-k over the experts, drawn by `epsim.routing`):

- `raw`: `all_to_all_single` of the dispatch's token rows and back (the combine's rows), with
  the split sizes known ahead — the library floor for these bytes;
- `normal`: the backend's exact layout (uneven splits, counts through the host);
- `static`: its static layout (equal splits of `max_tokens_per_rank` rows per rank, no host
  sync), against a raw exchange of *its* bytes (the padded rows).

Each is the median over iterations launched back to back, wall time per iteration measured
with CUDA events around the whole loop (host overhead included, as a serving engine pays it in
eager mode), plus for `static` the same loop replayed from a CUDA graph (device time).

    python benchmarks/torch_a2a_vs_nccl.py --gpus 2 --out benchmarks/results/torch_a2a_vs_nccl_h200x2
    python benchmarks/torch_a2a_vs_nccl.py --cpu --gpus 2 --out /tmp/a2a   # gloo dry run (numbers mean nothing)

Writes `results.jsonl` (one line per token count and path) and `table.md` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

TOKENS = (1, 4, 16, 64, 256, 1024, 4096)
TARGET_RATIO = 1.3


def _timer(device):
    """Returns (start, stop -> seconds) around a region, CUDA events on GPU."""
    import torch

    if device.type == "cuda":
        def start():
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev

        def stop(ev):
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return ev.elapsed_time(end) / 1e3
        return start, stop
    return time.perf_counter, lambda t0: time.perf_counter() - t0


def _median_us(fn, device, iters: int, repeats: int = 5) -> float:
    """Median over `repeats` of the mean wall time per call of `iters` back-to-back calls."""
    import torch.distributed as dist

    start, stop = _timer(device)
    fn()                                                    # warm-up
    samples = []
    for _ in range(repeats):
        dist.barrier()
        t0 = start()
        for _ in range(iters):
            fn()
        samples.append(stop(t0) / iters * 1e6)
    return statistics.median(samples)


def worker(rank: int, world_size: int, group, args: dict) -> list[dict]:
    import torch
    import torch.distributed as dist

    from epsim.routing import skew_from_dict
    from live.backends import BackendSpec, make_backend

    cuda = args["device"] == "cuda"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    hidden, experts, top_k = args["hidden"], args["experts"], args["top_k"]
    skew = skew_from_dict({"kind": "uniform"}, 1, experts, top_k, seed=0)
    rows = []
    for tokens in args["tokens"]:
        rng = np.random.default_rng([rank, tokens])
        ids = torch.as_tensor(skew.topk(tokens, rng, 0), dtype=torch.int64, device=device)
        weights = torch.full(ids.shape, 1.0 / top_k, dtype=torch.float32, device=device)
        x = torch.randn(tokens, hidden, dtype=dtype, device=device)
        iters = max(5, min(200, 20_000 // tokens)) if cuda else 3
        for mode in ("normal", "static"):
            spec = BackendSpec(hidden_size=hidden, num_physical_experts=experts, top_k=top_k,
                               max_tokens_per_rank=tokens, dtype=dtype, device=device, mode=mode)
            backend = make_backend("torch", spec, group)

            def round_trip():
                dispatched = backend.dispatch(x, ids, weights)
                # experts left out (communication only): send the received rows back
                return backend.combine(dispatched.handle.recv_x, dispatched)

            path_us = _median_us(round_trip, device, iters)
            # the same bytes through a raw all_to_all_single, splits known ahead
            dispatched = backend.dispatch(x, ids, weights)
            handle = dispatched.handle
            if mode == "normal":
                send, recv = handle.send_splits, handle.recv_splits
            else:
                send = recv = [tokens] * world_size
            send_x = x.new_empty((sum(send), hidden))
            recv_x = x.new_empty((sum(recv), hidden))

            def raw():
                dist.all_to_all_single(recv_x, send_x, recv, send, group=group)
                dist.all_to_all_single(send_x, recv_x, send, recv, group=group)

            raw_us = _median_us(raw, device, iters)
            row = {"tokens_per_rank": tokens, "mode": mode, "path_us": path_us, "raw_us": raw_us,
                   "ratio": path_us / raw_us, "rows_sent": int(sum(send)),
                   "bytes_sent": int(sum(send)) * hidden * x.element_size()}
            if cuda and mode == "static":
                # no host sync inside: the round trip captures in a CUDA graph (device time)
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    round_trip()
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    round_trip()
                row["graph_us"] = _median_us(graph.replay, device, iters)
            rows.append(row)
    gathered = [None] * world_size
    dist.all_gather_object(gathered, rows, group=group)
    if rank != 0:
        return []
    out = []          # the slowest rank sets the pace
    for i, row in enumerate(rows):
        slowest = max((g[i] for g in gathered), key=lambda r: r["path_us"])
        out.append(dict(slowest, raw_us=max(g[i]["raw_us"] for g in gathered),
                        ratio=slowest["path_us"] / max(g[i]["raw_us"] for g in gathered)))
    return out


def table(rows: list[dict], device: str) -> str:
    lines = [f"# torch backend vs raw all_to_all_single ({device})", "",
             "Median µs per dispatch + combine (communication only), slowest rank; `ratio` = "
             f"path / raw of the same bytes (target <= {TARGET_RATIO}).", "",
             "| tokens/rank | mode | rows sent | path µs | raw µs | ratio | CUDA graph µs |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        graph = f"{r['graph_us']:.1f}" if "graph_us" in r else "-"
        lines.append(f"| {r['tokens_per_rank']} | {r['mode']} | {r['rows_sent']} | "
                     f"{r['path_us']:.1f} | {r['raw_us']:.1f} | {r['ratio']:.2f} | {graph} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--gpus", type=int, default=2, help="ranks (one per GPU; >= 1)")
    parser.add_argument("--cpu", action="store_true", help="gloo ranks on CPU (a dry run)")
    parser.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS),
                        help="tokens per rank to sweep (default 1..4096)")
    parser.add_argument("--hidden", type=int, default=4096, help="hidden size (default 4096)")
    parser.add_argument("--experts", type=int, default=128, help="experts (default 128)")
    parser.add_argument("--top-k", type=int, default=8, help="experts per token (default 8)")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.jsonl, table.md")
    args = parser.parse_args(argv)
    if args.gpus < 1:
        parser.error(f"--gpus ({args.gpus}) must be >= 1")

    import torch

    from live.dist import run_ranks

    cuda = not args.cpu
    if cuda and torch.cuda.device_count() < args.gpus:
        print(f"torch_a2a_vs_nccl: error: --gpus ({args.gpus}) must be <= the visible GPUs "
              f"({torch.cuda.device_count()}); use --cpu for a gloo dry run", file=sys.stderr)
        return 2
    hidden = args.hidden if cuda else min(args.hidden, 64)
    config = {"device": "cuda" if cuda else "cpu", "tokens": args.tokens, "hidden": hidden,
              "experts": args.experts, "top_k": args.top_k}
    rows = run_ranks(worker, args.gpus, "nccl" if cuda else "gloo", (config,), timeout_s=900)[0]
    device = (f"{args.gpus}x {torch.cuda.get_device_name(0)}, torch {torch.__version__}" if cuda
              else f"{args.gpus}x cpu (gloo) — a dry run, numbers mean nothing")
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "results.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(dict(row, device=device, hidden=hidden, experts=args.experts,
                                    top_k=args.top_k)) + "\n")
    text = table(rows, device)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
