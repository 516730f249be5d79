"""SGLang 0.5.9's Triton fused MoE of DeepSeek-V3 at MoE-TP 8 timed on one GPU under each tile
config source: what the H200 server runs against what AIC's collector timed (issue 39).

The layer is `fused_experts_impl`'s (`fused_moe_triton/fused_moe.py:321-675` in the 0.5.9 wheel)
on one GPU of TP 8 / MoE-TP 8, EP 1: hidden 7168, intermediate 256 a GPU, block-FP8 e4m3
weights with 128 x 128 fp32 scales, top-8 of 256 routed experts drawn uniformly at random
(seeded; the same draws for every source), plus the fused shared expert (the 257th) for the E 257
sources. Its steps: quantise the tokens per 128-group, the w13 GEMM (SGLang's `fused_moe_kernel`,
vendored verbatim in `sglang_fused_moe_kernel.py`), SiLU-and-mul, quantise, the w2 GEMM (routed
weight applied; TMA where the `_down` config says USE_TMA), sum over top-k x 2.5. SGLang's CUDA
helpers (sgl_kernel's quantiser, silu_and_mul, moe_sum_reduce) are torch ops here and the
alignment (`moe_align_block_size`) runs outside the timed graph, the routing being fixed: so
`layer` is close to, not exactly, the served layer's time, while `w13` and `w2` are SGLang's own
kernels alone. The config sources are `fused_moe_configs.SOURCES`.

Timing: `--layers` copies of the weights (each 257 experts x 5.5 MB), each with its own routing
draw, launched back to back in one CUDA graph (as a decode step's layers meet cold weights);
before each replay the L2 is flushed (a write of twice its size, outside the timed span), then
the replay is timed with CUDA events; the median over `--replays` replays, divided by the copies.
Three graphs a point: the whole layer, the w13 GEMM alone and the w2 GEMM alone (their inputs
quantised beforehand).

Writes `records.jsonl` (one line per source x token count: µs, GB/s, the tiles and tables used,
GPU, torch/Triton/CUDA versions, the command; a config that fails gets an `error` line) and
`table.md` to `--out`. The default run (5 sources x 9 token counts, about 47 kernel compiles,
8 x 1.4 GB of weights) should take about 2 minutes on an H100.

    python benchmarks/fused_moe_configs_gpu.py --out $OUT/fmoe
    python benchmarks/fused_moe_configs_gpu.py --render DIR/records.jsonl --out DIR   # no GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fused_moe_configs as fmc  # noqa: E402  (a sibling script module, not a package)


class LayerCopy:
    """One copy of the layer's weights, one routing draw and SGLang's buffers for one config."""

    def __init__(self, torch, weights, picked, ids, wts, sm90: bool):
        """weights: (w13 [E, 2I, H], its scales, w2 [E, H, I], its scales) on one device, E the
        source's experts; ids, wts: [tokens, topk] int32 experts and fp32 weights (CPU)."""
        import sglang_fused_moe_kernel as kernel
        self.torch, self.kernel, self.picked, self.sm90 = torch, kernel, picked, sm90
        self.w13, self.s13, self.w2, self.s2 = weights
        num_experts, inter2, hidden = self.w13.shape
        dev = self.w13.device
        num_tokens, self.top_k = ids.shape
        self.active = int(ids.unique().numel())
        self.sorted, self.experts, self.post = (
            t.to(dev) for t in fmc.align(ids, picked.w13["BLOCK_SIZE_M"], num_experts))
        self.wts = wts.float().contiguous().to(dev)
        self.numel = ids.numel()
        rows1 = self.sorted.shape[0] if picked.w2_tma else self.numel  # fused_moe.py:451-458
        bf16 = torch.bfloat16
        self.hidden = torch.randn(num_tokens, hidden, device=dev, dtype=bf16)
        self.cache1 = torch.zeros(rows1, inter2, device=dev, dtype=bf16)
        self.cache2 = torch.zeros(rows1, inter2 // 2, device=dev, dtype=bf16)
        self.cache3 = torch.empty(num_tokens, self.top_k, hidden, device=dev, dtype=bf16)
        self.out = torch.empty_like(self.hidden)
        self.a1, self.a1_scale = fmc.quant_fp8_groups(self.hidden)     # the GEMM-only inputs
        self.a2, self.a2_scale = fmc.quant_fp8_groups(torch.randn_like(self.cache2))

    def gemm13(self, a, a_scale):
        p = self.picked
        self.kernel.launch(a, a_scale, self.w13, self.s13, self.cache1, self.wts, self.sorted,
                           self.experts, self.post, self.numel, False, self.top_k, p.w13,
                           use_tma=False, c_sorted=p.w2_tma, sm90=self.sm90)

    def gemm2(self, a, a_scale):
        p = self.picked
        self.kernel.launch(a, a_scale, self.w2, self.s2, self.cache3, self.wts, self.sorted,
                           self.experts, self.post, self.numel, True, 1, p.w2,
                           use_tma=p.w2_tma, c_sorted=False, sm90=self.sm90)

    def layer(self):
        torch = self.torch
        self.gemm13(*fmc.quant_fp8_groups(self.hidden))
        d = self.cache2.shape[1]
        torch.mul(torch.nn.functional.silu(self.cache1[:, :d]), self.cache1[:, d:], out=self.cache2)
        self.gemm2(*fmc.quant_fp8_groups(self.cache2))
        torch.sum(self.cache3, dim=1, out=self.out)
        self.out.mul_(fmc.ROUTED_SCALING)


def routed(source, num_tokens: int, seed: int):
    """The routing draw (`fmc.routing`), with the fused shared expert (the 257th, weight 1)
    appended for an E 257 source: [tokens, 8 or 9] int32 ids, fp32 weights (CPU)."""
    import torch
    ids, wts = fmc.routing(num_tokens, seed)
    if source.num_experts == fmc.NUM_ROUTED + 1:
        ids = torch.cat([ids, torch.full((num_tokens, 1), fmc.NUM_ROUTED, dtype=ids.dtype)], 1)
        wts = torch.cat([wts, torch.ones(num_tokens, 1)], 1)
    return ids, wts


def make_weights(torch, copies: int):
    """`copies` sets of E 257 block-FP8 weights: w13 [257, 512, 7168], w2 [257, 7168, 256] fp8
    e4m3 and their [257, N / 128, K / 128] fp32 scales (random; the values do not set the time)."""
    e, n, k = fmc.NUM_ROUTED + 1, fmc.INTER_PER_GPU, fmc.HIDDEN
    first = ((torch.randn(e, 2 * n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn),
             torch.rand(e, 2 * n // fmc.GROUP, k // fmc.GROUP, device="cuda") * 1e-2,
             (torch.randn(e, k, n, device="cuda") * 0.1).to(torch.float8_e4m3fn),
             torch.rand(e, k // fmc.GROUP, n // fmc.GROUP, device="cuda") * 1e-2)
    return [first] + [tuple(t.clone() for t in first) for _ in range(copies - 1)]


def time_graph(torch, run, flush, replays: int, warmup: int) -> float:
    """Median µs of one CUDA graph of `run`, the L2 flushed before each replay."""
    run()                                      # compiles, and warms the allocator
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(warmup):
        flush.zero_()
        graph.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(replays)]
    for start, end in ev:
        flush.zero_()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)   # ms -> µs


def measure(torch, weights, source, num_tokens: int, tables, facts, args, flush) -> dict:
    """One record: the layer, w13 alone and w2 alone, per layer copy (µs)."""
    picked = fmc.pick(source, num_tokens, tables, facts["sglang_device"])
    copies = []
    for i, w in enumerate(weights):
        ids, wts = routed(source, num_tokens, args.seed + 1000 * i + num_tokens)
        copies.append(LayerCopy(torch, tuple(t[:source.num_experts] for t in w), picked, ids,
                                wts, facts["sm90"]))
    def timed(fn):
        return time_graph(torch, lambda: [fn(c) for c in copies], flush, args.replays,
                          args.warmup) / len(copies)
    layer_us = timed(lambda c: c.layer())
    w13_us = timed(lambda c: c.gemm13(c.a1, c.a1_scale))
    w2_us = timed(lambda c: c.gemm2(c.a2, c.a2_scale))
    active = sum(c.active for c in copies) / len(copies)
    weight_bytes = active * fmc.EXPERT_WEIGHT_BYTES
    return {"source": source.name, "what": source.what, "tokens": num_tokens,
            "num_experts": source.num_experts, "top_k": copies[0].top_k,
            "active_experts": active, "weight_bytes": weight_bytes,
            "layer_us": layer_us, "w13_us": w13_us, "w2_us": w2_us,
            "gemm_gbps": weight_bytes / ((w13_us + w2_us) * 1e3),   # bytes a ns = GB/s
            "config_w13": picked.w13, "config_w2": picked.w2, "w2_tma": picked.w2_tma,
            "w13_file": picked.w13_file, "w2_file": picked.w2_file,
            "layers": len(copies), "replays": args.replays, **facts}


def tiles(config: dict) -> str:
    return (f"{config['BLOCK_SIZE_M']}/{config['BLOCK_SIZE_N']}/{config['BLOCK_SIZE_K']}"
            f" g{config['GROUP_SIZE_M']} w{config['num_warps']} s{config['num_stages']}")


def table(records: list[dict]) -> str:
    """The records as markdown: times and rates per source, then the tiles each ran."""
    r0 = next((r for r in records if "error" not in r), records[0])
    sources = list(dict.fromkeys(r["source"] for r in records))
    failed = [r for r in records if "error" in r]
    by = {(r["source"], r["tokens"]): r for r in records if "error" not in r}
    tokens = sorted({r["tokens"] for r in records})
    lines = [f"# SGLang 0.5.9's fused MoE (DeepSeek-V3, MoE-TP 8) by tile config source, on "
             f"{r0['gpu']}", "",
             f"`python {r0['command']}` ({r0['date']}; torch {r0['torch']}, Triton "
             f"{r0['triton']}, CUDA {r0['cuda']}; {r0['layers']} weight copies a graph, median "
             f"of {r0['replays']} replays, L2 flushed before each). What is timed: the script's "
             "docstring. Each cell: layer µs (w13 + w2 GEMM µs), GB/s = the active experts' "
             "weights (5.51 MB each) over the two GEMMs' time; `X / served`: X's time over the "
             "served config's (> 1: slower), the layer's and the two GEMMs'. The collector's E 256 "
             "problem has no shared expert (8 experts a token, not 9): `collector_tiles_e257` "
             "runs its tiles on the served problem. Sources:", ""]
    what = {r["source"]: r["what"] for r in records}
    lines += [f"- `{s}`: {what[s]}" for s in sources]
    versus = [s for s in ("collector", "collector_tiles_e257") if s in sources and "served" in sources]
    lines += ["", "| tokens | active experts (E 257 / 256) | " + " | ".join(sources) + " |"
              + "".join(f" {s} / served, layer (GEMMs) |" for s in versus),
              "|---:|---|" + "---|" * (len(sources) + len(versus))]
    for t in tokens:
        act = {r["num_experts"]: r["active_experts"] for r in by.values() if r["tokens"] == t}
        cells = []
        for s in sources:
            r = by.get((s, t))
            cells.append("-" if r is None else f"{r['layer_us']:.1f} ({r['w13_us']:.1f} + "
                         f"{r['w2_us']:.1f}), {r['gemm_gbps']:.0f}")
        for s in versus:
            a, b = by.get(("served", t)), by.get((s, t))
            cells.append("-" if a is None or b is None else
                         f"{b['layer_us'] / a['layer_us']:.2f} "
                         f"({(b['w13_us'] + b['w2_us']) / (a['w13_us'] + a['w2_us']):.2f})")
        lines.append(f"| {t} | {act.get(257, float('nan')):.1f} / "
                     f"{act.get(256, float('nan')):.1f} | " + " | ".join(cells) + " |")
    lines += ["", "Tiles (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, warps, stages; w13 | w2, TMA marked):",
              "", "| tokens | " + " | ".join(sources) + " |", "|---:|" + "---|" * len(sources)]
    for t in tokens:
        cells = []
        for s in sources:
            r = by.get((s, t))
            cells.append("-" if r is None else f"{tiles(r['config_w13'])} \\| "
                         f"{tiles(r['config_w2'])}{' TMA' if r['w2_tma'] else ''}")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    files = sorted({(r["source"], r["w13_file"], r["w2_file"]) for r in by.values()})
    lines += ["", "Tables read: " + "; ".join(
        f"`{s}`: {a}" + ("" if a == b else f" + {b}") for s, a, b in files)]
    lines += ["", "Failed (no time, `-` above):", ""] if failed else []
    lines += [f"- `{r['source']}` at {r['tokens']} tokens: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def facts_of(torch) -> dict:
    import triton
    name = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    return {"gpu": name, "sglang_device": fmc.sglang_device_name(name),
            "capability": f"{cap[0]}.{cap[1]}", "sm90": cap == (9, 0),
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "command": " ".join(sys.argv),
            "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--render", type=Path, default=None,
                   help="only write table.md to --out from this records.jsonl (no GPU)")
    p.add_argument("--sources", nargs="+", default=list(fmc.SOURCES))
    p.add_argument("--tokens", type=int, nargs="+", default=list(fmc.TOKENS))
    p.add_argument("--layers", type=int, default=8, help="weight copies in one graph")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vendor-configs", type=Path, default=None,
                   help="only rewrite data/sglang_0_5_9_moe_configs_n256.json from a wheel's "
                        "fused_moe_triton/configs folder")
    args = p.parse_args(argv)
    if args.vendor_configs is not None:
        if not args.vendor_configs.is_dir():
            p.error(f"--vendor-configs ({args.vendor_configs}) must be a folder")
        fmc.CONFIGS.write_text(json.dumps(fmc.bundle_tables(args.vendor_configs), indent=1) + "\n")
        return 0
    if args.render is not None:
        try:
            records = [json.loads(line) for line in args.render.read_text().splitlines() if line]
            text = table(records)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            p.error(f"--render {args.render}: not a records.jsonl this script wrote ({exc})")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(text)
        return 0
    unknown = [s for s in args.sources if s not in fmc.SOURCES]
    if unknown:
        p.error(f"--sources: unknown {unknown}; allowed: {', '.join(fmc.SOURCES)}")
    if min(args.tokens) < 1:
        p.error(f"--tokens ({min(args.tokens)}) must be >= 1")
    if args.replays < 20:
        p.error(f"--replays ({args.replays}) must be >= 20: the median of at least 20")
    if args.layers < 1 or args.warmup < 0:
        p.error("--layers must be >= 1, --warmup >= 0")
    import torch
    if not torch.cuda.is_available():
        print("fused_moe_configs_gpu: no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    facts = facts_of(torch)
    tables = fmc.load_tables()
    t0 = time.time()
    weights = make_weights(torch, args.layers)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 128 << 20), dtype=torch.uint8, device="cuda")
    records = []
    with (args.out / "records.jsonl").open("w") as f:
        for name in args.sources:
            for t in args.tokens:
                try:
                    r = measure(torch, weights, fmc.SOURCES[name], t, tables, facts, args, flush)
                except Exception as exc:   # one config failing must not lose the others' points
                    r = {"source": name, "what": fmc.SOURCES[name].what, "tokens": t,
                         "num_experts": fmc.SOURCES[name].num_experts,
                         "error": f"{type(exc).__name__}: {exc}"[:500], "layers": args.layers,
                         "replays": args.replays, **facts}
                records.append(r)
                f.write(json.dumps(r) + "\n")
                f.flush()
                print(f"[{time.time() - t0:6.1f} s] {name:22s} {t:4d} tokens: " + (
                      f"FAILED {r['error']}" if "error" in r else
                      f"layer {r['layer_us']:7.1f} µs, w13 {r['w13_us']:6.1f}, w2 "
                      f"{r['w2_us']:6.1f}, {r['gemm_gbps']:5.0f} GB/s"), flush=True)
    (args.out / "table.md").write_text(table(records))
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
