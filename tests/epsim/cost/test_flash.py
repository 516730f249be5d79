"""The flash-attention kernel's work (`epsim.cost.flash`): the split heuristic, the decode CTAs,
and the prefill's closed-form busiest slot against a greedy placement of its CTAs."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from epsim.cost.flash import (CTAS_PER_SM, PREFILL_ROWS, KEY_BLOCK, TRTLLM_GRIDS, _stepped_tiles,
                              decode_work, kernel_features, kernel_us, num_splits, prefill_work)

SMS = 132
SLOTS = CTAS_PER_SM * SMS


def _greedy_busiest(group_tiles: list[int], groups: int, slots: int) -> float:
    """Tiles of the busiest slot when CTAs are launched group by group, longest first, each on
    the slot that frees first (a GPU's block scheduler)."""
    free = [0.0] * slots
    for _ in range(groups):
        for tiles in group_tiles:
            heapq.heappush(free, heapq.heappop(free) + tiles)
    return max(free)


@pytest.mark.parametrize("units, blocks, splits", [
    (256, 256, 1),          # 256 CTAs fill 0.8 of 264 slots: no split
    (64, 256, 4),           # 16 sequences x 4 KV heads: 4 splits reach 256 of 264 slots
    (16, 256, 14),          # best eligible efficiency 0.97 (16 splits); 14 is within 85 % of it
    (4, 64, 64),            # one sequence: split down to one key block each
])
def test_split_heuristic_follows_flash_attention_2(units, blocks, splits):
    assert num_splits(units, blocks, SMS) == splits


def test_decode_pads_the_rows_and_counts_waves_of_equal_ctas():
    # 64 sequences x 4 KV heads = 256 CTAs of 128 padded rows: one wave, each over all keys
    work = decode_work(np.array([64.0, 0.0]), np.array([64 * 32768.0, 0.0]), 32, 4, 128, SMS)
    assert work.waves.tolist() == [1.0, 0.0] and work.splits.tolist() == [0.0, 0.0]
    assert work.mflops[0] == pytest.approx(1 * 32768 * PREFILL_ROWS * 128 * 4 * SLOTS * 1e-6)
    # 32 or 64 query heads over the same 4 KV heads: the same padded tiles, the same time
    wider = decode_work(np.array([64.0]), np.array([64 * 32768.0]), 64, 4, 128, SMS)
    assert wider.mflops[0] == work.mflops[0] and wider.waves[0] == work.waves[0]
    params = {"base_us": 7.0, "wave_us": 3.0, "per_split_us": 0.25, "hbm_gbps": 3700.0,
              "tflops": 360.0}
    assert kernel_us(work, params)[1] == 0.0                          # an idle rank costs nothing
    rows = kernel_features(work, params)
    coef = np.array([7.0, 3.0, 0.25, 1 / 3700.0, 1 / 360.0])
    assert rows @ coef == pytest.approx(kernel_us(work, params))      # the fitter's form


def test_decode_splits_a_few_long_sequences():
    work = decode_work(np.array([1.0]), np.array([32768.0]), 32, 4, 128, SMS)
    assert work.splits[0] == 64 and work.waves[0] == 1.0              # 256 CTAs of 4 key blocks


@pytest.mark.parametrize("groups", [32, 64, 96, 128, 192, 256, 384])
def test_prefill_busiest_slot_is_within_12_percent_of_a_greedy_placement(groups):
    """(chunk, head) groups of 128 .. 16384 tokens: the closed form
    `max(longest, total / slots + longest / 2)` (longest alone when every CTA has a slot)."""
    ratios = []
    for row_blocks in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128):
        tokens = float(row_blocks * PREFILL_ROWS)
        heads = groups                                  # one chunk: a group per head
        work = prefill_work(np.array([tokens]), np.array([tokens]), np.array([1.0]), heads, 4,
                            128, SMS)
        tile_flops = PREFILL_ROWS * KEY_BLOCK * 128 * 4.0
        closed = work.mflops[0] / (tile_flops * SLOTS * 1e-6)
        greedy = _greedy_busiest(list(range(row_blocks, 0, -1)), groups, SLOTS)
        ratios.append(closed / greedy)
    assert 0.88 <= min(ratios) and max(ratios) <= 1.07


def test_prefill_after_a_prefix_reads_its_tiles():
    alone = prefill_work(np.array([512.0]), np.array([512.0]), np.array([1.0]), 32, 4, 128, SMS)
    later = prefill_work(np.array([512.0]), np.array([4096.0]), np.array([1.0]), 32, 4, 128, SMS)
    assert later.mflops[0] > alone.mflops[0] and later.mem_kb[0] > alone.mem_kb[0]
    assert later.waves[0] == alone.waves[0]             # the same CTAs, each longer


def test_decode_kernel_gives_the_bits_of_decode_work(rng):
    """`DecodeKernel` (the engine's decode attention, its count terms remembered) equals
    `kernel_us(decode_work(...))` bit for bit: full GPUs, split-KV launches, idle ranks, and
    the same counts at new contexts."""
    from epsim.cost.flash import DecodeKernel
    params = {"base_us": 7.3, "wave_us": 1.9, "per_split_us": 0.7, "hbm_gbps": 3100.0,
              "tflops": 370.0}
    for heads, kv_heads, head_dim in ((64, 4, 128), (96, 8, 128), (128, 1, 576)):
        kernel = DecodeKernel(heads, kv_heads, head_dim, SMS, params)
        for seqs in (np.full(8, 128.0), np.array([1.0, 3.0, 0.0, 256.0, 7.0, 128.0, 0.0, 64.0]),
                     rng.integers(0, 300, 8).astype(float)):
            for _ in range(3):                       # contexts grow; the counts stay
                context = seqs * rng.integers(1, 20000, 8)
                want = kernel_us(decode_work(seqs, context, heads, kv_heads, head_dim, SMS), params)
                got = kernel.us(seqs, context)
                assert np.array_equal(got.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("chunk", [16, 100, 128, 1000, 4096])
@pytest.mark.parametrize("group", [1, 2, 8, 16, 64, 128])
@pytest.mark.parametrize("prefix", [0, 1024])
def test_fa3_prefill_packs_the_group_into_its_rows(chunk, group, prefix):
    """FlashAttention-3's grid (`pack_gqa`, one CTA per SM): a (chunk, KV head) runs
    ceil(chunk x group / 128) CTAs, CTA k over positions up to k x 128 / group, each reading the
    key tiles up to its last position -- counted here one CTA at a time."""
    from epsim.cost.flash import FA3_GRIDS
    kv_heads, seqs = 4, 3
    grid = FA3_GRIDS.prefill
    work = prefill_work(np.array([seqs * chunk * 1.0]), np.array([seqs * (prefix + chunk) * 1.0]),
                        np.array([seqs * 1.0]), group * kv_heads, kv_heads, 128, SMS, grid=grid)
    per_head = -(-chunk * group // PREFILL_ROWS)
    ends = [min(chunk, k * PREFILL_ROWS / group) for k in range(1, per_head + 1)]
    tiles = sum(prefix // KEY_BLOCK + int(np.ceil(e / KEY_BLOCK)) for e in ends)
    ctas, total = kv_heads * seqs * per_head, kv_heads * seqs * tiles
    slots = grid.ctas_per_sm * SMS
    longest = prefix // KEY_BLOCK + -(-chunk // PREFILL_ROWS)
    busiest = longest if ctas <= slots else max(longest, total / slots + longest / 2)
    assert work.waves[0] == -(-ctas // slots)
    assert work.mflops[0] == pytest.approx(busiest * PREFILL_ROWS * KEY_BLOCK * 128 * 4 * slots
                                           * 1e-6)


def test_grids_follow_the_kernel_a_fit_timed():
    from epsim.cost.flash import (FA2_GRIDS, FA3_GRIDS, TRTLLM_GRIDS, component_grids,
                                  kernel_grids)
    assert kernel_grids("fa3") is FA3_GRIDS and kernel_grids("trtllm_mha") is TRTLLM_GRIDS
    assert kernel_grids("") is FA2_GRIDS                     # our own records: SDPA's FA2
    fa3 = ["h200_sxm/attention/sglang/0.5.14/context_attention_perf.parquet"]
    assert component_grids(fa3) is FA3_GRIDS
    assert component_grids(["b200_sxm/attention/sglang/0.5.14/x.parquet"]) is TRTLLM_GRIDS
    assert component_grids(["gb300/attention/sglang/0.5.14/x.parquet"]) is TRTLLM_GRIDS
    assert component_grids([]) is FA2_GRIDS


def test_trtllm_decode_follows_flashinfers_selection():
    """FlashInfer's TRT-LLM-gen decode (`epsim.cost.flash_trtllm`): rows the group padded to a
    power of two in [8, 128]; keys split SMs // CTAs ways whatever the context; the split
    launch pays its reduction per row; the persistent launch (one split) none."""
    from epsim.cost.flash import TRTLLM_GRIDS, decode_work
    from epsim.cost.flash_trtllm import PIPELINE_TILES, key_splits, math_rows, tile_rows
    assert [tile_rows(h, 1) for h in (1, 8, 12, 32, 48, 96, 128)] == [8, 8, 16, 32, 64, 128, 128]
    assert key_splits(np.array([1, 64, 74, 75, 148, 300]), 148).tolist() == [148, 2, 2, 1, 1, 1]
    assert math_rows(16) == 32.0 and math_rows(64) == 64.0
    grid = TRTLLM_GRIDS.decode
    one = np.ones(1)

    def work(seqs, ctx, heads=128, kv=1):
        return decode_work(one * seqs, one * seqs * ctx, heads, kv, 128, 148, grid=grid)

    short, long_ = work(1, 16), work(1, 16384)
    assert short.splits[0] == long_.splits[0] == 2.0            # 148 splits, 128 rows / 64
    assert short.waves[0] == long_.waves[0] == 1.0              # 148 CTAs on 148 SMs
    # 16384 keys over 148 CTAs: one 128-key tile each; 16 keys: one tile too; each CTA's
    # pipeline pays one tile more (its fill and drain)
    assert long_.mflops[0] == short.mflops[0] == pytest.approx(
        (1 + PIPELINE_TILES) * 128 * 128 * 128 * 4.0 * 148 * 1e-6)
    persistent = work(256, 16)                                  # 256 CTAs: no split, 2 waves
    assert persistent.splits[0] == 0.0 and persistent.waves[0] == 2.0
    # 256 keys a CTA: two tiles and the pipeline's one
    assert work(256, 256).mflops[0] == pytest.approx(persistent.mflops[0] * 3 / 2)
    assert persistent.overlap and not decode_work(one, one * 16, 128, 1, 128, 148).overlap


def test_overlapped_waves_hide_under_memory():
    """`overlap`: the waves' cost joins the math inside the max, so a memory-bound launch pays
    no wave term, and the design row keeps the bound side's terms only."""
    from epsim.cost.flash import KernelWork, kernel_features, kernel_us
    params = {"base_us": 5.0, "wave_us": 2.0, "per_split_us": 1.0, "hbm_gbps": 1000.0,
              "tflops": 1000.0}
    mem = dict(waves=np.array([3.0]), splits=np.array([0.0]), mflops=np.array([1000.0]),
               mem_kb=np.array([20000.0]))                      # 20 us of memory, 1 us of math
    assert kernel_us(KernelWork(**mem, overlap=True), params)[0] == pytest.approx(25.0)
    assert kernel_us(KernelWork(**mem), params)[0] == pytest.approx(31.0)
    row = kernel_features(KernelWork(**mem, overlap=True), params)[0]
    assert row.tolist() == [1.0, 0.0, 0.0, 20000.0, 0.0]
    math = dict(mem, mem_kb=np.array([1000.0]))                # 1 us of memory: 6 + 1 on top
    assert kernel_us(KernelWork(**math, overlap=True), params)[0] == pytest.approx(12.0)
    assert kernel_features(KernelWork(**math, overlap=True), params)[0].tolist() == \
        [1.0, 3.0, 0.0, 0.0, 1000.0]


def test_trtllm_decode_kernel_prices_steps_at_once():
    """`DecodeKernel.us` on TRT-LLM-gen's grid with contexts `[steps, dp]`: each row the bits of
    its own call, an idle rank 0."""
    from epsim.cost.flash import TRTLLM_GRIDS, DecodeKernel
    params = {"base_us": 7.0, "wave_us": 1.5, "per_split_us": 3.7, "hbm_gbps": 7200.0,
              "tflops": 600.0}
    kernel = DecodeKernel(64, 4, 128, 148, params, grid=TRTLLM_GRIDS.decode)
    seqs = np.array([4.0, 0.0, 300.0])
    steps = np.array([[4000.0, 0.0, 6e5], [8000.0, 0.0, 1.2e6]])
    together = kernel.us(seqs, steps)
    for i in range(2):
        assert np.array_equal(together[i], kernel.us(seqs, steps[i]))
    assert together[0, 1] == 0.0 and together[1, 2] > together[0, 2]


def _stepped_cta_tiles(chunk: int, prefix: int, row_tiles: int) -> list[int]:
    """Tiles of each CTA of one (chunk, head), enumerated: CTA i holds row tiles
    [r i, min(r (i + 1), B)), each run over the key tiles its last row reaches."""
    blocks, prefix_tiles = -(-chunk // PREFILL_ROWS), -(-prefix // KEY_BLOCK)
    out = []
    for first in range(0, blocks, row_tiles):
        held = min(row_tiles, blocks - first)
        out.append(held * (prefix_tiles + first + held))
    return out


@pytest.mark.parametrize("chunk, prefix", [(16, 0), (256, 0), (384, 0), (1024, 0), (1000, 4096),
                                           (16384, 0), (640, 128)])
def test_trtllm_prefill_ctas_hold_two_row_tiles_in_one_key_loop(chunk, prefix):
    """TRT-LLM-gen's context kernel: 256 query rows a CTA, one CTA per SM, both 128-row tiles
    over every key tile the CTA's last row reaches (the diagonal's masked tiles computed)."""
    heads = 8
    grid = TRTLLM_GRIDS.prefill
    tiles = _stepped_cta_tiles(chunk, prefix, 2)
    work = prefill_work(np.array([float(chunk)]), np.array([float(chunk + prefix)]),
                        np.array([1.0]), heads, 1, 128, SMS, grid=grid)
    tile_flops = PREFILL_ROWS * KEY_BLOCK * 128 * 4.0
    busiest = work.mflops[0] / (tile_flops * SMS * 1e-6)
    ctas = heads * len(tiles)
    assert work.waves[0] == -(-ctas // SMS)
    if ctas <= SMS:                                       # every CTA on its own SM
        assert busiest == pytest.approx(max(tiles))
    else:
        assert busiest == pytest.approx(max(max(tiles), heads * sum(tiles) / SMS + max(tiles) / 2))
    # the closed form's CTAs, total and longest against the enumeration, and with one row tile
    # a CTA, FA2's tiles
    blocks = np.array([float(-(-chunk // PREFILL_ROWS))])
    prefix_tiles = np.array([float(-(-prefix // KEY_BLOCK))])
    for r in (1, 2, 3):
        listed = _stepped_cta_tiles(chunk, prefix, r)
        ctas_r, total, longest = _stepped_tiles(blocks, prefix_tiles, np.array([5.0]), r)
        assert (ctas_r[0], total[0], longest[0]) == (5 * len(listed), 5 * sum(listed), max(listed))
    fa2 = blocks * prefix_tiles + blocks * (blocks + 1) / 2.0
    assert _stepped_tiles(blocks, prefix_tiles, np.array([1.0]), 1)[1][0] == fa2[0]


@pytest.mark.parametrize("groups", [8, 32, 96, 128, 256, 384])
def test_trtllm_prefill_busiest_sm_is_near_a_greedy_placement(groups):
    """The same closed form over TRT-LLM-gen's CTAs (two row tiles each, one CTA per SM):
    within -12 % to +22 % of a longest-first greedy placement (the longest-half excess is
    pessimistic where a few hundred (chunk, head) groups of short chunks share the SMs)."""
    ratios = []
    for row_blocks in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128):
        tokens = float(row_blocks * PREFILL_ROWS)
        work = prefill_work(np.array([tokens]), np.array([tokens]), np.array([1.0]), groups, 4,
                            128, SMS, grid=TRTLLM_GRIDS.prefill)
        closed = work.mflops[0] / (PREFILL_ROWS * KEY_BLOCK * 128 * 4.0 * SMS * 1e-6)
        tiles = sorted(_stepped_cta_tiles(int(tokens), 0, 2), reverse=True)
        ratios.append(closed / _greedy_busiest(tiles, groups, SMS))
    assert 0.88 <= min(ratios) and max(ratios) <= 1.22


KERNEL_PARAMS = {"base_us": 6.5, "wave_us": 2.0, "per_split_us": 0.05, "hbm_gbps": 3100.0,
                 "tflops": 220.0}


def test_carried_kernel_rates_stream_the_decode_at_the_hbm_ratio():
    """A kernel fit carried to another GPU (the system hold-out): the decode's rates by the HBM
    ratio, the prefill's by the BF16 peak's; fixed costs kept; the same GPU as is."""
    from epsim.cost.flash import carried_kernel_rates
    from epsim.zoo import get_hardware
    h100, h200, b200 = get_hardware("H100"), get_hardware("H200"), get_hardware("B200")
    assert carried_kernel_rates(KERNEL_PARAMS, h100, h100, decode=True) == KERNEL_PARAMS
    decode = carried_kernel_rates(KERNEL_PARAMS, h100, h200, decode=True)
    hbm = h200.hbm_gbps / h100.hbm_gbps
    assert decode["hbm_gbps"] == pytest.approx(3100.0 * hbm)
    assert decode["tflops"] == pytest.approx(220.0 * hbm)          # not the (equal) BF16 peak
    prefill = carried_kernel_rates(KERNEL_PARAMS, h100, h200, decode=False)
    assert prefill == KERNEL_PARAMS                                # the same die: as it is
    on_b200 = carried_kernel_rates(KERNEL_PARAMS, h100, b200, decode=False)
    bf16 = b200.bf16_tflops / h100.bf16_tflops
    assert on_b200["tflops"] == pytest.approx(220.0 * bf16)
    assert on_b200["hbm_gbps"] == pytest.approx(3100.0 * bf16)
    assert {k: decode[k] for k in ("base_us", "wave_us", "per_split_us")} == {
        k: KERNEL_PARAMS[k] for k in ("base_us", "wave_us", "per_split_us")}


@pytest.mark.parametrize("context", [64, 65536])
def test_a_decode_record_on_another_gpu_is_priced_at_the_fit_carried(context):
    """An H200 decode record priced with an H100-fitted profile equals pricing it with an H200
    profile holding the carried rates; the long context (the KV stream) runs faster on H200."""
    from epsim.cost.flash import carried_kernel_rates
    from epsim.cost.record import predict_record
    from epsim.profile import Component, Profile
    from epsim.records import MeasurementRecord, Provenance
    from epsim.zoo import get_hardware

    def record(gpu):
        return MeasurementRecord(kind="attention_decode", timing="device", backend="local",
                                 mode="", ep_size=1, num_tokens_per_rank=4, hidden_size=0, num_seqs=4,
                                 context_len=context, num_attention_heads=32, num_kv_heads=8,
                                 head_dim=128, median_us=10.0, extra={"kernel": "fa3"},
                                 provenance=Provenance(device=gpu, hardware=gpu))

    key = "any/attention_decode/graph"
    h100 = Profile(name="h100", hardware="H100",
                   components={key: Component(params=KERNEL_PARAMS, source="fit")})
    h200 = Profile(name="h200", hardware="H200", components={key: Component(
        params=carried_kernel_rates(KERNEL_PARAMS, get_hardware("H100"), get_hardware("H200"),
                                    decode=True), source="fit")})
    assert predict_record(record("H200"), h100) == pytest.approx(predict_record(record("H200"), h200))
    if context == 65536:
        assert predict_record(record("H200"), h100) < 0.8 * predict_record(record("H100"), h100)
