"""Does the BF16 fused MoE's large-M fall come from the order of each expert's rows? (issue 37)

AIC's SGLang MoE tables show SGLang's BF16 Triton fused MoE on its default tile (64 x 64 x 32,
GROUP_SIZE_M 8: `get_default_config`, `fused_moe_triton_config.py`, BF16 branch, no num_warps /
num_stages given, so Triton's 4 warps, 3 stages) losing rate past ~2048 tokens (H100 E 8 N 14336
top-2: 243 -> 200 TFLOP/s from 2048 to 16384 tokens; `benchmarks/results/
fused_moe_rate_by_tokens.md`). The lead tested here: sgl-kernel's `moe_align_block_size`
(`csrc/moe/moe_align_kernel.cu`, `count_and_sort_expert_tokens_kernel`) ranks each (token, slot)
row within its expert by `atomicAdd(&cumsum_buffer[expert_id], 1)`, so a 64-row block may gather
its A rows (and scatter its C rows) from across the whole batch.

The GEMMs are SGLang's own `fused_moe_kernel` (vendored verbatim from the sglang 0.5.9 wheel in
`sglang_fused_moe_kernel.py`, Apache-2.0, its notice there), launched as `invoke_fused_moe_kernel`
(`fused_moe_triton_kernels.py`) launches it for BF16 weights: no scales (`A_scale`, `B_scale`
None, their strides 0, `group_n = group_k = 0`), `use_fp8_w8a8` False, compute type bf16, no bias,
`filter_expert` False (EP 1), `c_sorted` False, `swap_ab` False (BLOCK_SIZE_M 64). As
`fused_experts_impl` (`fused_moe.py`) calls it: w1 (gate-up) reads `hidden_states` [T, H] through
`offs_token // top_k` and writes `intermediate_cache1` [T * top-k, 2N]; w2 reads the activation
[T * top-k, N] (top_k 1) and writes `intermediate_cache3` [T, top-k, H] with the routed weight
applied. SiLU-and-mul and the top-k sum are not timed (they do not depend on the order).

`sorted_token_ids` comes from `fused_moe_configs.align` (`moe_align_block_size`'s layout in
torch: each expert's run padded to BLOCK_SIZE_M with the sentinel T * top-k), with the rows of each
expert in one of three orders:
- `ascending`: flat (token, slot) index ascending (a stable sort; what a deterministic sort gives);
- `scattered`: a random permutation within each expert (the limit of the atomics' order);
- `block256`: ascending by windows of 256 consecutive (token, slot) rows, random inside a window
  (atomics that race only within one thread block's rows).
Routing is balanced, as the table rows read here (`distribution == "balanced"`), though not
AIC's own draw: token t (in a random order p) takes experts (p(t) * top-k + j) mod E, j < top-k,
so every expert holds T * top-k / E rows spread over the batch.

Timing as AIC's collector (`collector/sglang/collect_moe.py`, `benchmark_config`): each GEMM
captured 5 times in one CUDA graph, an eager call and 2 replays to warm up, 10 timed replays
(CUDA events), median / 5 = one call; no L2 flush (the collector has none). TFLOP/s counts
2 T top-k H 2N (w1) and 2 T top-k N H (w2).

Writes `records.jsonl` (a line per shape x tokens x order: w1 / w2 ms and TFLOP/s, GPU, driver,
L2 bytes, versions, command) and `table.md` to `--out`.

    python benchmarks/fused_moe_gather_order.py --out $OUT/gather
    python benchmarks/fused_moe_gather_order.py --one 8 14336 4096 2 16384 scattered  # for ncu
    python benchmarks/fused_moe_gather_order.py --render DIR/records.jsonl --out DIR   # no GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fused_moe_configs as fmc  # noqa: E402  (a sibling script module, not a package)

# AIC's BF16 default-tile shapes of the hold-out (E, N, H, top-k), from the moe_perf tables.
SHAPES = ((8, 14336, 4096, 2), (16, 8192, 5120, 1))
TOKENS = (1024, 2048, 3072, 4096, 8192, 12288, 16384)
ORDERS = ("ascending", "scattered", "block256")
DEFAULT_CONFIG = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}
CALLS_PER_GRAPH = 5
WINDOW_ROWS = 256


def balanced_ids(num_tokens: int, num_experts: int, top_k: int, seed: int):
    """[tokens, top_k] int32 experts: token t takes (p(t) top_k + j) mod E (p a random
    permutation), so each expert holds tokens * top_k / E rows from across the batch."""
    import torch
    g = torch.Generator().manual_seed(seed)
    p = torch.randperm(num_tokens, generator=g)
    return ((p[:, None] * top_k + torch.arange(top_k)[None, :]) % num_experts).to(torch.int32)


def ordered_align(ids, block_m: int, num_experts: int, order: str, seed: int):
    """`fmc.align` (moe_align_block_size's layout) with each expert's rows in `order`.

    The stable sort in `fmc.align` keeps the order rows arrive in; feeding it the rows in a
    permuted order p and mapping back (sorted -> p[sorted]) puts each expert's rows in p's order.
    Returns sorted_ids [EM] int32 (sentinel numel), expert_ids, num_tokens_post_padded.
    """
    import torch
    flat = ids.flatten().long()
    numel = flat.numel()
    g = torch.Generator().manual_seed(seed)
    if order == "ascending":
        p = torch.arange(numel)
    elif order == "scattered":
        p = torch.randperm(numel, generator=g)
    elif order == "block256":
        key = (torch.arange(numel) // WINDOW_ROWS).double() + torch.rand(numel, generator=g) * 0.5
        p = torch.argsort(key)
    else:
        raise ValueError(f"order {order!r} not in {ORDERS}")
    sorted_ids, experts, post = fmc.align(flat[p].reshape(-1, 1), block_m, num_experts)
    real = sorted_ids.long() < numel
    out = sorted_ids.clone()
    out[real] = p[sorted_ids.long()[real]].to(torch.int32)
    return out, experts, post


def launch_bf16(A, B, C, topk_weights, sorted_ids, expert_ids, post, numel: int,
                mul_routed_weight: bool, top_k: int, config: dict):
    """One `fused_moe_kernel` launch as `invoke_fused_moe_kernel` makes it for BF16 weights.

    A [rows, K] bf16 (rows = tokens for w1, tokens * top-k for w2); B [E, N, K] bf16;
    C [tokens * top-k, N] bf16 (a view); topk_weights [tokens, top-k] fp32.
    """
    import triton
    import triton.language as tl
    import sglang_fused_moe_kernel as kernel
    n_out, k_in = B.shape[1], B.shape[2]
    grid = (triton.cdiv(sorted_ids.shape[0], config["BLOCK_SIZE_M"])
            * triton.cdiv(n_out, config["BLOCK_SIZE_N"]),)
    kernel.fused_moe_kernel[grid](
        A, None, B, None, None, C, None, None, topk_weights, sorted_ids, expert_ids, post,
        n_out, k_in, sorted_ids.shape[0], numel,
        A.stride(0), A.stride(1), B.stride(0), B.stride(2), B.stride(1), 0, 0,
        C.stride(-2), C.stride(-1), 0, 0, 0, 0, 0, 0, 0,
        MUL_ROUTED_WEIGHT=mul_routed_weight, top_k=top_k, compute_type=tl.bfloat16,
        use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
        even_Ks=k_in % config["BLOCK_SIZE_K"] == 0, c_sorted=False, filter_expert=False,
        swap_ab=False, **config)


class Problem:
    """One shape's weights and one token count's buffers and routing on the GPU."""

    def __init__(self, torch, weights, num_tokens: int, top_k: int, seed: int):
        self.torch = torch
        self.w1, self.w2 = weights                   # [E, 2N, H], [E, H, N] bf16
        num_experts, n2, hidden = self.w1.shape
        dev, bf16 = self.w1.device, torch.bfloat16
        self.num_experts, self.top_k, self.tokens = num_experts, top_k, num_tokens
        self.ids = balanced_ids(num_tokens, num_experts, top_k, seed)
        self.numel = num_tokens * top_k
        self.wts = torch.rand(num_tokens, top_k, device=dev)
        self.hidden = torch.randn(num_tokens, hidden, device=dev, dtype=bf16)
        self.cache1 = torch.empty(self.numel, n2, device=dev, dtype=bf16)
        self.act = torch.randn(self.numel, n2 // 2, device=dev, dtype=bf16)
        self.cache3 = torch.empty(num_tokens, top_k, hidden, device=dev, dtype=bf16)

    def set_order(self, order: str, seed: int):
        dev = self.w1.device
        self.sorted, self.experts, self.post = (t.to(dev) for t in ordered_align(
            self.ids, DEFAULT_CONFIG["BLOCK_SIZE_M"], self.num_experts, order, seed))

    def gemm1(self):
        launch_bf16(self.hidden, self.w1, self.cache1, self.wts, self.sorted, self.experts,
                    self.post, self.numel, False, self.top_k, DEFAULT_CONFIG)

    def gemm2(self):
        launch_bf16(self.act, self.w2, self.cache3.view(self.numel, -1), self.wts, self.sorted,
                    self.experts, self.post, self.numel, True, 1, DEFAULT_CONFIG)


def time_call_ms(torch, fn, replays: int, warmup: int) -> float:
    """Median ms of one call: `fn` captured CALLS_PER_GRAPH times in a CUDA graph, replayed."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS_PER_GRAPH):
            fn()
    for _ in range(warmup):
        graph.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(replays)]
    for start, end in ev:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev) / CALLS_PER_GRAPH


def make_weights(torch, num_experts: int, inter: int, hidden: int):
    """w1 [E, 2N, H], w2 [E, H, N] bf16, random (the values do not set the time)."""
    bf16 = torch.bfloat16
    return (torch.randn(num_experts, 2 * inter, hidden, device="cuda", dtype=bf16) * 0.02,
            torch.randn(num_experts, hidden, inter, device="cuda", dtype=bf16) * 0.02)


def facts(torch) -> dict:
    import triton
    q = "name,driver_version,power.limit,clocks.max.sm"
    try:
        line = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()[0]
        smi = dict(zip(q.split(","), [p.strip() for p in line.split(",")]))
    except (OSError, IndexError):
        smi = {}
    prop = torch.cuda.get_device_properties(0)
    return {"gpu": prop.name, "sms": prop.multi_processor_count,
            "l2_bytes": getattr(prop, "L2_cache_size", None), "driver": smi.get("driver_version"),
            "power_limit": smi.get("power.limit"), "max_sm_clock": smi.get("clocks.max.sm"),
            "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["benchmarks/fused_moe_gather_order.py"] + sys.argv[1:])}


def check(problem) -> float:
    """Largest |error| of w1's output rows against torch (a few rows; the order must not matter)."""
    torch = problem.torch
    problem.gemm1()
    torch.cuda.synchronize()
    worst = 0.0
    for row in (0, problem.numel // 2, problem.numel - 1):
        tok, e = row // problem.top_k, int(problem.ids.flatten()[row])
        ref = problem.hidden[tok].float() @ problem.w1[e].float().t()
        worst = max(worst, float((problem.cache1[row].float() - ref).abs().max()))
    return worst


def sweep(args) -> list[dict]:
    """Every shape x tokens x order; each record also appended to --out/records.jsonl at once."""
    import torch
    info = facts(torch)
    records = []
    args.out.mkdir(parents=True, exist_ok=True)
    sink = (args.out / "records.jsonl").open("w")
    for num_experts, inter, hidden, top_k in args.shapes:
        weights = make_weights(torch, num_experts, inter, hidden)
        for num_tokens in args.tokens:
            problem = Problem(torch, weights, num_tokens, top_k, args.seed + num_tokens)
            for order in args.orders:
                problem.set_order(order, args.seed + 7 * num_tokens)
                err = check(problem) if num_tokens == args.tokens[0] else None
                w1_ms = time_call_ms(torch, problem.gemm1, args.replays, args.warmup)
                w2_ms = time_call_ms(torch, problem.gemm2, args.replays, args.warmup)
                flop1 = 2 * num_tokens * top_k * hidden * 2 * inter
                flop2 = 2 * num_tokens * top_k * inter * hidden
                rec = {"E": num_experts, "N": inter, "H": hidden, "top_k": top_k,
                       "tokens": num_tokens, "order": order, "w1_ms": w1_ms, "w2_ms": w2_ms,
                       "w1_tflops": flop1 / w1_ms / 1e9, "w2_tflops": flop2 / w2_ms / 1e9,
                       "tflops": (flop1 + flop2) / (w1_ms + w2_ms) / 1e9, "check_abs_err": err,
                       "config": DEFAULT_CONFIG, "replays": args.replays, **info}
                records.append(rec)
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
                print(json.dumps({k: rec[k] for k in ("E", "tokens", "order", "w1_ms", "w2_ms",
                                                     "tflops")}), flush=True)
            del problem
        del weights
        torch.cuda.empty_cache()
    return records


def table(records: list[dict]) -> str:
    """Markdown: per shape, per order, w1 + w2 ms and TFLOP/s by tokens; then order / ascending."""
    r0 = records[0]
    lines = [f"# BF16 fused MoE default tile: each expert's row order, on {r0['gpu']}", "",
             f"`python {r0['command']}` ({r0['date']}; driver {r0['driver']}, power limit "
             f"{r0['power_limit']}, L2 {(r0['l2_bytes'] or 0) / 1e6:.0f} MB, "
             f"{r0['sms']} SMs; torch {r0['torch']}, Triton {r0['triton']}, CUDA {r0['cuda']}). "
             "What is timed: the script's docstring (SGLang's `fused_moe_kernel`, tile 64 x 64 "
             f"x 32 GROUP_SIZE_M 8; {CALLS_PER_GRAPH} calls a CUDA-graph replay, median of "
             f"{r0['replays']} replays). Each cell: w1 ms + w2 ms / TFLOP/s of the two.", ""]
    shapes = list(dict.fromkeys((r["E"], r["N"], r["H"], r["top_k"]) for r in records))
    tokens = sorted({r["tokens"] for r in records})
    orders = list(dict.fromkeys(r["order"] for r in records))
    by = {(r["E"], r["N"], r["H"], r["top_k"], r["tokens"], r["order"]): r for r in records}
    for shape in shapes:
        lines += [f"### E {shape[0]} N {shape[1]} H {shape[2]} top-{shape[3]}", "",
                  "| order | " + " | ".join(str(t) for t in tokens) + " |",
                  "|---|" + "---:|" * len(tokens)]
        for o in orders:
            cells = [by.get((*shape, t, o)) for t in tokens]
            lines.append(f"| {o} | " + " | ".join(
                "-" if r is None else f"{r['w1_ms']:.2f} + {r['w2_ms']:.2f} / {r['tflops']:.0f}"
                for r in cells) + " |")
        for o in orders[1:]:
            ratio = []
            for t in tokens:
                a, b = by.get((*shape, t, orders[0])), by.get((*shape, t, o))
                ratio.append("-" if a is None or b is None else
                             f"{(b['w1_ms'] + b['w2_ms']) / (a['w1_ms'] + a['w2_ms']):.3f}")
            lines.append(f"| {o} / {orders[0]} time | " + " | ".join(ratio) + " |")
        lines.append("")
    return "\n".join(lines)


def one(argv: list[str]) -> int:
    """One eager warm-up of w1 and w2, then one more of each: for `ncu --launch-skip 2`."""
    import torch
    e, n, h, k, t = (int(x) for x in argv[:5])
    problem = Problem(torch, make_weights(torch, e, n, h), t, k, 0 + t)
    problem.set_order(argv[5], 7 * t)
    for _ in range(2):
        problem.gemm1()
        problem.gemm2()
    torch.cuda.synchronize()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--render", type=Path, default=None,
                   help="only write table.md to --out from this records.jsonl (no GPU)")
    p.add_argument("--one", nargs=6, metavar=("E", "N", "H", "TOPK", "TOKENS", "ORDER"),
                   help="run w1 and w2 twice eagerly at one point (for ncu)")
    p.add_argument("--tokens", type=int, nargs="+", default=list(TOKENS))
    p.add_argument("--orders", nargs="+", default=list(ORDERS), choices=ORDERS)
    p.add_argument("--shapes", type=lambda s: tuple(int(x) for x in s.split(",")), nargs="+",
                   default=list(SHAPES), help="E,N,H,topk ...")
    p.add_argument("--replays", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.one:
        return one(args.one)
    if args.out is None:
        p.error("--out is required")
    if args.render is not None:
        records = [json.loads(line) for line in args.render.read_text().splitlines() if line]
    else:
        records = sweep(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
