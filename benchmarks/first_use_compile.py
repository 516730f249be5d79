"""What a Triton kernel's first use at a new shape key costs a serving process (one GPU).

SGLang serves DeepSeek-R1 FP8 on Hopper with a Triton fused-MoE GEMM whose tile sizes come from
a per-device JSON keyed by the batch's token count (nearest key) and whose integer arguments
`EM` (padded routed rows) and `num_valid_tokens` (tokens x top-k) are plain ints, which Triton
specialises on divisibility by 16 (and on == 1). A prefill batch whose (tile config,
specialisation) the process has not met compiles a new kernel inside that batch. This script
times that, with a kernel of the same structure written here (block-FP8 A and B, per-token-group
A scales, 128x128 B scales, sorted token ids, expert ids per M block, swap-AB below 64 rows as
SGLang does on sm90), at DeepSeek-R1 TP8's per-rank shapes (E 257 with the shared expert fused,
top-k 9, w13 N 512 K 7168, w2 N 7168 K 256) and the tile table of SGLang's
`E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json` (triton_3_3_1).

Phases, each a fresh process:

- `cold`: an empty TRITON_CACHE_DIR; for each token count of `--tokens`, the two MoE GEMMs
  (w13 then w2) are launched once (`first_ms`: host wall time to a synchronise, compile included)
  and then `--iters` times more (`hot_ms`: the mean per call, the cached kernel);
  `new_cache_entries` counts the kernels compiled at that count.
- `disk`: a new process over the cache the cold phase filled (a server restarted with a kept
  cache): the first call loads the compiled kernel from disk.
- `parallel`: `--ranks` processes at once over one empty cache dir, each compiling the same two
  new keys (TP ranks of one server compile together on the host's CPUs).

Writes `records.jsonl` (one line per phase and token count, with GPU, torch, Triton, CPU and
the command) and `table.md` to `--out`.

    python benchmarks/first_use_compile.py --out $OUT/first_use
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Tile table: SGLang's H200 config for E=257, N=256, fp8_w8a8, block [128, 128] (triton_3_3_1),
# as (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages) per key.
H200_E257_N256_FP8_TILES = {
    1: (16, 128, 128, 16, 4, 4), 2: (16, 128, 128, 16, 4, 4), 4: (16, 128, 128, 64, 4, 4),
    8: (16, 128, 128, 16, 4, 4), 16: (16, 128, 128, 1, 4, 3), 24: (16, 128, 128, 16, 4, 4),
    32: (16, 128, 128, 32, 4, 5), 48: (16, 128, 128, 32, 4, 3), 64: (16, 128, 128, 16, 4, 3),
    96: (16, 128, 128, 16, 4, 3), 128: (16, 128, 128, 32, 4, 3), 256: (16, 128, 128, 64, 4, 3),
    512: (16, 128, 128, 32, 4, 3), 1024: (64, 128, 128, 16, 4, 4),
    1536: (64, 128, 128, 32, 4, 4), 2048: (64, 128, 128, 32, 4, 4),
    3072: (64, 128, 128, 32, 4, 4), 4096: (64, 128, 128, 16, 4, 3),
}
NUM_EXPERTS = 257          # DeepSeek-R1's 256 routed + the fused shared expert
TOP_K = 9                  # 8 routed + the shared one
HIDDEN = 7168
INTER_PER_RANK = 256       # 2048 / TP 8
GROUP = 128                # block-FP8 quantisation group
DEFAULT_TOKENS = ("1,2,3,8,16,17,64,255,512,900,901,1024,1026,1536,1537,2048,3000,4096,4097,"
                  "4098,7000,8192")


def tiles_for(num_tokens: int) -> tuple:
    """The tile config SGLang picks: the table's key nearest the token count."""
    key = min(H200_E257_N256_FP8_TILES, key=lambda k: abs(k - num_tokens))
    return key, H200_E257_N256_FP8_TILES[key]


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def moe_gemm_block_fp8(
        a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, topk_weights_ptr,
        sorted_ids_ptr, expert_ids_ptr, num_post_padded_ptr,
        N, K, EM, num_valid_tokens,
        stride_am, stride_ak, stride_be, stride_bk, stride_bn, stride_cm, stride_cn,
        stride_asm, stride_ask, stride_bse, stride_bsk, stride_bsn,
        group_n: tl.constexpr, group_k: tl.constexpr,
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
        GROUP_SIZE_M: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, top_k: tl.constexpr,
        even_Ks: tl.constexpr, swap_ab: tl.constexpr,
    ):
        # grouped launch order over [M blocks, N blocks]
        pid = tl.program_id(0)
        blocks_m = tl.cdiv(EM, BLOCK_SIZE_M)
        blocks_n = tl.cdiv(N, BLOCK_SIZE_N)
        per_group = GROUP_SIZE_M * blocks_n
        first_m = (pid // per_group) * GROUP_SIZE_M
        rows_in_group = min(blocks_m - first_m, GROUP_SIZE_M)
        pid_m = first_m + ((pid % per_group) % rows_in_group)
        pid_n = (pid % per_group) // rows_in_group
        if pid_m * BLOCK_SIZE_M >= tl.load(num_post_padded_ptr):
            return
        row_ids = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M).to(tl.int64)
        tokens = tl.load(sorted_ids_ptr + row_ids).to(tl.int64)      # [BLOCK_SIZE_M] routed rows
        valid = tokens < num_valid_tokens
        expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
        cols = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)) % N
        ks = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (tokens[:, None] // top_k) * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + expert * stride_be + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        a_scale_ptrs = a_scale_ptr + (tokens // top_k) * stride_asm
        b_scale_ptrs = b_scale_ptr + expert * stride_bse + (cols // group_n) * stride_bsn
        if swap_ab:
            acc = tl.zeros((BLOCK_SIZE_N, BLOCK_SIZE_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_SIZE_K):
            if even_Ks:
                a = tl.load(a_ptrs, mask=valid[:, None], other=0.0)
                b = tl.load(b_ptrs)
            else:
                a = tl.load(a_ptrs, mask=valid[:, None] & (ks[None, :] < K - k0), other=0.0)
                b = tl.load(b_ptrs, mask=ks[:, None] < K - k0, other=0.0)
            sa = tl.load(a_scale_ptrs + (k0 // group_k) * stride_ask, mask=valid, other=0.0)
            sb = tl.load(b_scale_ptrs + (k0 // group_k) * stride_bsk)
            if swap_ab:   # [N, M] = B^T A^T: the wide operand on the MMA's M side
                acc += tl.dot(tl.trans(b, (1, 0)), tl.trans(a, (1, 0))) * sb[:, None] * sa[None, :]
            else:
                acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        if swap_ab:
            acc = tl.trans(acc, (1, 0))
        if MUL_ROUTED_WEIGHT:
            acc = acc * tl.load(topk_weights_ptr + tokens, mask=valid, other=0.0)[:, None]
        out_cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + tokens[:, None] * stride_cm + out_cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=valid[:, None] & (out_cols[None, :] < N))

    return moe_gemm_block_fp8


def _align(topk_ids, block_m: int):
    """Routed rows sorted by expert, each expert's run padded to block_m (SGLang's sizes:
    EM = numel + (E + 1)(block_m - 1), or numel x block_m when numel < E + 1)."""
    import torch
    numel = topk_ids.numel()
    em = numel * block_m if numel < NUM_EXPERTS + 1 else numel + (NUM_EXPERTS + 1) * (block_m - 1)
    flat = topk_ids.flatten().cpu()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=NUM_EXPERTS)
    sorted_ids = torch.full((em,), numel, dtype=torch.int32)
    expert_ids = torch.full(((em + block_m - 1) // block_m,), -1, dtype=torch.int32)
    pos = start = 0
    for e in range(NUM_EXPERTS):
        n = int(counts[e])
        if n == 0:
            continue
        sorted_ids[pos:pos + n] = order[start:start + n].to(torch.int32)
        padded = -(-n // block_m) * block_m
        expert_ids[pos // block_m:(pos + padded) // block_m] = e
        pos += padded
        start += n
    return sorted_ids.cuda(), expert_ids.cuda(), torch.tensor([pos], dtype=torch.int32).cuda(), em


class MoeShapes:
    """Per-rank weights of one DeepSeek-R1 TP8 MoE layer in block FP8 (random values)."""

    def __init__(self):
        import torch
        fp8 = torch.float8_e4m3fn
        self.w13 = torch.randn(NUM_EXPERTS, 2 * INTER_PER_RANK, HIDDEN, device="cuda").to(fp8)
        self.w2 = torch.randn(NUM_EXPERTS, HIDDEN, INTER_PER_RANK, device="cuda").to(fp8)
        self.s13 = torch.rand(NUM_EXPERTS, 2 * INTER_PER_RANK // GROUP, HIDDEN // GROUP,
                              device="cuda")
        self.s2 = torch.rand(NUM_EXPERTS, HIDDEN // GROUP, INTER_PER_RANK // GROUP, device="cuda")
        self.kernel = _kernels()

    def _gemm(self, a, a_scale, w, w_scale, out, weights, sorted_ids, expert_ids, post, em,
              numel, tiles, mul_routed: bool, top_k: int):
        import triton
        bm, bn, bk, gm, warps, stages = tiles
        n, k = w.shape[1], w.shape[2]
        grid = (triton.cdiv(em, bm) * triton.cdiv(n, bn),)
        self.kernel[grid](
            a, w, out, a_scale, w_scale, weights, sorted_ids, expert_ids, post,
            n, k, em, numel,
            a.stride(0), a.stride(1), w.stride(0), w.stride(2), w.stride(1),
            out.stride(-2), out.stride(-1), a_scale.stride(0), a_scale.stride(1),
            w_scale.stride(0), w_scale.stride(2), w_scale.stride(1),
            group_n=GROUP, group_k=GROUP, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
            GROUP_SIZE_M=gm, MUL_ROUTED_WEIGHT=mul_routed, top_k=top_k,
            even_Ks=k % bk == 0, swap_ab=bm < 64 and bn >= 64,
            num_warps=warps, num_stages=stages)

    def step(self, num_tokens: int, prepared=None):
        """Both GEMMs of the layer (w13, then w2 on its output's first half) for num_tokens."""
        import torch
        if prepared is None:
            prepared = self.prepare(num_tokens)
        p = prepared
        self._gemm(p["a"], p["a_scale"], self.w13, self.s13, p["c13"], p["weights"],
                   p["sorted"], p["experts"], p["post"], p["em"], p["numel"], p["tiles"],
                   False, TOP_K)
        self._gemm(p["a2"], p["a2_scale"], self.w2, self.s2, p["c2"], p["weights"],
                   p["sorted"], p["experts"], p["post"], p["em"], p["numel"], p["tiles"],
                   True, 1)
        return torch.cuda.current_stream()

    def prepare(self, num_tokens: int) -> dict:
        import torch
        key, tiles = tiles_for(num_tokens)
        scores = torch.rand(num_tokens, NUM_EXPERTS - 1, device="cuda")
        routed = torch.topk(scores, TOP_K - 1, dim=1).indices
        shared = torch.full((num_tokens, 1), NUM_EXPERTS - 1, device="cuda")
        topk_ids = torch.cat([routed, shared], dim=1).to(torch.int32)   # [tokens, topk]
        sorted_ids, expert_ids, post, em = _align(topk_ids, tiles[0])
        fp8 = torch.float8_e4m3fn
        numel = topk_ids.numel()
        return {
            "key": key, "tiles": tiles, "em": em, "numel": numel,
            "a": torch.randn(num_tokens, HIDDEN, device="cuda").to(fp8),
            "a_scale": torch.rand(num_tokens, HIDDEN // GROUP, device="cuda"),
            "a2": torch.randn(numel, INTER_PER_RANK, device="cuda").to(fp8),
            "a2_scale": torch.rand(numel, INTER_PER_RANK // GROUP, device="cuda"),
            "c13": torch.empty(numel, 2 * INTER_PER_RANK, device="cuda", dtype=torch.bfloat16),
            "c2": torch.empty(numel, HIDDEN, device="cuda", dtype=torch.bfloat16),
            "weights": torch.rand(numel, device="cuda"),
            "sorted": sorted_ids, "experts": expert_ids, "post": post,
        }


def _cache_entries(cache_dir: str) -> int:
    return sum(1 for p in Path(cache_dir).rglob("*.cubin"))


def run_phase(phase: str, tokens: list, iters: int, cache_dir: str) -> list:
    """One process's walk over the token counts (this process's TRITON_CACHE_DIR)."""
    import torch
    moe = MoeShapes()
    records = []
    for num_tokens in tokens:
        prepared = moe.prepare(num_tokens)
        torch.cuda.synchronize()
        before = _cache_entries(cache_dir)
        t0 = time.perf_counter()
        moe.step(num_tokens, prepared)
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        for _ in range(iters):
            moe.step(num_tokens, prepared)
        torch.cuda.synchronize()
        hot_ms = (time.perf_counter() - t0) * 1e3 / iters
        records.append({
            "phase": phase, "num_tokens": num_tokens, "config_key": prepared["key"],
            "block_m": prepared["tiles"][0], "em": prepared["em"],
            "num_valid_tokens": prepared["numel"],
            "em_div16": prepared["em"] % 16 == 0, "nvt_div16": prepared["numel"] % 16 == 0,
            "first_ms": round(first_ms, 2), "hot_ms": round(hot_ms, 3),
            "new_cache_entries": _cache_entries(cache_dir) - before, "pid": os.getpid()})
        print(json.dumps(records[-1]), flush=True)
    return records


def _provenance(args) -> dict:
    import torch
    import triton
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "triton": triton.__version__, "cuda": torch.version.cuda, "cpu": cpu,
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "command": "python benchmarks/first_use_compile.py " + " ".join(args)}


def _child(phase: str, tokens: str, iters: int, cache_dir: str, out_file: str):
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    cmd = [sys.executable, __file__, "--child", phase, "--tokens", tokens, "--iters", str(iters),
           "--child-out", out_file, "--out", "-"]
    return subprocess.Popen(cmd, env=env)


def _table(records: list) -> str:
    lines = ["| phase | tokens | config key | BLOCK_M | EM%16 | nvt%16 | new kernels | first ms |"
             " hot ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['phase']} | {r['num_tokens']} | {r['config_key']} | {r['block_m']} | "
                     f"{'0' if r['em_div16'] else 'x'} | {'0' if r['nvt_div16'] else 'x'} | "
                     f"{r['new_cache_entries']} | {r['first_ms']:.1f} | {r['hot_ms']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for records.jsonl and table.md")
    p.add_argument("--tokens", default=DEFAULT_TOKENS, help="token counts, comma separated")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--ranks", type=int, default=8, help="processes of the parallel phase")
    p.add_argument("--parallel-tokens", default="1000,1001")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    tokens = [int(t) for t in args.tokens.split(",")]
    if args.child:
        recs = run_phase(args.child, tokens, args.iters, os.environ["TRITON_CACHE_DIR"])
        Path(args.child_out).write_text("".join(json.dumps(r) + "\n" for r in recs))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = _provenance(argv)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        for phase in ("cold", "disk"):
            f = str(Path(tmp) / f"{phase}.jsonl")
            t0 = time.perf_counter()
            _child(phase, args.tokens, args.iters, cache, f).wait()
            print(f"{phase}: {time.perf_counter() - t0:.1f} s wall", flush=True)
            records += [json.loads(x) for x in Path(f).read_text().splitlines()]
        shared = str(Path(tmp) / "shared_cache")
        procs = [(_child("parallel", args.parallel_tokens, args.iters, shared,
                         str(Path(tmp) / f"par{i}.jsonl")), i) for i in range(args.ranks)]
        for proc, _ in procs:
            proc.wait()
        for _, i in procs:
            f = Path(tmp) / f"par{i}.jsonl"
            if f.exists():
                records += [json.loads(x) for x in f.read_text().splitlines()]
    with open(out / "records.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps({**r, **prov}) + "\n")
    (out / "table.md").write_text(
        f"# First use of a fused-MoE Triton kernel at a new shape key\n\n"
        f"`{prov['command']}` on {prov['gpu']} (torch {prov['torch']}, Triton {prov['triton']},"
        f" CUDA {prov['cuda']}, {prov['cpus']} CPUs: {prov['cpu']}).\n\n" + _table(records))
    print((out / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
