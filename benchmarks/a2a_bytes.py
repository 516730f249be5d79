"""Memory traffic of the `torch` backend's dispatch + combine, counted op by op (no GPU needed).

Times on a shared CPU say little about a GPU; the bytes each pass moves do. Every aten op of one
round trip (dispatch, then combine of the received rows, as `benchmarks/torch_a2a_vs_nccl.py`
times it) is intercepted on real gloo ranks (`TorchDispatchMode`) and tallied:

- written: bytes of each result that is new memory, or of the argument an in-place / `out=` op
  writes (`copy_`, `index_copy_`, `scatter_`, `fill_`, `zero_`);
- read: bytes of the tensor arguments of those ops (an upper bound: a gather reads only the
  rows it picks, which at these sizes is about all of them).

Views (`view`, `slice`, `expand`, ...) and allocations (`empty`, `new_empty`, `empty_like`)
move nothing and are left out; filled allocations (`zeros`, `new_full`, ...) write and read
nothing. The collectives do not pass through the dispatcher: `torch.distributed.all_to_all_single`
and its tensor forms of all-gather and reduce-scatter are wrapped instead: the bytes they
receive are listed apart (`exchange`), the floor a raw exchange of the same rows also pays, and
whatever the library does on the calling thread meanwhile (gloo copies) counts with them. Bytes
are per rank; the largest rank is reported.
Deterministic: same arguments, same counts, on any machine.

    python benchmarks/a2a_bytes.py --hidden 4096 --tokens 256 4096 --out benchmarks/results/a2a_bytes

Writes `bytes.jsonl` (one line per point, mode and op) and `table.md` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

COLLECTIVES = ("all_to_all_single", "all_gather_single", "all_gather_into_tensor",
               "reduce_scatter_single", "reduce_scatter_tensor")
ALLOCATIONS = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"}
FILLED = {"zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros",
          "new_ones", "new_full", "arange", "scalar_tensor"}      # write their result, read nothing


def _tally(fn) -> dict[str, list[int]]:
    """{aten op: [calls, bytes written, bytes read]} of running `fn()` once."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    inside = []                                 # non-empty while a collective runs

    def tensors(values):
        for v in values:
            if isinstance(v, torch.Tensor):
                yield v
            elif isinstance(v, (list, tuple)):
                yield from tensors(v)

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if inside:
                return out
            schema = func._schema
            written = [a for a, spec in zip(list(args) + list(kwargs.values()), schema.arguments)
                       if isinstance(a, torch.Tensor) and spec.alias_info is not None
                       and spec.alias_info.is_write]
            inputs = list(tensors(list(args) + list(kwargs.values())))
            storages = {t.untyped_storage().data_ptr() for t in inputs}
            fresh = [t for t in tensors(out if isinstance(out, (list, tuple)) else [out])
                     if t.untyped_storage().data_ptr() not in storages]
            name = func.__name__.split(".")[0]
            if (not written and not fresh) or name in ALLOCATIONS:
                return out                                   # a view or bare memory: nothing moves
            row = ops[name]
            row[0] += 1
            row[1] += sum(t.nbytes for t in written + fresh)
            if name not in FILLED:
                row[2] += sum(t.nbytes for t in inputs if all(t is not w for w in written))
            return out

    import torch.distributed as dist

    def counted(name, plain):
        def call(output, input, *args, **kwargs):
            row = ops[name]
            row[0] += 1
            row[1] += output.nbytes
            inside.append(name)
            try:
                return plain(output, input, *args, **kwargs)
            finally:
                inside.pop()
        return call

    plain = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}
    for name, fn_ in plain.items():
        setattr(dist, name, counted(name, fn_))
    try:
        with Counter():
            fn()
    finally:
        for name, fn_ in plain.items():
            setattr(dist, name, fn_)
    return dict(ops)


def worker(rank: int, world_size: int, group, config: dict) -> list[dict]:
    import torch

    from epsim.routing import skew_from_dict
    from live.backends import BackendSpec, make_backend

    experts, top_k, hidden = config["experts"], config["top_k"], config["hidden"]
    dtype = getattr(torch, config["dtype"])
    skew = skew_from_dict({"kind": "uniform"}, 1, experts, top_k, seed=0)
    out = []
    for tokens in config["tokens"]:
        ids = torch.as_tensor(skew.topk(tokens, np.random.default_rng([rank, tokens]), 0))
        weights = torch.full(ids.shape, 1.0 / top_k)
        x = torch.randn(tokens, hidden).to(dtype)
        for mode in config["modes"]:
            spec = BackendSpec(hidden_size=hidden, num_physical_experts=experts, top_k=top_k,
                               max_tokens_per_rank=tokens, dtype=dtype, mode=mode)
            backend = make_backend("torch", spec, group)

            def round_trip():
                dispatched = backend.dispatch(x, ids, weights)
                return backend.combine(dispatched.handle.recv_x, dispatched)

            round_trip()                                     # same work as the timed loop
            for op, (calls, written, read) in sorted(_tally(round_trip).items()):
                out.append({"tokens_per_rank": tokens, "mode": mode, "op": op, "calls": calls,
                            "written_bytes": written, "read_bytes": read,
                            "exchange": op in COLLECTIVES})
    return out


def summarize(per_rank: list[list[dict]], hidden: int, bytes_per_elem: int) -> list[dict]:
    """Per (tokens, mode): the largest rank's layout bytes (read + written outside the
    collectives) and ops, the bytes its collectives received, and the layout bytes in units of
    one `[ranks * tokens, H]` pass."""
    totals: dict[tuple[int, str], dict] = {}
    for rank_rows in per_rank:
        mine: dict[tuple[int, str], dict] = {}
        for r in rank_rows:
            key = (r["tokens_per_rank"], r["mode"])
            row = mine.setdefault(key, {"tokens_per_rank": key[0], "mode": key[1],
                                        "layout_bytes": 0, "layout_ops": 0, "exchange_bytes": 0})
            if r["exchange"]:
                row["exchange_bytes"] += r["written_bytes"]
            else:
                row["layout_bytes"] += r["written_bytes"] + r["read_bytes"]
                row["layout_ops"] += r["calls"]
        for key, row in mine.items():
            if key not in totals or row["layout_bytes"] > totals[key]["layout_bytes"]:
                totals[key] = row
    for row in totals.values():
        unit = len(per_rank) * row["tokens_per_rank"] * hidden * bytes_per_elem
        row["layout_passes"] = row["layout_bytes"] / unit
    return sorted(totals.values(), key=lambda r: (r["tokens_per_rank"], r["mode"]))


def table(rows: list[dict], header: str) -> str:
    lines = [f"# torch backend: bytes moved per dispatch + combine ({header})", "",
             "Per rank (the largest), counted op by op (benchmarks/a2a_bytes.py). `layout`: bytes "
             "read and written by everything but the collectives; `passes`: layout bytes over one "
             "`[ranks * tokens, H]` tensor; `exchange`: bytes the collectives write.", "",
             "| tokens/rank | mode | layout ops | layout MB | passes | exchange MB |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['tokens_per_rank']} | {r['mode']} | {r['layout_ops']} | "
                     f"{r['layout_bytes'] / 1e6:.1f} | {r['layout_passes']:.1f} | "
                     f"{r['exchange_bytes'] / 1e6:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--ranks", type=int, default=2, help="gloo ranks (default 2)")
    parser.add_argument("--tokens", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--modes", nargs="+", choices=["normal", "static"],
                        default=["normal", "static"])
    parser.add_argument("--out", type=Path, required=True, help="folder for bytes.jsonl, table.md")
    args = parser.parse_args(argv)
    for name in ("ranks", "hidden", "experts", "top_k"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} ({getattr(args, name)}) must be >= 1")
    if min(args.tokens) < 1:
        parser.error(f"--tokens ({min(args.tokens)}) must be >= 1")
    if args.experts % args.ranks:
        parser.error(f"--experts ({args.experts}) must be divisible by --ranks ({args.ranks})")

    from live.dist import run_ranks

    config = {"tokens": args.tokens, "hidden": args.hidden, "experts": args.experts,
              "top_k": args.top_k, "dtype": args.dtype, "modes": args.modes}
    per_rank = run_ranks(worker, args.ranks, "gloo", (config,), timeout_s=900)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "bytes.jsonl", "w") as f:
        for rank, rows in enumerate(per_rank):
            for row in rows:
                f.write(json.dumps(dict(row, rank=rank)) + "\n")
    rows = summarize(per_rank, args.hidden, 2 if args.dtype == "bfloat16" else 4)
    text = table(rows, f"{args.ranks} ranks, hidden {args.hidden}, {args.experts} experts, "
                       f"top-{args.top_k}, {args.dtype}")
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
