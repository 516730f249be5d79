"""How SGLang 0.5.6.post2's FA3 decode splits each request's keys on the Qwen3-235B-A22B-FP8
H200 agg rows, and what per-CTA rate a serial chain would need to make their TPOT residual
(issue 39). A reading of the served code's split choice, evaluated at the rows' shapes; nothing
reads it, fits or sets anything from it.

    python benchmarks/qwen_h200_fa3_splits.py [--record benchmarks/results/silicon_rows.json.gz]
        [--out benchmarks/results/qwen_h200_fa3_splits.md] [--context-len 40960]

What the server runs (read in the sglang 0.5.6.post2 wheel; FA3 at sgl-attn f20a523, 2025-10-21,
the commit sgl-kernel's CMakeLists pins in the stored sglang copy -- that this is sgl-kernel
0.3.19's pin is not checked; FA3's dynamic splits date from 6752d62, 2025-02-24):
`FlashAttentionBackend.forward_decode` calls `flash_attn_with_kvcache` with
`num_splits=self.num_splits`, 0 (FA3's heuristic) unless `--enable-deterministic-inference`,
no `max_seqlen_k`, no `scheduler_metadata`, `cu_seqlens_q` and `cache_seqlens` (varlen), and in
the CUDA graph a page table of `[bs, context_len / page_size]` (page size 1 on this path). FA3's
`mha_fwd` then (1) takes seqlen_k = page-table width x page size for its static split bound,
`get_num_splits` -> `num_splits_heuristic` over KV heads x query blocks (batch counted as 1 when
splits are dynamic; the smallest split count within 85 % of the best wave efficiency, at most
min(128, SMs, key blocks)), fixed at capture; (2) runs
`prepare_varlen_num_blocks` on the device each replay (varlen: `use_prepare_varlen`), which gives
each request ceil(n_blocks / blocks_per_sm) splits, blocks_per_sm = ceil(total key blocks x 1.1 x
KV heads / SMs), capped by (1). sgl-kernel builds FA3 without FLASHATTENTION_DISABLE_SPLIT.
Tiles: head dim 128, paged KV without TMA (page size 1 is no multiple of kBlockN), 16 packed query
rows a KV head -> one 128-row query block, kBlockN 128 (`tile_size_fwd_sm90`).

Per row at mid-decode (every client's request at ISL + OSL / 2 keys, the CUDA graph's padded rows
at the fill value 1): the splits each request gets, the CTAs a layer launches, and the longest
chain of 128-key blocks one CTA reads in series, against the chain one CTA per (request, KV head)
would read (no split). Per (TP, clients) group: how much that chain grows per 1,000 keys of
context, and the per-CTA streaming rate (GB/s = 1e9 bytes/s) a serial chain would need for the
group's residual slope (`qwen_h200_context_residual.md`, through 0) over 94 layers.
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.qwen_h200_context_residual import qwen_rows  # noqa: E402
from epsim.cost.graph_padding import padded_size  # noqa: E402
from epsim.io.write import write_text  # noqa: E402

LAYERS, HEADS, KV_HEADS, HEAD_DIM = 94, 64, 4, 128
NUM_SM = 132                      # H200 SXM
BLOCK_M, BLOCK_N = 128, 128       # FA3 sm90 tile at these shapes (module docstring)
MAX_SPLITS = 128                  # get_num_splits' cap
BLOCK_BYTES = BLOCK_N * HEAD_DIM * 2 * 2   # one KV head's K and V of a 128-key block, bf16


def static_splits(total_m_blocks: int, num_n_blocks: int, num_sm: int = NUM_SM) -> int:
    """FA3's `num_splits_heuristic` below 0.8 x SMs of query blocks: the smallest split count
    whose wave efficiency is within 85 % of the best (at or above 0.8 x SMs: 1, the KV of one
    head being far below L2 here)."""
    if total_m_blocks >= 0.8 * num_sm or num_n_blocks <= 4:
        return 1
    top = min(MAX_SPLITS, num_sm, num_n_blocks)
    eff = []
    for s in range(1, top + 1):
        waves = total_m_blocks * s / num_sm
        eff.append(waves / math.ceil(waves))
    best = max(eff)
    return next(s for s, e in enumerate(eff, start=1) if e >= 0.85 * best)


def decode_splits(clients: int, context: int, kv_heads: int, context_len: int) -> dict:
    """One decode layer's FA3 split plan: `clients` requests of `context` keys, padded to the
    captured graph batch. Returns splits a request, CTAs, the longest per-CTA chain (blocks)."""
    bs = padded_size(clients, 512)
    group = HEADS // KV_HEADS
    total_m = kv_heads * math.ceil(group / BLOCK_M)   # varlen: get_num_splits counts batch 1
    static = static_splits(total_m, math.ceil(context_len / BLOCK_N))
    n_blocks = [math.ceil(context / BLOCK_N)] * clients + [1] * (bs - clients)
    per_sm = math.ceil(sum(n_blocks) * 1.1 * kv_heads / NUM_SM)
    splits = [max(min(math.ceil(n / per_sm), static), 1) for n in n_blocks]
    chain = max(math.ceil(n / s) for n, s in zip(n_blocks, splits))
    return {"bs": bs, "static": static, "splits": splits[0], "ctas": sum(splits) * kv_heads,
            "chain": chain, "one_pass": n_blocks[0]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--record", default=str(ROOT / "benchmarks/results/silicon_rows.json.gz"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/qwen_h200_fa3_splits.md"))
    parser.add_argument("--context-len", type=int, default=40960,
                        help="the served context length (Qwen3-235B-A22B's max_position_embeddings); "
                             "the static bound is the same for any length >= 16,384")
    args = parser.parse_args(argv)
    _, rows = qwen_rows(args.record)
    lines = ["# Qwen3-235B-A22B-FP8 H200 agg: FA3's decode splits at the rows' shapes", "",
             f"Generated by `python benchmarks/qwen_h200_fa3_splits.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}) from `{Path(args.record).name}`; the split "
             "rules are FA3's as SGLang 0.5.6.post2 calls them (the script's docstring). Context = "
             "ISL + OSL / 2 keys; chain = the most 128-key blocks one CTA reads in series.", "",
             "| layout | clients | graph bs | ISL x OSL | context | static bound | splits a request "
             "| CTAs a layer | chain | chain, no split | residual (ms) |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
    for r in rows:
        tp = int(r["layout"].split()[0][2:])
        kv_heads = max(KV_HEADS // tp, 1)
        ctx = int(r["isl"] + r["osl"] / 2)
        plan = decode_splits(r["concurrency"], ctx, kv_heads, args.context_len)
        res = r["measured"]["tpot_ms"] - r["epsim"]["tpot_ms"]
        groups.setdefault((tp, r["concurrency"]), []).append((ctx, res, plan["chain"]))
        lines.append(f"| {r['layout']} | {r['concurrency']} | {plan['bs']} | {r['isl']} x {r['osl']} "
                     f"| {ctx} | {plan['static']} | {plan['splits']} | {plan['ctas']} "
                     f"| {plan['chain']} | {plan['one_pass']} | {res:+.2f} |")
    lines += ["", "Per group: the residual's slope through 0 (ms of TPOT per 1,000 keys), the chain's "
              "growth per 1,000 keys (least squares), and the per-CTA rate a serial chain would need "
              "to make that slope: one 128-key block of one KV head (K and V, bf16, 64 KiB) per "
              "slope / 94 layers / chain growth.", "",
              "| TP | clients | rows | residual (ms / 1k keys) | chain growth (blocks / 1k keys) "
              "| needed rate (GB/s a CTA) | no split: growth | no split: needed rate |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (tp, c), pts in sorted(groups.items()):
        if len(pts) < 3:
            continue
        x, y, chain = (np.array(v, dtype=float) for v in zip(*pts))
        slope_ms = float((x / 1e3 * y).sum() / ((x / 1e3) ** 2).sum())
        growth = float(np.polyfit(x / 1e3, chain, 1)[0])
        one_pass = 1e3 / BLOCK_N

        def rate(g: float) -> str:
            if g < 0.05:    # the chain does not grow over the group's contexts: no rate makes it
                return "none (no growth)"
            us_per_block = slope_ms * 1e3 / LAYERS / g
            return f"{BLOCK_BYTES / (us_per_block * 1e3):.1f}"
        lines.append(f"| {tp} | {c} | {len(pts)} | {slope_ms:.2f} | {round(growth, 2) + 0.0:.2f} | {rate(growth)} "
                     f"| {one_pass:.2f} | {rate(one_pass)} |")
    write_text(Path(args.out), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
