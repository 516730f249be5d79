"""The live backends' dispatch + combine against a raw `all_to_all_single` of the same bytes.

Issue #18's target: the live `torch` backend within 1.3x of NCCL moving the same bytes, from 1
to 4096 tokens per rank; next to it DeepEP and Mooncake where they are installed. Per point
(hidden size, tokens per rank), on the same ranks and routing (uniform top-k over the experts,
drawn by `epsim.routing`), each path of `PATHS`:

- `path_us`: the backend's dispatch and combine (communication only: the received rows go
  straight back), iterations launched back to back, wall time per iteration from CUDA events
  around the loop (host overhead included, as a serving engine pays it in eager mode);
- `graph_us` (paths without a host sync: `static`, `deepep_ll`, `mooncake`): the same round
  trip replayed from a CUDA graph, i.e. device time;
- `raw_us`: `all_to_all_single` of the rows that path sends and back, splits known ahead — the
  library floor for those bytes (`rows_sent`: one per (token, rank) for `normal` and `deepep`,
  `ranks * tokens` padded rows for `static`, one per (token, expert) pair for the low-latency
  kernels); `ratio` = path / raw, `graph_ratio` = graph / raw.

Points whose buffers would not fit (an upper bound by arithmetic, `path_bytes`, against 80% of
the GPU's memory) or that start after `--budget-s` are listed as skipped, with the reason; so
are paths whose library is missing (`deepep` needs a DeepEP build, `mooncake` its wheel).

    python benchmarks/torch_a2a_vs_nccl.py --gpus 2 --hidden 4096 7168 \\
        --tokens 1 4 16 64 256 1024 4096 16384 --out benchmarks/results/a2a_h200x2
    python benchmarks/torch_a2a_vs_nccl.py --cpu --gpus 2 --out /tmp/a2a    # gloo dry run
    python benchmarks/torch_a2a_vs_nccl.py --cpu --gpus 1 --hidden 4096 --tokens 256 4096 \\
        --paths static --out /tmp/a2a_cpu      # CPU micro-benchmark of the layout's own passes
    python benchmarks/torch_a2a_vs_nccl.py --dry-run --out /tmp/plan        # the plan, no ranks

On one rank the exchange is a copy, so the CPU micro-benchmark times the layout's gathers and
sums (host time on that CPU; numbers of a shared machine are noisy). Writes `results.jsonl` (one
line per point and path, appended as each point finishes) and `table.md` to `--out`.
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
# name: (backend, mode, rows sent per token: "rank" | "padded" | "pair", CUDA-graph capturable)
PATHS = {"normal": ("torch", "normal", "rank", False),
         "static": ("torch", "static", "padded", True),
         "deepep": ("deepep", "normal", "rank", False),
         "deepep_ll": ("deepep", "low_latency", "pair", True),
         "mooncake": ("mooncake", "normal", "pair", True)}
LOW_LATENCY_MAX_TOKENS = 1024     # default cap: low-latency buffers grow with experts x tokens
MEMORY_FRAC = 0.8


def path_bytes(path: str, tokens: int, hidden: int, ranks: int, experts: int,
               ll_max_tokens: int = LOW_LATENCY_MAX_TOKENS) -> int:
    """Upper bound of the device bytes one rank holds for a path at a point, by arithmetic
    (2 bytes per element): the torch layouts hold about eight `[ranks * tokens, H]` buffers
    (send, receive, the way back, a gather, the raw exchange's two, a CUDA graph's pool);
    the low-latency kernels, sized once for `ll_max_tokens`, a receive and a send buffer of
    `[experts, ll_max_tokens, H]` each way (DeepEP's and Mooncake's size hints are of that
    order); DeepEP normal its NVLink buffer (under 2 GiB here) plus the torch layout's."""
    rows = ranks * tokens * hidden * 2
    if PATHS[path][2] == "pair":
        return 4 * experts * ll_max_tokens * hidden * 2 + 4 * rows
    return 8 * rows + (2 << 30 if path == "deepep" else 0)


def plan(hiddens: list[int], tokens: list[int], paths: list[str], ranks: int, experts: int,
         memory_bytes: int | None, ll_max_tokens: int = LOW_LATENCY_MAX_TOKENS) -> list[dict]:
    """Every (hidden, tokens, path) in run order, with `skip` = why it is not run ("" if it is).
    The largest hidden size runs first, so the libraries' buffers (kept per process, rebuilt
    only to grow) are allocated once.

    Args:
        memory_bytes: device memory per GPU (None: no check, as on CPU ranks).
    """
    out = []
    for hidden in sorted(set(hiddens), reverse=True):
        for t in tokens:
            for path in paths:
                need = path_bytes(path, t, hidden, ranks, experts, ll_max_tokens)
                skip = ""
                if PATHS[path][2] == "pair" and t > ll_max_tokens:
                    skip = f"tokens ({t}) above --ll-max-tokens ({ll_max_tokens})"
                elif memory_bytes is not None and need > MEMORY_FRAC * memory_bytes:
                    skip = (f"memory: needs up to {need / 2**30:.1f} GiB of "
                            f"{MEMORY_FRAC * memory_bytes / 2**30:.1f} GiB usable")
                out.append({"hidden": hidden, "tokens_per_rank": t, "path": path,
                            "bytes_bound": need, "skip": skip})
    return out


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


def _graph_us(fn, device, iters: int) -> float:
    """The round trip captured once in a CUDA graph and replayed (device time)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return _median_us(graph.replay, device, iters)


def _send_rows(ids, num_local: int, world_size: int, copies: str, tokens: int) -> list[int]:
    """[ranks] rows this rank sends to each rank: one per (token, rank), per pair, or padded."""
    import torch

    from live.backends.base import token_ranks
    from live.backends.packed import send_to_rank

    if copies == "padded":
        return [tokens] * world_size
    slots = torch.as_tensor(ids, dtype=torch.int64)                             # [tokens, top_k]
    if copies == "pair":
        return send_to_rank(slots, num_local, world_size).tolist()
    return token_ranks(slots, num_local, world_size).sum(dim=0).tolist()


def _run_path(path: str, experts: int, ll_max_tokens: int, group, x, ids_t, weights,
              send: list[int], device, iters: int) -> dict:
    """Time one path at one point; `skip` says why it did not run (library or shape limits).
    The low-latency paths keep one buffer for `ll_max_tokens` tokens (as a server sizes it
    for its largest decode batch), so it is not rebuilt per point."""
    import torch
    import torch.distributed as dist

    from live.backends import BackendSpec, make_backend
    from live.errors import LiveError

    name, mode, _, graphable = PATHS[path]
    tokens, hidden = x.shape
    capacity = ll_max_tokens if PATHS[path][2] == "pair" else tokens
    spec = BackendSpec(hidden_size=hidden, num_physical_experts=experts, top_k=ids_t.shape[1],
                       max_tokens_per_rank=capacity, dtype=x.dtype, device=device, mode=mode)
    try:
        backend = make_backend(name, spec, group)
    except LiveError as exc:                   # BackendUnavailableError too: same on every rank
        return {"skip": str(exc)}

    def round_trip():
        dispatched = backend.dispatch(x, ids_t, weights)
        return backend.combine(dispatched.handle.recv_x, dispatched)   # experts left out

    row = {"path_us": _median_us(round_trip, device, iters)}
    counts = torch.tensor(send, dtype=torch.int64, device=device)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=group)
    recv = recv_counts.tolist()
    send_x = x.new_empty((sum(send), hidden))
    recv_x = x.new_empty((sum(recv), hidden))

    def raw():
        dist.all_to_all_single(recv_x, send_x, recv, send, group=group)
        dist.all_to_all_single(send_x, recv_x, send, recv, group=group)

    row.update(raw_us=_median_us(raw, device, iters), rows_sent=int(sum(send)),
               bytes_sent=int(sum(send)) * hidden * x.element_size())
    if graphable and device.type == "cuda":
        if hasattr(backend, "check_active_ranks"):
            backend.check_active_ranks = False     # Mooncake's rank check reads the host
        row["graph_us"] = _graph_us(round_trip, device, iters)
    return row


def worker(rank: int, world_size: int, group, config: dict) -> int:
    """Run the plan's points in order; rank 0 appends each point's slowest-rank rows to
    `results.jsonl` as soon as the point is done (a later failure keeps them)."""
    import torch
    import torch.distributed as dist

    from epsim.routing import skew_from_dict

    cuda = config["device"] == "cuda"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    experts, top_k = config["experts"], config["top_k"]
    skew = skew_from_dict({"kind": "uniform"}, 1, experts, top_k, seed=0)
    deadline = time.monotonic() + config["budget_s"]
    points: dict[tuple[int, int], list[dict]] = {}
    for item in config["plan"]:
        points.setdefault((item["hidden"], item["tokens_per_rank"]), []).append(item)
    done = 0
    for (hidden, tokens), items in points.items():
        go = torch.tensor([int(time.monotonic() < deadline)], device=device)
        dist.broadcast(go, 0, group=group)         # rank 0's clock decides, for every rank
        rng = np.random.default_rng([rank, tokens])
        ids = skew.topk(tokens, rng, 0)
        ids_t = torch.as_tensor(ids, dtype=torch.int64, device=device)
        weights = torch.full(ids.shape, 1.0 / top_k, dtype=torch.float32, device=device)
        x = torch.randn(tokens, hidden, dtype=dtype, device=device)
        iters = max(5, min(100, 20_000 // tokens)) if cuda else 3
        rows = []
        for item in items:
            base = {k: item[k] for k in ("hidden", "tokens_per_rank", "path")}
            if item["skip"] or not go.item():
                rows.append(dict(base, skip=item["skip"] or "budget: started after --budget-s"))
                continue
            send = _send_rows(ids, experts // world_size, world_size, PATHS[item["path"]][2],
                              tokens)
            rows.append(dict(base, **_run_path(item["path"], experts, config["ll_max_tokens"],
                                               group, x, ids_t, weights, send, device, iters)))
        gathered = [None] * world_size
        dist.all_gather_object(gathered, rows, group=group)
        if rank == 0:
            with open(config["results"], "a") as f:
                for i, row in enumerate(rows):
                    f.write(json.dumps(dict(_slowest([g[i] for g in gathered]),
                                            device=config["device_name"], experts=experts,
                                            top_k=top_k)) + "\n")
        done += 1
    return done


def _slowest(rows: list[dict]) -> dict:
    """The slowest rank sets the pace: each time the max over ranks, ratios of those maxima."""
    out = dict(rows[0])
    for key in ("path_us", "raw_us", "graph_us"):
        if key in out:
            out[key] = max(r[key] for r in rows)
    if "path_us" in out:
        out["ratio"] = out["path_us"] / out["raw_us"]
    if "graph_us" in out:
        out["graph_ratio"] = out["graph_us"] / out["raw_us"]
    return out


def table(rows: list[dict], device: str) -> str:
    lines = [f"# Live dispatch + combine vs raw all_to_all_single ({device})", "",
             "Median µs per dispatch + combine (communication only), slowest rank; `ratio` = "
             f"path / raw of the same bytes (target <= {TARGET_RATIO}); CUDA graph: device "
             "time.", "",
             "| hidden | tokens/rank | path | rows sent | path µs | raw µs | ratio | "
             "CUDA graph µs | graph ratio |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    skipped: dict[tuple[str, int, str], list[int]] = {}     # (path, hidden, why) -> tokens
    for r in rows:
        if r.get("skip"):
            skipped.setdefault((r["path"], r["hidden"], r["skip"]), []).append(r["tokens_per_rank"])
            continue
        graph = (f"{r['graph_us']:.1f} | {r['graph_ratio']:.2f}" if "graph_us" in r else "- | -")
        lines.append(f"| {r['hidden']} | {r['tokens_per_rank']} | {r['path']} | {r['rows_sent']} | "
                     f"{r['path_us']:.1f} | {r['raw_us']:.1f} | {r['ratio']:.2f} | {graph} |")
    if skipped:
        lines += ["", "Not run:", ""] + [
            f"- {path} at hidden {hidden}, tokens/rank {', '.join(map(str, tokens))}: {why}"
            for (path, hidden, why), tokens in skipped.items()]
    return "\n".join(lines) + "\n"


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < 1:
            raise argparse.ArgumentTypeError(f"{name} ({text}) must be an integer >= 1")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--gpus", type=_positive("--gpus"), default=2, help="ranks (one per GPU)")
    parser.add_argument("--cpu", action="store_true", help="gloo ranks on CPU (a dry run)")
    parser.add_argument("--dry-run", action="store_true",
                        help="write the plan (points, paths, memory bounds, skips); run nothing")
    parser.add_argument("--tokens", type=_positive("--tokens"), nargs="+", default=list(TOKENS),
                        help="tokens per rank to sweep (default 1..4096)")
    parser.add_argument("--hidden", type=_positive("--hidden"), nargs="+", default=None,
                        help="hidden sizes (default 4096; 64 with --cpu)")
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS),
                        help="paths to time (default all; missing libraries are listed as skipped)")
    parser.add_argument("--experts", type=_positive("--experts"), default=128, help="experts (default 128)")
    parser.add_argument("--top-k", type=_positive("--top-k"), default=8, help="experts per token (default 8)")
    parser.add_argument("--ll-max-tokens", type=_positive("--ll-max-tokens"),
                        default=LOW_LATENCY_MAX_TOKENS,
                        help=f"most tokens per rank for the low-latency paths (default {LOW_LATENCY_MAX_TOKENS})")
    parser.add_argument("--budget-s", type=float, default=600.0,
                        help="no point starts after this many seconds (default 600)")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.jsonl, table.md")
    args = parser.parse_args(argv)
    if args.experts % args.gpus:
        parser.error(f"--experts ({args.experts}) must be divisible by --gpus ({args.gpus})")
    if args.top_k > args.experts:
        parser.error(f"--top-k ({args.top_k}) must be <= --experts ({args.experts})")
    if not args.budget_s >= 0:
        parser.error(f"--budget-s ({args.budget_s}) must be >= 0")
    cuda = not args.cpu and not args.dry_run
    hiddens = args.hidden or ([4096] if not args.cpu else [64])
    args.out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        items = plan(hiddens, args.tokens, args.paths, args.gpus, args.experts,
                     141 * 10**9, args.ll_max_tokens)            # an H200's memory
        (args.out / "plan.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
        print(f"{len(items)} path points, {sum(not i['skip'] for i in items)} to run; "
              f"plan in {args.out / 'plan.jsonl'}")
        return 0

    import torch

    from live.dist import run_ranks

    if cuda and torch.cuda.device_count() < args.gpus:
        print(f"torch_a2a_vs_nccl: error: --gpus ({args.gpus}) must be <= the visible GPUs "
              f"({torch.cuda.device_count()}); use --cpu for a gloo dry run", file=sys.stderr)
        return 2
    memory = torch.cuda.get_device_properties(0).total_memory if cuda else None
    device = (f"{args.gpus}x {torch.cuda.get_device_name(0)}, torch {torch.__version__}" if cuda
              else f"{args.gpus}x cpu (gloo), torch {torch.__version__}")
    results = args.out / "results.jsonl"
    results.write_text("")
    config = {"device": "cuda" if cuda else "cpu", "device_name": device,
              "plan": plan(hiddens, args.tokens, args.paths, args.gpus, args.experts, memory,
                           args.ll_max_tokens),
              "experts": args.experts, "top_k": args.top_k, "budget_s": args.budget_s,
              "ll_max_tokens": args.ll_max_tokens,
              "results": str(results)}
    run_ranks(worker, args.gpus, "nccl" if cuda else "gloo", (config,), timeout_s=900)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    text = table(rows, device)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
