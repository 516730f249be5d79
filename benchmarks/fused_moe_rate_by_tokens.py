"""The fused Triton MoE's achieved rate by tokens, BF16 against block-FP8, from AIC's op tables: does
the BF16 default tile's fall at large M follow the call's length (a clock held down through the
collector's burst) or the tokens (the kernel)?

    python benchmarks/fused_moe_rate_by_tokens.py [--systems b200_sxm gb300 ...] [--out FILE]

Rows: `moe/sglang/<version>/moe_perf.parquet`, kernel `sglang_fused_moe_triton`, EP 1, MoE-TP 1,
balanced routing, 1024-16384 tokens (the median where a key repeats). Each cell: call ms / TFLOP/s,
FLOPs 2 x 3 x tokens x top-k x N x H (gate, up and down projections; the non-gated E 512 N 2688
shape left out). The collector times both formats alike (`collector/sglang/collect_moe.py`,
`benchmark_config`: 5 calls a CUDA-graph replay, 5 eager and 5 graph warm-ups, 10 timed replays),
so a clock that falls with busy time would slow a block-FP8 call as much as a BF16 call of the
same length. A diagnosis from op-level tables; fits and sets nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.calibrate.aic_tables import parse_source  # noqa: E402
from epsim.fused_moe_config import FUSED_TRITON_KERNEL  # noqa: E402

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
DTYPES = ("bfloat16", "fp8_block")
NON_GATED = {(512, 2688)}          # Nemotron-3 Super's relu2 experts: two projections, not three


def rate_table(system: str) -> list[str]:
    """Markdown lines: one row per (format, shape), one cell per tokens (call ms / TFLOP/s)."""
    table = next(t for t in parse_source(f"aic:{system}/sglang").tables() if t.name == "moe_perf")
    frame = table.frame()
    frame = frame[(frame.kernel_source == FUSED_TRITON_KERNEL) & (frame.moe_ep_size == 1)
                  & (frame.moe_tp_size == 1) & (frame.distribution == "balanced")
                  & (frame.num_tokens >= 1024) & frame.moe_dtype.isin(DTYPES)]
    tokens = sorted(frame.num_tokens.unique())
    lines = [f"### {system} ({table.rel})", "",
             "| format | E | N | H | top-k | " + " | ".join(str(t) for t in tokens) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(tokens)]
    keys = ["moe_dtype", "num_experts", "inter_size", "hidden_size", "topk"]
    for (dtype, e, n, h, k), shape in frame.groupby(keys):
        if (e, n) in NON_GATED:
            continue
        ms = shape.groupby("num_tokens")["latency"].median()
        cells = [f"{ms[t]:.1f} / {2 * 3 * t * k * n * h / (ms[t] * 1e9):.0f}" if t in ms else ""
                 for t in tokens]
        lines.append(f"| {dtype} | {e} | {n} | {h} | {k} | " + " | ".join(cells) + " |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--out", default=None, help="also write the tables to this file")
    args = parser.parse_args(argv)
    lines = ["# Fused Triton MoE rate by tokens (call ms / TFLOP/s), BF16 and block-FP8", "",
             f"`python benchmarks/fused_moe_rate_by_tokens.py --systems {' '.join(args.systems)}`", ""]
    for system in args.systems:
        lines += rate_table(system)
    text = "\n".join(lines)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
