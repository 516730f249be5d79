"""What the paged allocator's Triton kernels cost a serving process on first use, on a GPU.

`benchmarks/first_use_alloc_aot.py` times the compile of SGLang 0.5.9's `alloc_extend_kernel` and
`alloc_decode_kernel` ahead of time on a CPU: a lower bound of the stall, since the JIT adds its
launcher, the cache and the module's load, and the ranks of a TP server compile at once. This
script times the JIT path itself, on one GPU, with the kernels' source copied unchanged there:

- `cold`: one process, an empty TRITON_CACHE_DIR; each key (kernel, `bs_upper`,
  `max_num_extend_tokens`, `free_pages` 16-byte aligned or not) is launched once (`first_ms`:
  host wall time to a synchronise, compile included) and then `--iters` times (`hot_ms`: the mean
  per call); `stall_ms` = first - hot;
- `parallel`: `--ranks` processes at once over one empty cache dir, each meeting the same keys
  (`--parallel-keys` of them), as the TP ranks of one server do;
- `aot`: the same keys compiled ahead of time for this GPU's target in this process (the AOT
  script's method), the CPU seconds beside which the stalls are read.

Writes `records.jsonl` (one line per phase and key, with GPU, torch, Triton, CPU and the command)
and `table.md` to `--out`.

    python benchmarks/first_use_alloc_gpu.py --out $OUT/alloc_gpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from first_use_alloc_aot import PAGE_SIZE, _kernels, compile_one  # noqa: E402
from first_use_compile_aot import host_provenance  # noqa: E402

# (kernel, bs_upper, max_num_extend_tokens or None, free_pages aligned)
DEFAULT_KEYS = ([("extend", bs, tok, al) for bs in (1, 2, 4, 8) for tok in (4096, 16384)
                 for al in (True, False)]
                + [("decode", bs, None, al) for bs in (4, 8, 16, 32, 64) for al in (True, False)])


def parse_keys(text: str) -> list:
    """`extend:4:4096:1,decode:8:-:0` -> keys; one line naming the bad entry otherwise."""
    keys = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 4 or parts[0] not in ("extend", "decode"):
            raise ValueError(f"--keys entry {item!r}: want extend|decode:BS:TOKENS|-:0|1")
        kind, bs, tok, al = parts
        if not bs.isdigit() or int(bs) < 1 or (bs := int(bs)) & (bs - 1):
            raise ValueError(f"--keys entry {item!r}: BS must be a power of two >= 1")
        if kind == "extend" and (not tok.isdigit() or int(tok) < PAGE_SIZE):
            raise ValueError(f"--keys entry {item!r}: TOKENS must be an integer >= {PAGE_SIZE}")
        if al not in ("0", "1"):
            raise ValueError(f"--keys entry {item!r}: the alignment flag is 0 or 1")
        keys.append((kind, bs, int(tok) if kind == "extend" else None, al == "1"))
    return keys


def format_keys(keys: list) -> str:
    return ",".join(f"{k}:{bs}:{tok if tok else '-'}:{int(al)}" for k, bs, tok, al in keys)


def _launch(kernels, key, torch):
    """A callable that launches the key's kernel once on inputs of its shape."""
    kind, bs_upper, tokens, aligned = key
    extend, decode = kernels
    dev = "cuda"
    bs = bs_upper                                           # next_power_of_2(bs) == bs_upper
    pages = torch.arange(1, 1 << 16, device=dev, dtype=torch.int64)
    free_pages = pages[2:] if aligned else pages[1:]       # an odd int64 offset: 8-byte aligned
    if kind == "extend":
        seq = torch.full((bs,), max(PAGE_SIZE, tokens // (2 * bs)), device=dev, dtype=torch.int64)
        pre = torch.zeros(bs, device=dev, dtype=torch.int64)
        last = torch.full((bs,), -1, device=dev, dtype=torch.int64)
        out = torch.empty(int(seq.sum()), device=dev, dtype=torch.int64)
        return lambda: extend[(bs,)](pre, seq, last, free_pages, out, bs_upper=bs_upper,
                                     page_size=PAGE_SIZE, max_num_extend_tokens=tokens)
    seq = torch.arange(2, bs + 2, device=dev, dtype=torch.int64) * PAGE_SIZE // 2
    last = seq - 2
    out = torch.empty(bs, device=dev, dtype=torch.int64)
    return lambda: decode[(bs,)](seq, last, free_pages, out, bs_upper=bs_upper,
                                 page_size=PAGE_SIZE)


def run_phase(phase: str, keys: list, iters: int) -> list:
    """One process's walk over the keys (this process's TRITON_CACHE_DIR)."""
    import torch
    kernels = _kernels()
    records = []
    for key in keys:
        call = _launch(kernels, key, torch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        torch.cuda.synchronize()
        hot_ms = (time.perf_counter() - t0) * 1e3 / iters
        kind, bs_upper, tokens, aligned = key
        records.append({"phase": phase, "kernel": f"alloc_{kind}_kernel", "bs_upper": bs_upper,
                        "max_num_extend_tokens": tokens, "free_pages_aligned": aligned,
                        "first_ms": round(first_ms, 2), "hot_ms": round(hot_ms, 4),
                        "stall_ms": round(first_ms - hot_ms, 2), "pid": os.getpid()})
        print(json.dumps(records[-1]), flush=True)
    return records


def aot_phase(keys: list) -> list:
    """The same keys compiled ahead of time for this GPU's target (CPU seconds)."""
    import torch
    from triton.backends.compiler import GPUTarget
    major, minor = torch.cuda.get_device_capability(0)
    target = GPUTarget("cuda", major * 10 + minor, 32)
    extend, decode = _kernels()
    records = []
    for kind, bs_upper, tokens, aligned in keys:
        constexprs = {"bs_upper": bs_upper, "page_size": PAGE_SIZE}
        if kind == "extend":
            constexprs["max_num_extend_tokens"] = tokens
        rec = compile_one(extend if kind == "extend" else decode, constexprs, aligned, target)
        records.append({"phase": "aot", "kernel": rec["kernel"], "bs_upper": bs_upper,
                        "max_num_extend_tokens": tokens, "free_pages_aligned": aligned,
                        "aot_cpu_s": rec["cpu_s"], "aot_wall_s": rec["wall_s"]})
        print(json.dumps(records[-1]), flush=True)
    return records


def _child(phase: str, keys: str, iters: int, cache_dir: str, out_file: str):
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    cmd = [sys.executable, __file__, "--child", phase, "--keys", keys, "--iters", str(iters),
           "--child-out", out_file, "--out", "-"]
    return subprocess.Popen(cmd, env=env)


def table(records: list) -> str:
    """Per key: the cold stall, the parallel phase's median and worst, the AOT CPU seconds."""
    def key(r):
        return (r["kernel"], r["bs_upper"], r["max_num_extend_tokens"], r["free_pages_aligned"])
    by = {}
    for r in records:
        by.setdefault(key(r), {}).setdefault(r["phase"], []).append(r)
    lines = ["| kernel | bs_upper | max extend tokens | free_pages aligned | cold stall ms |"
             " parallel stall ms, median (max) | AOT CPU ms | hot µs |",
             "|---|---:|---:|---|---:|---|---:|---:|"]
    for k in sorted(by, key=lambda k: (k[0], k[1], k[2] or 0, k[3])):
        ph = by[k]
        cold = ph.get("cold", [{}])[0]
        par = sorted(r["stall_ms"] for r in ph.get("parallel", []))
        par_s = f"{par[len(par) // 2]:.0f} ({par[-1]:.0f})" if par else "-"
        aot = ph.get("aot", [{}])[0].get("aot_cpu_s")
        lines.append(f"| {k[0]} | {k[1]} | {k[2] or '-'} | {'yes' if k[3] else 'no'} | "
                     f"{cold.get('stall_ms', float('nan')):.0f} | {par_s} | "
                     f"{'-' if aot is None else f'{aot * 1e3:.0f}'} | "
                     f"{cold.get('hot_ms', float('nan')) * 1e3:.0f} |")
    return "\n".join(lines) + "\n"


def render(records: list) -> str:
    prov = records[0]
    return (f"# First use of SGLang's paged-allocator Triton kernels on {prov['gpu']}\n\n"
            f"`{prov['command']}` (torch {prov['torch']}, Triton {prov['triton']}, "
            f"{prov['cpus']} CPUs: {prov['cpu']}); what is timed: the script's docstring.\n\n"
            + table(records))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for records.jsonl and table.md")
    p.add_argument("--keys", default=format_keys(DEFAULT_KEYS),
                   help="kind:bs_upper:tokens|-:aligned 0/1, comma separated")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--ranks", type=int, default=8, help="processes of the parallel phase")
    p.add_argument("--parallel-keys", type=int, default=6,
                   help="how many of the keys the parallel phase meets")
    p.add_argument("--render", type=Path, default=None,
                   help="a kept records.jsonl: write its table.md to --out, no GPU")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        keys = parse_keys(args.keys)
        if args.iters < 1 or args.ranks < 1 or args.parallel_keys < 1:
            raise ValueError("--iters, --ranks and --parallel-keys must be >= 1")
    except ValueError as exc:
        print(f"first_use_alloc_gpu: {exc}", file=sys.stderr)
        return 2
    if args.render is not None:
        try:
            records = [json.loads(x) for x in args.render.read_text().splitlines() if x.strip()]
        except (OSError, ValueError) as exc:
            print(f"first_use_alloc_gpu: --render {args.render}: {exc}", file=sys.stderr)
            return 2
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(render(records))
        return 0
    if args.child:
        recs = run_phase(args.child, keys, args.iters)
        Path(args.child_out).write_text("".join(json.dumps(r) + "\n" for r in recs))
        return 0
    import torch
    import triton
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = {**host_provenance(triton.__version__, "sm%d%d" % torch.cuda.get_device_capability(0),
                              "python benchmarks/first_use_alloc_gpu.py " + " ".join(argv)),
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        f = str(Path(tmp) / "cold.jsonl")
        _child("cold", args.keys, args.iters, str(Path(tmp) / "cache"), f).wait()
        records += [json.loads(x) for x in Path(f).read_text().splitlines()]
        shared = str(Path(tmp) / "shared_cache")
        par_keys = format_keys(keys[:args.parallel_keys])
        procs = [_child("parallel", par_keys, args.iters, shared, str(Path(tmp) / f"par{i}.jsonl"))
                 for i in range(args.ranks)]
        for proc in procs:
            proc.wait()
        for i in range(args.ranks):
            f = Path(tmp) / f"par{i}.jsonl"
            if f.exists():
                records += [json.loads(x) for x in f.read_text().splitlines()]
        os.environ["TRITON_CACHE_DIR"] = str(Path(tmp) / "aot_cache")
        records += aot_phase(keys)
    records = [{**r, **prov} for r in records]
    tmp_out = out / "records.jsonl.tmp"
    tmp_out.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp_out.replace(out / "records.jsonl")
    (out / "table.md").write_text(render(records))
    print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
