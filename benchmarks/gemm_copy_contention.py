"""A GEMM beside a copy kernel on a few SMs: how much each slows the other (one GPU).

Two-batch overlap in prefill runs DeepEP's normal dispatch/combine (20 SMs of its own, reading
the tokens it sends and writing the ones it receives: HBM traffic on both GPUs) on a second
stream while the expert GEMMs (DeepGEMM told to keep off those SMs) run on the compute stream.
The LMSYS blog and DeepEP say both run slower together than alone; by how much is not
published. One GPU cannot run DeepEP across ranks, but it can run the HBM side of it: a copy
kernel on `--copy-ctas` CTAs (one per SM) moving the exchange's bytes, beside an FP8 or BF16
GEMM of the experts' shape with cuBLAS told to leave that many SMs free (torch's SM carveout,
where this torch has it). Per point:

- `gemm_all_sms_us`: the GEMM alone on every SM; `gemm_alone_us`, `copy_alone_us`: each alone
  (the GEMM with the copy's SMs carved out), CUDA events around `--iters` back-to-back launches
  (device time per launch);
- `gemm_beside_us`: the GEMMs while the copy kernel runs on the other stream the whole time (its
  launches queued to outlast them), `copy_beside_us` the same for the copies;
- `gemm_slowdown`, `copy_slowdown`: beside / alone.

What this does not measure: NVLink or NIC contention (the GEMM uses neither) and DeepEP's own
kernels; the records say so (`proxy`). Writes `records.jsonl` and `table.md` to `--out`.

    python benchmarks/gemm_copy_contention.py --out $OUT/contention
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from epsim.io.write import write_text  # noqa: E402


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True, help="folder for records.jsonl and table.md")
    p.add_argument("--tokens", type=int, nargs="+", default=[512, 2048, 8192],
                   help="GEMM rows (tokens an expert group receives)")
    p.add_argument("--hidden", type=int, default=7168, help="GEMM K (model hidden size)")
    p.add_argument("--inter", type=int, default=4096, help="GEMM N (gate+up of one expert)")
    p.add_argument("--copy-mib", type=float, nargs="+", default=[56.0, 112.0],
                   help="bytes one copy launch moves, MiB (8192 tokens x 7168: 56 FP8, 112 BF16)")
    p.add_argument("--copy-ctas", type=int, nargs="+", default=[20, 24],
                   help="CTAs of the copy kernel (DeepEP normal's SMs)")
    p.add_argument("--dtypes", nargs="+", default=["fp8", "bf16"], choices=("fp8", "bf16"))
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args(argv)
    for name in ("tokens", "copy_ctas"):
        if any(v < 1 for v in getattr(args, name)):
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.hidden < 16 or args.inter < 16 or args.iters < 3:
        p.error("--hidden and --inter must be >= 16 and --iters >= 3")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
        # a persistent grid: each CTA strides over the buffer, so `grid` CTAs hold `grid` SMs
        start = tl.program_id(0) * BLOCK
        step = tl.num_programs(0) * BLOCK
        for off in range(start, n, step):
            idx = off + tl.arange(0, BLOCK)
            mask = idx < n
            tl.store(dst + idx, tl.load(src + idx, mask=mask), mask=mask)

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    carveout = getattr(torch._C, "_set_sm_carveout_experimental", None)
    s_gemm, s_copy = torch.cuda.Stream(), torch.cuda.Stream()

    def timed(stream, fn, iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            start.record(stream)
            for _ in range(iters):
                fn()
            end.record(stream)
        return start, end

    def per_launch_us(events, iters):
        torch.cuda.synchronize()
        return events[0].elapsed_time(events[1]) * 1e3 / iters

    def median(fn_measure, repeats=3):
        return statistics.median(fn_measure() for _ in range(repeats))

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for dtype in args.dtypes:
        for tokens in args.tokens:
            a = torch.randn(tokens, args.hidden, device=dev)
            b = torch.randn(args.inter, args.hidden, device=dev)
            if dtype == "fp8":
                a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
                one = torch.ones((), device=dev)
                gemm = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,  # noqa: E731
                                                out_dtype=torch.bfloat16)
            else:
                a16, b16 = a.bfloat16(), b.bfloat16()
                gemm = lambda: a16 @ b16.t()  # noqa: E731
            for ctas in args.copy_ctas:
                for mib in args.copy_mib:
                    n = int(mib * 2**20) // 4
                    src = torch.randn(n, device=dev)
                    dst = torch.empty_like(src)
                    copy = lambda: copy_kernel[(ctas,)](src, dst, n, BLOCK=4096)  # noqa: E731
                    for fn in (gemm, copy):         # warm-up: compile, heuristics, clocks
                        for _ in range(3):
                            fn()
                    torch.cuda.synchronize()
                    gemm_all_sms = median(lambda: per_launch_us(timed(s_gemm, gemm, args.iters), args.iters))
                    if carveout is not None:       # cuBLAS leaves the copy's SMs, as DeepGEMM's num_sms
                        carveout(ctas)
                        for _ in range(3):
                            gemm()
                    gemm_alone = median(lambda: per_launch_us(timed(s_gemm, gemm, args.iters), args.iters))
                    copy_alone = median(lambda: per_launch_us(timed(s_copy, copy, args.iters), args.iters))
                    # the other stream's launches queued first, long enough to outlast the measured ones
                    cover_copy = max(3, int(3 * gemm_alone * args.iters / copy_alone))
                    cover_gemm = max(3, int(3 * copy_alone * args.iters / gemm_alone))

                    def beside(measured, fn, other, other_fn, cover):
                        torch.cuda.synchronize()
                        timed(other, other_fn, cover)
                        return per_launch_us(timed(measured, fn, args.iters), args.iters)
                    gemm_beside = median(lambda: beside(s_gemm, gemm, s_copy, copy, cover_copy))
                    copy_beside = median(lambda: beside(s_copy, copy, s_gemm, gemm, cover_gemm))
                    if carveout is not None:
                        carveout(None)
                    rec = {"dtype": dtype, "tokens": tokens, "hidden": args.hidden, "inter": args.inter,
                           "copy_bytes": n * 4, "copy_ctas": ctas, "sm_carveout": carveout is not None,
                           "gemm_all_sms_us": round(gemm_all_sms, 2),
                           "gemm_alone_us": round(gemm_alone, 2), "gemm_beside_us": round(gemm_beside, 2),
                           "copy_alone_us": round(copy_alone, 2), "copy_beside_us": round(copy_beside, 2),
                           "gemm_slowdown": round(gemm_beside / gemm_alone, 3),
                           "copy_slowdown": round(copy_beside / copy_alone, 3),
                           "copy_alone_gbps": round(2 * n * 4 / copy_alone / 1e3, 1),
                           "gemm_alone_tflops": round(2 * tokens * args.hidden * args.inter / gemm_alone / 1e6, 1),
                           "proxy": "HBM side of a DeepEP normal exchange: a local Triton copy kernel of "
                                    "copy_ctas CTAs of 4 warps, no shared memory held (DeepEP's hold "
                                    "96-192 KB); no NVLink/NIC traffic; cuBLAS GEMM, not DeepGEMM",
                           "device": props.name, "torch": torch.__version__,
                           "python": platform.python_version()}
                    records.append(rec)
                    print(json.dumps(rec), flush=True)
    lines = ["| dtype | tokens | copy MiB | CTAs | GEMM alone us | beside | slowdown | copy alone us "
             "| beside | slowdown |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['dtype']} | {r['tokens']} | {r['copy_bytes'] / 2**20:.0f} | {r['copy_ctas']} "
                     f"| {r['gemm_alone_us']} | {r['gemm_beside_us']} | {r['gemm_slowdown']} "
                     f"| {r['copy_alone_us']} | {r['copy_beside_us']} | {r['copy_slowdown']} |")
    write_text(out / "records.jsonl", "".join(json.dumps(r) + "\n" for r in records))   # atomically
    write_text(out / "table.md", f"# GEMM beside a copy kernel ({props.name})\n\n`python "
                                 f"benchmarks/gemm_copy_contention.py {' '.join(argv or sys.argv[1:])}`"
                                 f"\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
