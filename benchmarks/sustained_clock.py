"""A kernel timed in a short burst (as op tables time it) against the same kernel run for a minute.

Op tables (aiconfigurator-core's collectors, epsim's own records) time a kernel a few times after a
short warm-up, on a GPU that was idle before. A serving prefill runs such kernels back to back for
seconds to minutes; if the GPU then holds a lower clock (power or thermal limit), its sustained
rate is below the table's. This script measures that ratio on one GPU, per kernel class:

- `fp8_gemm`: block-free FP8 e4m3 GEMM (`torch._scaled_mm`, per-tensor scales) at a prefill shape
  (M tokens 16384, DeepSeek-V3's down projection of a dense MLP: N 7168, K 18432), compute-bound;
- `bf16_gemm`: BF16 GEMM 8192 x 8192 x 8192, compute-bound;
- `bf16_gemv`: BF16 GEMM of 64 tokens through a 7168 x 18432 weight (a decode step's dense layer,
  the weight streamed from HBM), memory-bound;
- `copy`: a 2 GiB device-to-device copy, memory-bound;
- `prefill_layer`: the kernels of one DeepSeek-V3 layer's prefill of 8192 tokens on one GPU of
  an EP-8 deployment, in order (`layer_kernels`): RMSNorm, the MLA projections as FP8 GEMMs,
  causal attention (SDPA, 128 heads of 128, BF16), the output projection, RMSNorm, the shared
  expert and 32 local experts at 256 routed tokens each (top-8 of 256 experts, balanced) as FP8
  GEMMs -- a mix of compute- and memory-bound work whose average power is what a power limit
  sees in a prefill;
- `decode_layer`: the same layer at 64 tokens with a 4096-token context (memory-bound mix);
- `layer_<T>` (with `--layer-tokens T ...`): the prefill layer at T tokens (a causal prompt of
  T), the ratio along the forward's size that the simulator's `epsim.cost.sustained` reads.

Per kernel, after `--idle-s` seconds with the GPU idle: the burst (`--warmup` calls, then
`--burst` calls timed with CUDA events, their mean), then `--sustain-s` seconds of back-to-back
calls timed in windows of about a second of launching (GPU time over the window's calls, the
host never waiting inside a window; the last `--tail-s` seconds are "sustained"). A host-bound
kernel (`decode_layer`: ~70 small launches) times its launch rate in both phases.
With `--graph`, each layer kernel (`prefill_layer`, `decode_layer`, `layer_<T>`) is captured once
in a CUDA graph and every call is one replay, as a serving forward runs: a small layer's calls are
then bound by the GPU, not by ~45 eager launches from the host (without it the 512-1024-token
layers' bursts time the host).
With `--ramp-s R`, the first R seconds of that run are timed call by call (CUDA events around
each call, read at the end): how soon after an idle GPU the clock falls.
`nvidia-smi` samples the SM clock, power and temperature every 200 ms throughout, and each window
carries the samples that fall in it.

Writes `records.jsonl` (one line per kernel: burst and windows, the clocks, the GPU, driver,
power limit, torch and the command) and `table.md` to `--out`.

    python benchmarks/sustained_clock.py --out $OUT/sustained
    python benchmarks/sustained_clock.py --render benchmarks/results/sustained_clock_h100/records.jsonl \
        --out benchmarks/results/sustained_clock_h100      # the table of a kept record, no GPU
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path


KERNELS = ("fp8_gemm", "bf16_gemm", "bf16_gemv", "copy", "prefill_layer", "decode_layer")


def kernels(torch):
    """name -> (callable, bytes moved or None, FLOPs or None, what it is)."""
    dev = "cuda"
    out = {}
    m, n, k = 16384, 7168, 18432
    a8 = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
    b8 = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    out["fp8_gemm"] = (lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                                out_dtype=torch.bfloat16),
                       None, 2 * m * n * k, f"FP8 e4m3 GEMM M{m} N{n} K{k}")
    s = 8192
    x = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    y = torch.randn(s, s, device=dev, dtype=torch.bfloat16)
    out["bf16_gemm"] = (lambda: x @ y, None, 2 * s ** 3, f"BF16 GEMM {s}^3")
    t = 64
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    h = torch.randn(t, k, device=dev, dtype=torch.bfloat16)
    out["bf16_gemv"] = (lambda: h @ w.t(), n * k * 2, 2 * t * n * k,
                        f"BF16 GEMM M{t} N{n} K{k} (weight streamed)")
    nbytes = 2 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    out["copy"] = (lambda: dst.copy_(src), 2 * nbytes, None, "2 GiB device copy")
    for name, tokens, context in (("prefill_layer", 8192, 8192), ("decode_layer", 64, 4096)):
        out[name] = layer_entry(torch, tokens, context)
    return out


def layer_entry(torch, tokens: int, context: int):
    """A `kernels` entry: the DeepSeek-V3 layer at `tokens` tokens and `context`."""
    fn, flops = layer_kernels(torch, tokens, context)
    return fn, None, flops, f"DeepSeek-V3 layer, {tokens} tokens, EP 8 (one GPU)"


def layer_kernels(torch, tokens: int, context: int):
    """One DeepSeek-V3 MoE layer's kernels on one GPU (module doc); returns (run, FLOPs)."""
    dev, hidden, heads, experts_local, routed_per_expert = "cuda", 7168, 128, 32, tokens * 8 // 256
    one = torch.ones((), device=dev)
    f8 = torch.float8_e4m3fn
    gemms = []                                  # (activation [M, K] fp8, weight^T [K, N] fp8)
    def gemm(m, k, n):
        a = torch.randn(max(m, 16), k, device=dev).to(f8)
        b = torch.randn(n, k, device=dev).to(f8).t()
        gemms.append((a, b))
        return len(gemms) - 1
    attn_in = [gemm(tokens, hidden, 1536), gemm(tokens, 1536, heads * 192),
               gemm(tokens, hidden, 576), gemm(tokens, 512, heads * 256)]
    o_proj = gemm(tokens, heads * 128, hidden)
    shared = [gemm(tokens, hidden, 4096), gemm(tokens, 2048, hidden)]
    routed = [gemm(routed_per_expert, hidden, 4096) for _ in range(experts_local)] + \
             [gemm(routed_per_expert, 2048, hidden) for _ in range(experts_local)]
    x = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16)
    w = torch.ones(hidden, device=dev, dtype=torch.bfloat16)
    q = torch.randn(1, heads, tokens, 128, device=dev, dtype=torch.bfloat16)
    kv = torch.randn(1, heads, context, 128, device=dev, dtype=torch.bfloat16)
    causal = tokens == context
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rms = torch.nn.functional.rms_norm
    def mm(i):
        a, b = gemms[i]
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    def run():
        rms(x, (hidden,), w)
        for i in attn_in:
            mm(i)
        sdpa(q, kv, kv, is_causal=causal)
        mm(o_proj)
        rms(x, (hidden,), w)
        for i in shared + routed:
            mm(i)
    flops = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in gemms)
    flops += 4 * heads * tokens * context * 128 // (2 if causal else 1)
    return run, flops


class Sampler:
    """nvidia-smi's SM clock, power and temperature every 200 ms, timestamped on this host."""

    FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"

    def __init__(self):
        self.samples: list[dict] = []
        self.proc = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={self.FIELDS}", "--format=csv,noheader,nounits",
             "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append({"t": time.time(), "sm_mhz": float(parts[0]),
                                     "mem_mhz": float(parts[1]), "power_w": float(parts[2]),
                                     "temp_c": float(parts[3]), "throttle": parts[4]})
            except (ValueError, IndexError):
                continue

    def between(self, t0: float, t1: float) -> list[dict]:
        return [s for s in self.samples if t0 <= s["t"] < t1]

    def stop(self):
        self.proc.terminate()


def summary(samples: list[dict]) -> dict:
    if not samples:
        return {}
    mean = lambda key: sum(s[key] for s in samples) / len(samples)  # noqa: E731
    return {"sm_mhz": round(mean("sm_mhz")), "power_w": round(mean("power_w"), 1),
            "temp_c": round(mean("temp_c"), 1),
            "throttle": sorted({s["throttle"] for s in samples})}


def in_graph(torch, fn):
    """`fn` captured in a CUDA graph (warmed on a side stream first, as torch asks): one replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def measure(torch, fn, args, sampler: Sampler) -> dict:
    time.sleep(args.idle_s)
    for _ in range(args.warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start.record()
    for _ in range(args.burst):
        fn()
    end.record()
    end.synchronize()
    burst_ms = start.elapsed_time(end) / args.burst
    burst_samples = sampler.between(t0 - 0.2, time.time() + 0.2)
    windows, ramp = [], []
    t_begin = time.time()
    if args.ramp_s > 0:        # call by call: events only, read once the ramp is over
        pairs = []
        while time.time() - t_begin < args.ramp_s:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            pairs.append((a, b))
        pairs[-1][1].synchronize()
        first = pairs[0][0]
        ramp = [{"t_ms": round(first.elapsed_time(a), 3), "ms": round(a.elapsed_time(b), 4)}
                for a, b in pairs]
    while time.time() - t_begin < args.sustain_s:
        w0 = time.time()
        start.record()
        calls = 0
        while time.time() - w0 < 1.0:   # no sync inside a window: host-bound work keeps its queue
            fn()
            calls += 1
        end.record()
        end.synchronize()
        w1 = time.time()
        windows.append({"t_s": round(w1 - t_begin, 2), "calls": calls,
                        "ms_per_call": start.elapsed_time(end) / calls,
                        **summary(sampler.between(w0, w1))})
    tail = [w for w in windows if w["t_s"] > args.sustain_s - args.tail_s]
    tail_ms = sum(w["ms_per_call"] * w["calls"] for w in tail) / sum(w["calls"] for w in tail)
    return {"burst_ms": burst_ms, "burst_clock": summary(burst_samples),
            "sustained_ms": tail_ms, "sustained_clock": summary(
                [s for w0 in [t_begin + args.sustain_s - args.tail_s]
                 for s in sampler.between(w0, time.time())]),
            "sustained_over_burst": tail_ms / burst_ms, "windows": windows, "ramp": ramp}


def gpu_facts() -> dict:
    q = "name,driver_version,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem"
    line = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip().splitlines()[0]
    return dict(zip(q.split(","), [p.strip() for p in line.split(",")]))


def table(records: list[dict]) -> str:
    """The records as a markdown table, headed by the GPU, its power limit and the command."""
    r0 = records[0]
    lines = [f"# Burst against sustained: kernels on {r0['name']}", "",
             f"`python {r0['command']}` (driver {r0['driver_version']}, power limit "
             f"{r0['power.limit']}, max SM clock {r0['clocks.max.sm']}, torch {r0['torch']}); "
             "what is measured: the script's docstring. Clocks and power are nvidia-smi's means "
             "over the phase (the burst phase's samples include the idle GPU around it).", "",
             "| kernel | burst ms | sustained ms | sustained / burst | burst SM MHz, W | "
             "sustained SM MHz, W | rate (burst -> sustained) |", "|---|---|---|---|---|---|---|"]
    for r in records:
        rate = ""
        if r["flops"]:
            rate = (f"{r['flops'] / r['burst_ms'] / 1e9:.0f} -> "
                    f"{r['flops'] / r['sustained_ms'] / 1e9:.0f} TFLOP/s")
        if r["bytes"]:
            rate += ("; " if rate else "") + (f"{r['bytes'] / r['burst_ms'] / 1e6:.0f} -> "
                                              f"{r['bytes'] / r['sustained_ms'] / 1e6:.0f} GB/s")
        bc, sc = r["burst_clock"], r["sustained_clock"]
        lines.append(f"| {r['kernel']} ({r['what']}) | {r['burst_ms']:.3f} | "
                     f"{r['sustained_ms']:.3f} | {r['sustained_over_burst']:.3f} | "
                     f"{bc.get('sm_mhz')}, {bc.get('power_w')} | {sc.get('sm_mhz')}, "
                     f"{sc.get('power_w')} | {rate} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--render", type=Path, default=None,
                   help="only write table.md to --out from this records.jsonl (no GPU)")
    p.add_argument("--kernels", nargs="+", default=list(KERNELS))
    p.add_argument("--idle-s", type=float, default=15.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--burst", type=int, default=10)
    p.add_argument("--sustain-s", type=float, default=60.0)
    p.add_argument("--tail-s", type=float, default=20.0)
    p.add_argument("--layer-tokens", type=int, nargs="*", default=[],
                   help="also time the prefill layer at these token counts (kernels layer_<T>)")
    p.add_argument("--graph", action="store_true",
                   help="run each layer kernel as one CUDA-graph replay (module doc)")
    p.add_argument("--ramp-s", type=float, default=0.0,
                   help="time the first seconds of each sustained run call by call")
    args = p.parse_args(argv)
    if args.render is not None:
        try:
            records = [json.loads(line) for line in args.render.read_text().splitlines() if line]
            table(records)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            p.error(f"--render {args.render}: not a records.jsonl this script wrote ({exc})")
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "table.md").write_text(table(records))
        return 0
    bad = [t for t in args.layer_tokens if not 16 <= t <= 32768]
    if bad:
        p.error(f"--layer-tokens: {bad} outside 16..32768")
    if not 0 <= args.ramp_s < args.sustain_s:
        p.error(f"--ramp-s ({args.ramp_s:g}) must be >= 0 and below --sustain-s")
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown:
        p.error(f"--kernels: unknown {unknown}; allowed: {', '.join(KERNELS)}")
    if not 0 < args.tail_s < args.sustain_s:
        p.error(f"--tail-s ({args.tail_s:g}) must be > 0 and below --sustain-s "
                f"({args.sustain_s:g}): the sustained rate is the run's last seconds")
    if args.burst < 1 or args.warmup < 0 or args.idle_s < 0:
        p.error("--burst must be >= 1, --warmup and --idle-s >= 0")
    import torch
    if not torch.cuda.is_available():
        print("sustained_clock: no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    table_of = kernels(torch)
    for t in args.layer_tokens:
        table_of[f"layer_{t}"] = layer_entry(torch, t, t)
        args.kernels.append(f"layer_{t}")
    sampler = Sampler()
    facts = {**gpu_facts(), "torch": torch.__version__, "command": " ".join(sys.argv)}
    records = []
    try:
        for name in args.kernels:
            fn, nbytes, flops, what = table_of[name]
            if args.graph and (name.startswith("layer_") or name.endswith("_layer")):
                fn, what = in_graph(torch, fn), what + ", CUDA graph"
            r = {"kernel": name, "what": what, "bytes": nbytes, "flops": flops,
                 **measure(torch, fn, args, sampler), **facts}
            records.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "windows"}), flush=True)
    finally:
        sampler.stop()
    (args.out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (args.out / "table.md").write_text(table(records))
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
