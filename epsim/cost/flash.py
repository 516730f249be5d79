"""Work of a flash-attention kernel on a GPU: its thread blocks (CTAs), tiles and waves.

The single-GPU records time `scaled_dot_product_attention`'s flash kernel (FlashAttention-2,
the one the GPU image runs for GQA with head_dim 128). Its time is set by how its CTAs land
on the SMs, not by the FLOPs of the (query, key) pairs alone:

- **decode** (one query per sequence): the query heads sharing a KV head are swapped into
  the row axis, so a CTA covers one (sequence, KV head) and its rows are padded to the
  kernel's 64 (split-KV kernel) or 128 (plain kernel) query rows. When those CTAs cannot fill
  the GPU (fewer than 0.8 x 2 per SM) the keys are split over `num_splits` CTAs, chosen as
  FlashAttention-2's `num_splits_heuristic` does, and a combine kernel follows. All CTAs are
  equal: the busiest slot runs `ceil(ctas / slots)` of them.
- **prefill** (causal): a CTA covers 128 query rows of one (sequence, head); the CTA of the
  i-th row block of a chunk after a prefix of p keys computes `ceil(p / 128) + i + 1` tiles of
  128 x 128. They are launched longest first and greedily placed on the slots; the busiest
  slot's tiles are `longest` when every CTA has a slot, else about
  `max(longest, total / slots + longest / 2)` (-12 % to +7 % of a greedy placement over 32-384
  (chunk, head) groups of 128-16384 tokens, tests/epsim/cost/test_flash.py; docs/model.md 5a).

A slot is one of the two CTAs resident per SM (registers of a 4-warp head_dim-128 CTA): a CTA
runs at a slot's share of the tensor rate whether or not its SM has another (its own four
warps issue the MMAs; fitted on prefills up to 1024 tokens, this predicts 2048-16384 within
2.3 %, `epsim validate`'s tokens axis). A tile costs
`rows x 128 keys x head_dim x 4` FLOPs (scores and values); the kernel's time is

    base_us + waves x wave_us + splits x per_split_us
            + max(bytes / hbm_gbps, busiest slot's FLOPs x slots / tflops)

`waves` = `ceil(ctas / slots)`: each wave pays its CTAs' prologue and epilogue; each split of
the keys a partial output written and read back by the combine. `ATTENTION_TERMS`
(`epsim.cost.linear`) orders the design row.

The grid above is FlashAttention-2's (`FA2_GRIDS`). FlashAttention-3 as SGLang runs it on Hopper
(`FA3_GRIDS`: AIC's H100 and H200 tables) has one CTA per SM and packs a KV head's query heads
into a CTA's rows in prefill too (`PrefillGrid.pack_gqa`); FlashInfer's TRT-LLM-gen kernels on
Blackwell (`TRTLLM_GRIDS`) run the decode rule of `epsim.cost.flash_trtllm` and a context kernel of
256-row CTAs, two 128-row tiles over one key loop, one CTA per SM (`PrefillGrid.row_tiles`). A fit
and its pricing use the grid of the kernel its records timed (`kernel_grids`, `component_grids`;
docs/model.md 5a).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from epsim.cost.flash_trtllm import (PIPELINE_TILES, TRTLLM_KEY_TILE, ctas_per_seq, key_splits,
                                     math_rows, reduction_rows, tile_rows)
from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.fast_init import fast_init
from epsim.spec.hardware import HardwareSpec

KEY_BLOCK = 128           # keys per split-KV block and per prefill tile
PREFILL_ROWS = 128        # query rows of a CTA of the plain (prefill, unsplit decode) kernel
SPLIT_ROWS = 64           # query rows of a split-KV CTA
CTAS_PER_SM = 2           # CTAs resident per SM (registers of a 4-warp head_dim-128 CTA)
MAX_SPLITS = 128
BYTES = 2.0               # BF16 Q, K, V, O


@dataclass(frozen=True)
class DecodeGrid:
    """How a decode kernel tiles its work onto the SMs.

    Attributes:
        plain_rows: query rows of a CTA of the unsplit kernel.
        split_rows: query rows of a split-KV CTA.
        key_block: keys per split-KV block (the heuristic's `num_n_blocks` unit).
        ctas_per_sm: CTAs resident per SM (the slots are `ctas_per_sm x num_sms`); the split
            heuristic fills these slots.
        rule: "fa2": FlashAttention's rows and `num_splits` (the fields above); "trtllm":
            FlashInfer's TRT-LLM-gen kernel selection (`epsim.cost.flash_trtllm`, which sets its
            own rows and splits).
        split_keys: the "fa2" rule may split a sequence's keys to fill the SMs; False: never
            (a kernel launched with one split, `epsim.cost.mla_decode`'s cutlass_mla).
    """

    plain_rows: int = PREFILL_ROWS
    split_rows: int = SPLIT_ROWS
    key_block: int = KEY_BLOCK
    ctas_per_sm: int = CTAS_PER_SM
    rule: str = "fa2"
    split_keys: bool = True


# FlashAttention-2's decode (the single-GPU records' GQA kernel, module docstring)
FA2_DECODE = DecodeGrid()


@fast_init
@dataclass(frozen=True)
class KernelWork:
    """What one attention kernel launch does per DP rank, `[dp]` float64 each.

    Attributes:
        waves: CTA waves (`ceil(ctas / slots)`, 0 without work).
        splits: key splits of a split-KV decode (a combine kernel follows), else 0.
        mflops: the busiest slot's tile FLOPs times the slot count, MFLOP (at the GPU's whole
            tensor rate this is the kernel's math time).
        mem_kb: Q, K, V and O bytes moved, KB.
        overlap: the waves' fixed cost hides under the memory stream (inside the max of
            `kernel_us`): a persistent kernel that prefetches its next tile's KV while it
            finishes one (FlashInfer's TRT-LLM-gen decode); else it adds to it.
    """

    waves: np.ndarray
    splits: np.ndarray
    mflops: np.ndarray
    mem_kb: np.ndarray
    overlap: bool = False


def attention_kernel_defaults(hardware: HardwareSpec) -> dict[str, float]:
    """Datasheet parameters of `any/attention_decode|prefill`: HBM and tensor peaks times stated
    efficiencies, a few µs of fixed cost per launch and per wave."""
    return {"base_us": 8.0, "wave_us": 2.0, "per_split_us": 0.5,
            "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY,
            "tflops": hardware.bf16_tflops * TENSOR_EFFICIENCY}


def carried_kernel_rates(params: dict[str, float], fitted_on: HardwareSpec, on: HardwareSpec,
                         decode: bool) -> dict[str, float]:
    """A fitted attention kernel's `params` (`ATTENTION_TERMS`: absolute rates) carried from the
    GPU it was fitted on to another (the system hold-out): both rates (`hbm_gbps`, `tflops`)
    scaled by the ratio of the datasheet figure that binds the kernel, the fixed costs
    (`base_us`, `wave_us`, `per_split_us`) kept.

    - decode: the HBM's. Each CTA reads its own sequence's KV tiles once; a tile's FLOPs per
      KV byte are its padded query rows (64 on Hopper's FA3, 8-128 on TRT-LLM-gen), far below a
      ridge of ~300 FLOP/B (989 / 3.35 on H100), so the busiest slot's tile stream -- the side
      the fit calls `tflops` -- runs at the HBM's rate too. AIC's tables: `tflops / hbm_gbps`
      fitted 0.0715 on H100 and 0.0712 on H200 (the same die and tensor peak; 224 against 308
      TFLOP/s, 3137 against 4322 GB/s).
    - prefill: the BF16 peak's (the SMs' count x clock). A head's row blocks re-read its K and V
      tiles through L2, so the fitted byte rate is the SMs' feed, not the HBM's: 2866 GB/s on
      H100 and 3006 on H200, whose HBM differs 1.43x (B200 3655, GB200 3921: 1.07x where the
      BF16 peaks differ 1.11x).

    The same GPU, or one without a BF16 peak on either side: `params` as they are."""
    if fitted_on.name == on.name or not (fitted_on.bf16_tflops and on.bf16_tflops):
        return dict(params)
    ratio = (on.hbm_gbps / fitted_on.hbm_gbps if decode
             else on.bf16_tflops / fitted_on.bf16_tflops)
    return {**params, "hbm_gbps": params["hbm_gbps"] * ratio, "tflops": params["tflops"] * ratio}


@lru_cache(maxsize=4096)
def num_splits(units: int, num_key_blocks: int, num_sms: int,
               ctas_per_sm: int = CTAS_PER_SM) -> int:
    """Key splits of a decode launch, FlashAttention-2's `num_splits_heuristic` (and
    FlashAttention-3's, which runs it over one CTA per SM).

    Args:
        units: CTAs before splitting (sequences x KV heads x split-row blocks).
        num_key_blocks: `ceil(context / key_block)`.
        ctas_per_sm: CTAs resident per SM (`DecodeGrid`).
    Returns:
        The fewest splits whose wave efficiency (`n / ceil(n)`, n = units x splits over
        `ctas_per_sm` CTAs per SM) is within 85 % of the best; 1 when the CTAs already fill
        the GPU.
    """
    slots = ctas_per_sm * num_sms
    if units <= 0 or units >= 0.8 * slots:
        return 1
    top = min(MAX_SPLITS, slots, num_key_blocks)

    def eligible(s: int) -> bool:          # a split count that changes the blocks per split
        return s == 1 or math.ceil(num_key_blocks / s) != math.ceil(num_key_blocks / (s - 1))

    def efficiency(s: int) -> float:
        n = units * s / slots
        return n / math.ceil(n)

    candidates = [s for s in range(1, top + 1) if eligible(s)]
    best = max(efficiency(s) for s in candidates)
    return next(s for s in candidates if efficiency(s) >= 0.85 * best)


# above this many (units, blocks) pairs, `_fill_splits` looks each distinct pair up once
DISTINCT_SPLITS_ABOVE = 32


def _fill_splits(units: np.ndarray, blocks: np.ndarray, num_sms: int,
                 ctas_per_sm: int) -> np.ndarray:
    """[n] `num_splits` of each (units, blocks) pair ([n] int64 each). Many steps priced at
    once (`AttentionAhead`: up to 256 steps of every rank) hold few distinct pairs, the blocks
    growing one per `key_block` steps: each distinct pair is looked up once (the same values;
    a lookup a pair cost a wide decode batch's leaps a tenth of their time)."""
    if units.shape[0] <= DISTINCT_SPLITS_ABOVE or min(units.min(), blocks.min()) < 0 \
            or max(units.max(), blocks.max()) >= 1 << 31:
        return np.array([num_splits(u, b, num_sms, ctas_per_sm)
                         for u, b in zip(units.tolist(), blocks.tolist())], dtype=np.int64)
    pairs, where = np.unique((units << 32) | blocks, return_inverse=True)
    found = np.array([num_splits(p >> 32, p & 0xFFFFFFFF, num_sms, ctas_per_sm)
                      for p in pairs.tolist()], dtype=np.int64)
    return found[where.reshape(-1)]


@dataclass(frozen=True)
class DecodeCounts:
    """What a decode launch takes from its sequence counts alone, `[dp]` each (`decode_counts`):
    a decode batch keeps its counts for many steps while its contexts grow."""

    seqs: np.ndarray           # float64 decoding sequences per rank
    busy: np.ndarray           # seqs > 0
    all_busy: bool
    units: np.ndarray          # int64 CTAs before any key split
    fill: np.ndarray           # ranks whose CTAs fill less than 0.8 of the slots: may split keys
    may_split: bool            # fill.any()
    plain_ctas: np.ndarray     # CTAs of the plain (unsplit) kernel
    plain_waves: np.ndarray    # its waves (0 on an idle rank)
    query_bytes: np.ndarray    # 2 x seqs x heads x head_dim (the queries and outputs)


def decode_counts(seqs: np.ndarray, heads: int, kv_heads: int, head_dim: int,
                  num_sms: int, grid: DecodeGrid = FA2_DECODE) -> DecodeCounts:
    """The terms of `decode_work` that depend on the sequence counts alone."""
    seqs = np.asarray(seqs, dtype=np.float64)
    busy = seqs > 0
    rows = max(heads // max(kv_heads, 1), 1)
    slots = grid.ctas_per_sm * num_sms
    num_seqs = np.rint(seqs)
    units = num_seqs.astype(np.int64) * (kv_heads * math.ceil(rows / grid.split_rows))
    fill = (units > 0) & (units < 0.8 * slots) & grid.split_keys
    plain_ctas = num_seqs * kv_heads * math.ceil(rows / grid.plain_rows)
    return DecodeCounts(seqs, busy, bool(busy.all()), units, fill, bool(fill.any()), plain_ctas,
                        np.where(busy, np.ceil(plain_ctas / slots), 0.0),
                        2.0 * seqs * heads * head_dim)


def decode_work(seqs: np.ndarray, context: np.ndarray, heads: int, kv_heads: int,
                head_dim: int, num_sms: int, counts: DecodeCounts | None = None,
                kv_ratio: float = 1.0, grid: DecodeGrid = FA2_DECODE) -> KernelWork:
    """The decode kernel of one layer: `seqs` single-token queries, each against its KV cache.

    Args:
        seqs: [dp] decoding sequences per rank.
        context: [dp] KV entries they read in all (sum of their context lengths); the CTAs
            are sized at the mean context.
        heads, kv_heads: query and KV heads on the rank; head_dim: per head.
        counts: `decode_counts` of these `seqs` when the caller keeps them (`DecodeKernel`).
        kv_ratio: bytes of a KV-cache element / 2 (`kv_cache_dtype`: 1 for BF16, 0.5 for FP8).
        grid: the kernel's CTAs (`DecodeGrid`; `counts` must be of the same grid).
    """
    if counts is None:
        counts = decode_counts(seqs, heads, kv_heads, head_dim, num_sms, grid)
    if grid.rule == "trtllm":
        return _trtllm_decode_work(counts, context, heads, kv_heads, head_dim, num_sms, kv_ratio)
    seqs, busy = counts.seqs, counts.busy
    context = np.asarray(context, dtype=np.float64)
    slots = grid.ctas_per_sm * num_sms
    mean_ctx = context / seqs if counts.all_busy else np.divide(
        context, seqs, out=np.zeros_like(context), where=busy)
    # `num_splits` is 1 where the CTAs fill the GPU (or there are none): look up only the
    # others, once per rank (an lru_cache; a per-step np.unique over the (units, blocks)
    # pairs cost several times more than the lookups it saved)
    # (contexts `[steps, dp]`, steps of these counts priced at once: the same bits per step,
    # since every term is elementwise and the split formulas give the plain kernel's terms
    # where a rank does not split)
    any_split = False
    if counts.may_split:
        fill, units = counts.fill, counts.units
        if mean_ctx.shape != fill.shape:       # steps at once (one step: most calls, as is)
            fill = _spread(fill, mean_ctx.shape)
            units = _spread(units, mean_ctx.shape)
        blocks = np.ceil(mean_ctx / grid.key_block).astype(np.int64)
        splits = np.ones(mean_ctx.shape, dtype=np.int64)
        splits[fill] = _fill_splits(units[fill], blocks[fill], num_sms, grid.ctas_per_sm)
        split = splits > 1
        any_split = bool(split.any())
    plain_keys = np.ceil(mean_ctx / 64.0) * 64.0
    if any_split:
        # split-KV CTAs: `split_rows` rows, ceil(blocks / splits) key blocks; the plain
        # kernel: `plain_rows` rows, the keys in its 64-key blocks
        ctas = np.where(split, counts.units * splits, counts.plain_ctas)
        keys = np.where(split, np.ceil(blocks / splits) * grid.key_block, plain_keys)
        m = np.where(split, grid.split_rows, grid.plain_rows)
        num_key_splits = np.where(split, splits, 0).astype(np.float64)
        waves = np.where(busy, np.ceil(ctas / slots), 0.0)
    else:                       # no rank splits its keys (most steps): the plain kernel's terms
        keys, m, num_key_splits = plain_keys, grid.plain_rows, np.zeros_like(seqs)
        waves = counts.plain_waves
    mflops = waves * keys * m * head_dim * 4.0 * slots * 1e-6
    mem_kb = BYTES * (counts.query_bytes + kv_ratio * (2.0 * context * kv_heads * head_dim)) * 1e-3
    if not counts.all_busy:     # an idle rank: no work (where-less when every rank has some)
        mflops = np.where(busy, mflops, 0.0)
        mem_kb = np.where(busy, mem_kb, 0.0)
    return KernelWork(waves, num_key_splits, mflops, mem_kb)


def _spread(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`x` [dp] repeated to `shape` [steps, dp], a new array: `np.broadcast_to`'s values (its
    Python-level set-up cost a leap's split pricing more than the copy)."""
    out = np.empty(shape, dtype=x.dtype)
    out[...] = x
    return out


def _trtllm_decode_work(counts: DecodeCounts, context: np.ndarray, heads: int, kv_heads: int,
                        head_dim: int, num_sms: int, kv_ratio: float) -> KernelWork:
    """`decode_work` of FlashInfer's TRT-LLM-gen decode kernel (`epsim.cost.flash_trtllm`): one
    CTA per SM, `tile_rows` rows, the keys split `key_splits` ways (set by the CTA count, not
    the context), each CTA's keys in 128-key tiles at `math_rows`, `PIPELINE_TILES` more for
    the pipeline's fill and drain; the `splits` term is the
    in-kernel reduction's `reduction_rows`; the waves' cost overlaps the memory stream."""
    seqs, busy = counts.seqs, counts.busy
    context = np.asarray(context, dtype=np.float64)
    units = np.rint(seqs) * ctas_per_seq(heads, kv_heads)
    splits = key_splits(units.astype(np.int64), num_sms)
    rows = tile_rows(heads, kv_heads)
    mean_ctx = np.divide(context, seqs, out=np.zeros_like(context), where=busy & (seqs > 0))
    # a CTA's key tiles, plus the pipeline's fill and drain (`PIPELINE_TILES`)
    keys = (np.maximum(np.ceil(mean_ctx / (splits * TRTLLM_KEY_TILE)), 1.0)
            + PIPELINE_TILES) * TRTLLM_KEY_TILE
    waves = np.where(busy, np.ceil(units * splits / num_sms), 0.0)
    mflops = np.where(busy, waves * keys * math_rows(rows) * head_dim * 4.0 * num_sms * 1e-6, 0.0)
    mem_kb = BYTES * (counts.query_bytes + kv_ratio * (2.0 * context * kv_heads * head_dim)) * 1e-3
    reduction = np.broadcast_to(reduction_rows(splits, rows), mflops.shape)
    return KernelWork(waves, np.where(busy, reduction, 0.0), mflops,
                      np.where(busy, mem_kb, 0.0), overlap=True)


COUNTS_KEPT = 8          # sequence counts a `DecodeKernel` remembers


class DecodeKernel:
    """`kernel_us(decode_work(seqs, context, ...), params)` of one model on one GPU, with the
    `decode_counts` of the last few sequence counts remembered (the same bits).

    Args:
        heads, kv_heads, head_dim: one rank's kernel (`attention_heads`); params: fitted
            `any/attention_decode` terms (`ATTENTION_TERMS`).
    """

    def __init__(self, heads: int, kv_heads: int, head_dim: int, num_sms: int,
                 params: dict[str, float], kv_ratio: float = 1.0,
                 grid: DecodeGrid = FA2_DECODE):
        self.heads, self.kv_heads, self.head_dim, self.num_sms = heads, kv_heads, head_dim, num_sms
        self.params, self.kv_ratio, self.grid = params, kv_ratio, grid
        self._counts: dict[bytes, DecodeCounts] = {}

    def counts(self, seqs: np.ndarray) -> DecodeCounts:
        """`decode_counts` of `seqs` ([dp]), remembered for the last few sequence counts (an
        MTP cycle's forwards take turns: the draft's decodes, its extend, the verify, each
        with its own counts of one batch)."""
        seqs = np.asarray(seqs, dtype=np.float64)
        key = seqs.tobytes()
        found = self._counts.get(key)
        if found is None:
            if len(self._counts) >= COUNTS_KEPT:
                self._counts.clear()
            found = self._counts[key] = decode_counts(seqs, self.heads, self.kv_heads,
                                                      self.head_dim, self.num_sms, self.grid)
        return found

    def us(self, seqs: np.ndarray, context: np.ndarray) -> np.ndarray:
        """[dp] microseconds of the decode kernel (0 on an idle rank); `seqs` [dp], `context`
        [dp] (or [steps, dp] for steps of these counts: [steps, dp], each row the bits of its
        own call)."""
        counts = self.counts(seqs)
        return kernel_us(decode_work(counts.seqs, context, self.heads, self.kv_heads,
                                     self.head_dim, self.num_sms, counts, self.kv_ratio,
                                     self.grid),
                         self.params)


@dataclass(frozen=True)
class PrefillGrid:
    """How a causal prefill kernel tiles its work onto the SMs.

    Attributes:
        ctas_per_sm: CTAs resident per SM (slots = ctas_per_sm x num_sms).
        pack_gqa: the query heads sharing a KV head packed into a CTA's rows (rows = query
            positions x group): a CTA of `PREFILL_ROWS` rows covers `PREFILL_ROWS / group`
            positions of one KV head, so a short chunk fills its rows with heads.
        row_tiles: `PREFILL_ROWS`-row tiles of one head a CTA holds (without `pack_gqa`), each
            run over every key tile the CTA's last row reaches (TRT-LLM-gen's context kernel:
            `mStepQ` 256 = 2 x `mTileSizeQ` 128, both halves in one key loop).
    """

    ctas_per_sm: int = CTAS_PER_SM
    pack_gqa: bool = False
    row_tiles: int = 1


@dataclass(frozen=True)
class FlashGrids:
    """The decode and prefill grids of one attention kernel family."""

    decode: DecodeGrid
    prefill: PrefillGrid


# FlashAttention-2 (our records' SDPA kernel; also the form of Blackwell's TRT-LLM kernels in
# AIC's tables: of the grids tried it predicts their hold-outs best, docs/calibration.md)
FA2_PREFILL = PrefillGrid()
FA2_GRIDS = FlashGrids(FA2_DECODE, FA2_PREFILL)
# FlashAttention-3 as SGLang runs it on Hopper: one 3-warpgroup CTA per SM, and a paged KV cache
# whose 64-token pages are not a whole key tile, so the kernel packs the GQA group into the
# query rows (`pack_gqa`, FA3's rule for a paged KV read without TMA); its decode CTAs hold 64
# packed rows
FA3_GRIDS = FlashGrids(DecodeGrid(plain_rows=64, split_rows=64, ctas_per_sm=1),
                       PrefillGrid(ctas_per_sm=1, pack_gqa=True))
# FlashInfer's TRT-LLM-gen kernels as SGLang's `trtllm_mha` backend runs them on Blackwell: the
# decode kernel's own selection rule (`epsim.cost.flash_trtllm`); the persistent context kernel
# (`...H128PagedKvCausalP32VarSeqQ128Kv128PersistentContext`: `mStepQ` 256 query rows of one
# head, two 128-row tiles over one 128-key loop, 512 threads) one CTA per SM (AIC's B200
# table: 256 CTAs of 16-token chunks take a second round, 14.6 us against 10.4 at 128)
TRTLLM_PREFILL = PrefillGrid(ctas_per_sm=1, row_tiles=2)
TRTLLM_GRIDS = FlashGrids(DecodeGrid(ctas_per_sm=1, rule="trtllm"), TRTLLM_PREFILL)
# AIC systems whose attention tables time SGLang's FlashAttention-3 backend
# (`epsim.calibrate.aic_records.ATTENTION_KERNEL`), and those timing its `trtllm_mha` backend
# (`BLACKWELL_ATTENTION_KERNEL`)
FA3_SYSTEMS = ("h100_sxm", "h200_sxm")
TRTLLM_SYSTEMS = ("b200_sxm", "b300_sxm", "gb200", "gb300")


def kernel_grids(kernel: str) -> FlashGrids:
    """The grids of a record's kernel (`extra.kernel`): "fa3" FlashAttention-3's, "trtllm_mha"
    FlashInfer's TRT-LLM-gen, else FA2's."""
    return {"fa3": FA3_GRIDS, "trtllm_mha": TRTLLM_GRIDS}.get(kernel, FA2_GRIDS)


def component_grids(tables: list[str]) -> FlashGrids:
    """The grids of the kernel a fitted attention component timed, from the op tables it was
    fitted on (`Component.tables`, `<system>/attention/...`): FA3's for AIC's Hopper tables,
    TRT-LLM-gen's for its Blackwell tables, else FA2's (our own records)."""
    systems = {t.split("/", 1)[0] for t in tables}
    if systems & set(FA3_SYSTEMS):
        return FA3_GRIDS
    return TRTLLM_GRIDS if systems & set(TRTLLM_SYSTEMS) else FA2_GRIDS


def _ceil_sum(num_ctas: np.ndarray, group: float) -> np.ndarray:
    """sum over k = 1..num_ctas of ceil(k / group): the key tiles the packed CTAs' causal rows
    reach (CTA k ends at query position k x 128 / group)."""
    q = np.floor(num_ctas / group)
    r = num_ctas - q * group
    return group * q * (q + 1) / 2.0 + r * (q + 1)


def _stepped_tiles(row_blocks: np.ndarray, prefix_tiles: np.ndarray, units: np.ndarray,
                   row_tiles: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CTAs, total tiles, the longest CTA's tiles), `[dp]` each, of `units` (chunk, head) pairs
    whose CTAs hold `row_tiles` row tiles that share one key loop: CTA i of a chunk holds
    `s = min(r, B - r i)` of its `B` row tiles and runs each over the `p + r i + s` key tiles
    its last row reaches (after a prefix of `p` tiles), so the causal diagonal's masked tiles
    are computed too: `s (p + r i + s)` tiles. With `F = floor(B / r)` full CTAs and
    `q = B - r F` rows left in the last one, a chunk's tiles are
    `r F p + r^2 F (F + 1) / 2 + q (p + B)`; the longest CTA is the last full one
    (`r (p + r F)`) or the partial one (`q (p + B)`)."""
    r = float(row_tiles)
    full = np.floor(row_blocks / r)
    left = row_blocks - r * full
    ctas = units * np.ceil(row_blocks / r)
    total = units * (r * full * prefix_tiles + r * r * full * (full + 1) / 2.0
                     + left * (prefix_tiles + row_blocks))
    longest = np.maximum(np.where(full > 0, r * (prefix_tiles + r * full), 0.0),
                         left * (prefix_tiles + row_blocks))
    return ctas, total, longest


def prefill_work(tokens: np.ndarray, context: np.ndarray, seqs: np.ndarray, heads: int,
                 kv_heads: int, head_dim: int, num_sms: int, kv_ratio: float = 1.0,
                 grid: PrefillGrid = FA2_PREFILL) -> KernelWork:
    """The causal prefill kernel of one layer: `seqs` chunks of `tokens` new tokens in all.

    Args:
        tokens: [dp] new (query) tokens per rank.
        context: [dp] sum over the chunks of prefix + chunk (keys the last query sees).
        seqs: [dp] chunks per rank; they are costed as equal chunks after equal prefixes.
        kv_ratio: bytes of a KV-cache element / 2 (as `decode_work`).
        grid: the kernel's CTAs (`PrefillGrid`).
    """
    tokens = np.asarray(tokens, dtype=np.float64)
    context = np.asarray(context, dtype=np.float64)
    seqs = np.maximum(np.asarray(seqs, dtype=np.float64), (tokens > 0).astype(np.float64))
    busy = tokens > 0
    safe = np.where(busy, seqs, 1.0)
    chunk = tokens / safe
    prefix = np.maximum(context / safe - chunk, 0.0)
    row_blocks = np.ceil(chunk / PREFILL_ROWS)                      # query tiles per chunk
    prefix_tiles = np.ceil(prefix / KEY_BLOCK)
    slots = grid.ctas_per_sm * num_sms
    if grid.pack_gqa:       # CTA k of a (chunk, KV head) ends at query position k x 128 / group
        group = max(heads // max(kv_heads, 1), 1)
        per_head = np.ceil(chunk * group / PREFILL_ROWS)            # CTAs per (chunk, KV head)
        ctas = kv_heads * seqs * per_head
        total = kv_heads * seqs * (per_head * prefix_tiles
                                   + np.minimum(_ceil_sum(per_head, group),
                                                per_head * row_blocks))
    elif grid.row_tiles > 1:
        ctas, total, longest = _stepped_tiles(row_blocks, prefix_tiles, heads * seqs,
                                              grid.row_tiles)
    else:
        ctas = heads * seqs * row_blocks
        total = heads * seqs * (row_blocks * prefix_tiles + row_blocks * (row_blocks + 1) / 2.0)
    if grid.row_tiles == 1:
        longest = prefix_tiles + row_blocks
    busiest = np.where(ctas <= slots, longest, np.maximum(longest, total / slots + longest / 2.0))
    tile_flops = PREFILL_ROWS * KEY_BLOCK * head_dim * 4.0
    mem = BYTES * (2.0 * tokens * heads * head_dim + kv_ratio * (2.0 * context * kv_heads * head_dim))
    zero = np.zeros_like(tokens)
    return KernelWork(np.where(busy, np.ceil(ctas / slots), 0.0), zero,
                      np.where(busy, busiest * tile_flops * slots * 1e-6, 0.0),
                      np.where(busy, mem * 1e-3, 0.0))


def _math_us(work: KernelWork, params: dict[str, float]) -> np.ndarray:
    return work.mflops / params["tflops"]


def kernel_us(work: KernelWork, params: dict[str, float]) -> np.ndarray:
    """[dp] microseconds of the kernel (module docstring); 0 where there is no work."""
    waves_us = work.waves * params["wave_us"]
    if work.overlap:
        t = (params["base_us"] + work.splits * params["per_split_us"]
             + np.maximum(work.mem_kb / params["hbm_gbps"], waves_us + _math_us(work, params)))
    else:
        t = (params["base_us"] + waves_us + work.splits * params["per_split_us"]
             + np.maximum(work.mem_kb / params["hbm_gbps"], _math_us(work, params)))
    return np.where(work.mflops > 0, t, 0.0)


def kernel_features(work: KernelWork, params: dict[str, float]) -> np.ndarray:
    """[dp, 5] design rows in `ATTENTION_TERMS` order (base, waves, splits, memory KB or 0,
    MFLOPs or 0: the bound side at `params`)."""
    compute_us = _math_us(work, params)
    if work.overlap:            # the waves' cost on the compute side of the max
        compute_us = compute_us + work.waves * params["wave_us"]
    memory_bound = work.mem_kb / params["hbm_gbps"] >= compute_us
    busy = (work.mflops > 0).astype(np.float64)
    waves = np.where(memory_bound, 0.0, work.waves) if work.overlap else work.waves
    return np.stack([busy, waves, work.splits, np.where(memory_bound, work.mem_kb, 0.0),
                     np.where(memory_bound, 0.0, work.mflops)], axis=-1)
