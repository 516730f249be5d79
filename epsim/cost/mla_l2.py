"""The MLA prefill kernel's key tiles streamed through L2: how many each CTA reads, and the
L2 bandwidth they share.

A flash kernel's CTA reads every key tile its rows reach, and the CTAs of one sequence read the
same tiles: from HBM once, then from L2 again for each CTA. FlashAttention-3's MLA path (the
absorbed form aiconfigurator's collector times on Hopper: `tile_size_fwd_sm90` with a 64-dim
query RoPE and 512-dim values gives 64 x 64 tiles) packs a token's heads into a CTA's 64 rows,
so 128 heads are two CTAs a token and each re-reads its keys' latent (576 BF16 values, 1152
bytes a key) for 64 rows of math, ~121 FLOPs a byte. On AIC's h100_sxm and h200_sxm tables
(SGLang 0.5.14, 1-128 heads, chunks of 1-16384 tokens) the long rows take 1.9 us a tile on both
GPUs, whose SMs and L2 are the same and whose HBM differs 1.43x: 5.1 TB/s of tile reads, the
same at 8 to 128 heads (1 x 16384 tokens at 16 heads: 38.8 GB of tiles in 7.67 ms; at 128:
310 GB in 61.6 ms), not their HBM and not the tensor peak (a tile's math is 1.19 us at the BF16
peak). Short chunks run their tiles faster (1.3 us a tile at 64-token chunks): while most of an
SM's time goes to its CTAs' own costs (query load, output store) fewer tiles contend for L2.
So the kernel is `waves + queries + max(HBM stream, L2 stream, the busiest SM's tiles)`: the L2
stream carries every CTA's key tiles (`l2_kb`), at a fitted `l2_gbps`; a CTA's fixed cost is its
wave's (`wave_us`), added, not hidden under the stream (with the waves inside the max, the fit on
chunks up to 1024 tokens read 4.4 TB/s and priced the 16384-token chunks 15-22 % long;
docs/model.md 5d). Its queries are read from HBM between its tiles, not under them (`q_kb`):
FlashAttention-3's producer warp loads a CTA's Q and Qv (64 rows of 64 + 512 BF16 values) into
the one Q buffer only once the MMA warpgroups release it (`FwdNamedBarriers::QueryEmpty`), with
TMA's `EVICT_FIRST` hint, and the MMAs wait for them (`barrier_Q`, `barrier_Qv`;
Dao-AILab/flash-attention hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp, `load` and `mma`), so every
replay of AIC's collector streams them from HBM whatever fits the L2, at the fitted HBM rate;
the outputs' TMA store overlaps the next CTA's loads and stays on the max's HBM side.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from epsim.cost.flash import KernelWork, _ceil_sum

BF16_BYTES = 2.0
# FlashAttention-3's MLA tile (hdim 64 + hdimv 512: 64 query rows x 64 keys), one CTA an SM;
# its rows are (token, head) pairs, a token's heads side by side (PackGQA over one KV head)
ABSORBED_ROWS = 64
ABSORBED_KEYS = 64
# where a fit starts the L2 rate (GB/s): about the tile reads of the long rows above
L2_START_GBPS = 5000.0


@dataclass(frozen=True)
class PrefillWork(KernelWork):
    """A prefill kernel's `KernelWork`, the KB its CTAs stream through L2 (`l2_kb`, `[dp]`:
    every CTA's key tiles at BF16) and the KB of queries they read from HBM between their tiles
    (`q_kb`, `[dp]`; `mem_kb` then the outputs and keys alone), None where not counted."""

    l2_kb: np.ndarray | None = None
    q_kb: np.ndarray | None = None


def query_us(work: KernelWork, hbm_gbps: float) -> np.ndarray | float:
    """[dp] µs of the CTAs' query loads, read from HBM between their tiles (`q_kb` at
    `hbm_gbps`, module docstring), 0 where a work counts none (the flash kernel's, Blackwell's)."""
    q_kb = getattr(work, "q_kb", None)
    return 0.0 if q_kb is None else q_kb / hbm_gbps


@dataclass(frozen=True)
class AbsorbedTiles:
    """The absorbed kernel's CTAs and 64 x 64 tiles, `[dp]` float64 each."""

    ctas: np.ndarray
    total: np.ndarray        # tiles of every CTA
    busiest: np.ndarray      # tiles of the busiest SM


def absorbed_tiles(chunk, prefix, seqs, heads: int, num_sms: int) -> AbsorbedTiles:
    """Tiles of `seqs` [dp] causal chunks of `chunk` [dp] tokens after `prefix` [dp] keys,
    `heads` heads packed into 64-row CTAs. CTA k of a chunk ends at token `64 k / heads`, so it
    runs `prefix tiles + ceil(k / heads)` key tiles (64-key tiles, 64-row CTAs: the
    `epsim.cost.flash._ceil_sum` over a chunk's `ceil(chunk heads / 64)` CTAs); one CTA an SM,
    the busiest SM about `total / num_sms + longest / 2` where the CTAs outnumber the SMs
    (launched longest first, as `epsim.cost.flash.prefill_work` places them)."""
    per_chunk = np.ceil(chunk * heads / ABSORBED_ROWS)
    prefix_tiles = np.ceil(prefix / ABSORBED_KEYS)
    group = heads * ABSORBED_KEYS / ABSORBED_ROWS          # CTAs whose last token a tile holds
    ctas = seqs * per_chunk
    total = seqs * (per_chunk * prefix_tiles + _ceil_sum(per_chunk, group))
    longest = prefix_tiles + np.ceil(chunk / ABSORBED_KEYS)
    busiest = np.where(ctas <= num_sms, longest,
                       np.maximum(longest, total / num_sms + longest / 2.0))
    return AbsorbedTiles(ctas, total, busiest)


def l2_us(work: KernelWork, params) -> np.ndarray | None:
    """[dp] µs of the L2 stream (`l2_kb / l2_gbps`), None without one: no `l2_kb`, or no fitted
    `l2_gbps` (Blackwell's per-head records fit none; a profile from before it)."""
    l2_kb = getattr(work, "l2_kb", None)
    if l2_kb is None or not params.get("l2_gbps"):
        return None
    return l2_kb / float(params["l2_gbps"])


def fold_l2(work: KernelWork, params, hbm_gbps: float) -> KernelWork:
    """`work` with its memory side the longer of the HBM and L2 streams, as HBM KB at
    `hbm_gbps` (`epsim.cost.flash.kernel_us` then prices `max(memory, math)` as it does)."""
    us = l2_us(work, params)
    if us is None:
        return work
    return replace(work, mem_kb=np.maximum(work.mem_kb, us * hbm_gbps))


def l2_column(rows: np.ndarray, work: KernelWork, params, hbm_gbps: float) -> np.ndarray:
    """`rows` ([dp, 5], `epsim.cost.flash.kernel_features` of `fold_l2(work)`, memory column as
    µs at the datasheet HBM) with an L2 column ([dp, 6]): a row on the memory side whose L2
    stream is the longer moves its memory column to the L2 column (its KB)."""
    us = l2_us(work, params)
    l2_kb = np.broadcast_to(getattr(work, "l2_kb", None) if us is not None else 0.0,
                            rows.shape[:-1])
    on_l2 = (rows[..., 3] > 0) & (us * hbm_gbps > work.mem_kb) if us is not None \
        else np.zeros(rows.shape[:-1], dtype=bool)
    rows = rows.copy()
    rows[..., 3] = np.where(on_l2, 0.0, rows[..., 3])
    return np.concatenate([rows, np.where(on_l2, l2_kb, 0.0)[..., None]], axis=-1)
