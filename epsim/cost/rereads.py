"""Weight re-reads of FlashInfer's TRT-LLM MoE token tiles: each of an expert's `ceil(n_e / tile)`
tiles streams the expert's weights, the first from HBM, the others again (`reread_kb`; priced at
`StageParams.reread_gbps` by `epsim.cost.moe.trtllm_experts_us`, the tiles from
`epsim.cost.quant.trtllm_tile`)."""

from __future__ import annotations

import numpy as np


def reread_kb(rows_per_expert, tile, weight_bytes: float) -> np.ndarray:
    """[...] KB of weights the token tiles of a rank's experts read again: each of an expert's
    `ceil(n_e / tile)` tiles streams the expert's weights, the first from HBM, the others from
    L2 or HBM -- a hot expert under skewed routing runs many small tiles sized for the
    balanced share (`epsim.cost.quant.trtllm_tile`).

    Args:
        rows_per_expert: [..., experts] rows (token-expert pairs) of each local expert.
        tile: [...] rows per tile.
    """
    rows = np.asarray(rows_per_expert, dtype=np.float64)
    tile = np.asarray(tile, dtype=np.float64)
    sparse = _sparse_rereads(rows, tile)
    if sparse is not None:
        return sparse * weight_bytes * 1e-3
    tile = tile[..., None]
    whole = _whole_rows(rows, tile)
    if whole is not None:
        # whole rows n and power-of-two tiles 2^s (exact draws, the launcher's ladder): the
        # re-read tiles are max(n - 1, 0) >> s, each the float formula's value exactly (n / 2^s
        # is exact, a whole quotient k gives ceil(k - 1e-9) = k, any other lies >= 2^-8 above
        # its floor), and their sum an exact integer: the same bits, in integer arithmetic
        shift = np.frexp(tile)[1].astype(np.int32) - 1
        return np.right_shift(whole, shift).sum(axis=-1, dtype=np.int32) * weight_bytes * 1e-3
    extra = rows / tile                  # max(ceil(rows / tile - 1e-9) - 1, 0), in place
    extra -= 1e-9
    np.ceil(extra, out=extra)
    extra -= 1.0
    np.maximum(extra, 0.0, out=extra)
    return extra.sum(axis=-1) * weight_bytes * 1e-3


# `_sparse_rereads` sums the experts past the smallest tile alone while at most one in this many
# passes it (decode pools of [4, 58, 4, 64] rows: 36 µs against the dense sum's 320 with none past
# it, 350 against 306 with one in seven), judging first the first `SPARSE_HEAD` entries
SPARSE_SHARE = 16
SPARSE_HEAD = 256


def _sparse_rereads(rows: np.ndarray, tile: np.ndarray) -> np.ndarray | None:
    """`reread_kb`'s re-read tiles `[candidates, ...]` (before the weight's KB) summed over the
    few experts that hold more rows than the smallest tile, or None where `tile` is not
    `[candidates, *rows.shape[:-1]]` of positive sizes. An expert of at most the smallest
    tile's rows re-reads nothing (n / tile <= 1, less 1e-9, has ceil 1 at most); the others'
    terms are the float formula's, and every term and partial sum is a whole number below
    2^53, so the sum is exact in any order: the same bits as summing every expert (a decode
    batch's experts hold a few rows each; the hot ones only pass the smallest tile). None too
    where more than one in `SPARSE_SHARE` experts passes it (the dense sum is faster there)."""
    if tile.ndim != rows.ndim or tile.shape[1:] != rows.shape[:-1] or rows.size == 0:
        return None
    smallest = tile.min()
    if not smallest > 0.0:
        return None
    flat = rows.reshape(-1)
    # where more than one expert in `SPARSE_SHARE` passes it (a prefill's, a large batch's),
    # the dense sum below is faster: judged on the first layer's slots, then on all
    head = flat[:SPARSE_HEAD]
    if np.count_nonzero(~(head <= smallest)) * SPARSE_SHARE > head.size:
        return None
    keep = ~(flat <= smallest)                               # NaN rows kept: they propagate
    if np.count_nonzero(keep) * SPARSE_SHARE > flat.size:
        return None
    picked = np.flatnonzero(keep)
    slots = rows.shape[-1]
    cells = flat.size // slots                               # experts' (..., rank) cells
    num = tile.shape[0]
    cell = picked // slots
    extra = flat[picked] / tile.reshape(num, cells)[:, cell]     # [candidates, picked]
    extra -= 1e-9
    np.ceil(extra, out=extra)
    extra -= 1.0
    np.maximum(extra, 0.0, out=extra)
    index = (cell + cells * np.arange(num)[:, None]).reshape(-1)
    return np.bincount(index, weights=extra.reshape(-1),
                       minlength=num * cells).reshape(tile.shape)


# `reread_kb`'s integer path: below it n - 1e-9 < n in float64, and a sum over at most
# `WHOLE_ROWS_SLOTS` slots fits an int32
WHOLE_ROWS_MAX = 1 << 20
WHOLE_ROWS_SLOTS = 1 << 11


def _whole_rows(rows: np.ndarray, tile: np.ndarray) -> np.ndarray | None:
    """[..., experts] int32 `max(rows - 1, 0)` where every entry of `rows` is a whole number in
    [0, `WHOLE_ROWS_MAX`), there are at most `WHOLE_ROWS_SLOTS` experts, and every `tile` is a
    power of two in [1, 2^30]; else None."""
    if rows.size == 0 or tile.size == 0 or rows.shape[-1] > WHOLE_ROWS_SLOTS:
        return None
    head = rows.reshape(-1)[:64]
    if not np.array_equal(head, np.floor(head)):        # most fractional rows end here
        return None
    mantissa, exponent = np.frexp(tile)
    if not (np.all(mantissa == 0.5) and exponent.min() >= 1 and exponent.max() <= 31):
        return None
    if not (rows.min() >= 0.0 and rows.max() < WHOLE_ROWS_MAX):
        return None
    whole = rows.astype(np.int32)
    if not np.array_equal(whole, rows):
        return None
    whole -= 1
    np.maximum(whole, 0, out=whole)
    return whole
