"""Routed-expert compute of one MoE layer: the grouped GEMM over each rank's local experts.

Physics of a grouped SwiGLU GEMM (gate+up `[2I, H]`, down `[H, I]` per expert), per rank r:

    t_r = base_us + per_expert_us * A_r + max(mem_us_r, math_us_r)
    mem_us_r  = (A_r * expert_bytes + rows_r * act_bytes_per_row) / hbm_gbps * 1e-3
    math_us_r = quantized_flops_r / tflops * 1e-6 + wave_us * waves_r

  A_r                experts the rank's tokens actually touch (weights stream from HBM once each)
  rows_r             token-expert pairs the rank computes; `act_bytes_per_row = 4H + 12I` (BF16
                     activations in and out of both GEMMs and the SwiGLU)
  quantized_flops_r  the FLOPs the tensor cores actually run: every expert's rows are padded to
                     whole `TILE_M`-row tiles (tile quantization, per expert), and each GEMM's
                     tiles (`sum_e ceil(n_e / TILE_M) * ceil(N / TILE_N)`) run in whole waves of
                     one tile per SM (wave quantization): `ceil(tiles / num_sms) * num_sms *
                     2 * TILE_M * TILE_N * K` for GEMM 1 (N = 2I, K = H) and GEMM 2 (N = H, K = I).
  waves_r            those waves, summed over both GEMMs: each wave pays a tile's prologue and
                     epilogue (`wave_us`) besides its K-long main loop, so a short K (small
                     hidden or intermediate size) runs below the asymptotic rate

A kernel whose tile is known to differ from the reference `TILE_M x TILE_N` (a tuned fused
Triton MoE config, `epsim.fused_moe_config.TUNED_TILES`) runs its tiles' waves, and its math
at the tile's operand feed: each K step of a `BM x BN` tile loads `(BM + BN) BK` elements for
`2 BM BN BK` FLOPs, so its time per FLOP is the MMA's at the datasheet peak plus a feed share
that scales with `(BM + BN) / (BM BN)` (`feed_ratio`, 1 at the reference tile):

    math_us_r = quantized_flops_r * (feed_ratio / tflops + (1 - feed_ratio) / peak) * 1e-6 + ...

so `tflops` keeps its meaning (the rate at the reference tile) and a 128 x 256 tile (ratio 0.5)
runs halfway, in time per FLOP, between it and the peak.

Every parameter is physical and bounded by the hardware it names: `hbm_gbps` <= the datasheet
HBM bandwidth, `tflops` <= the datasheet dense tensor peak (the fitter's bounds), `base_us` the
launch and tail of the kernels, `per_expert_us` what each group's prologue costs, `wave_us`
a wave's fixed time (tile prologue and epilogue). The layer
waits for the slowest rank: `experts_us = max_r t_r`. A dense MLP (dense layers, shared
experts) is the same GEMM with one expert (`dense_work`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.fp4_gemm import sm_feed_elements
from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.errors import SpecError
from epsim.fast_init import fast_init
from epsim.spec.hardware import HardwareSpec
from epsim.spec.quant import weight_tensor_dtype

TILE_M = 64       # rows per tile of the grouped GEMM (see docs/model.md: chosen among 16, 64, 128)
TILE_N = 128      # output columns per tile
# streaming multiprocessors per GPU, as CUDA reports them (`multiProcessorCount`); one tile per
# SM per wave. Blackwell Ultra's die has 160 SMs ("Inside NVIDIA Blackwell Ultra", 2025-08), but
# the products enable fewer, as B200 and GB200 do of Blackwell's: B300 (HGX, "NVIDIA B300 SXM6
# AC") 148 at 2032 MHz and GB300 152, B200's and GB200's counts (public measurement notes, e.g.
# github.com/aburan28/crypto ecc2k130/benchmarks/modal-gpus/SURVEY.md: "B300 (148 SMs)"; a public
# B300 microbenchmark reference, 2026-04-18: "NVIDIA B300 SXM6 AC (sm_103a, CC 10.3, 148 SMs)",
# "8 GPCs x ~18 SMs each (= 144 active + 4 spare = 148 total)"; kernels tuned on GB300 cite
# "GB300 (152 SMs, 228 KiB per SM)"). AIC's B300 / GB300 MoE tables run
# 1-4 % under B200's / GB200's at the same points, the clock's 3 %, not 160 SMs' 8 %.
NUM_SMS = {"H100": 132, "H200": 132, "H800": 132, "H20": 78, "B200": 148, "B300": 148,
           "GB200": 152, "GB300": 152}
DEFAULT_NUM_SMS = 132
# expert activations with no gate: one projection before the activation, not SwiGLU's two
# (ReLU², NVIDIA's Nemotron-3 MoE: `mlp_hidden_act: relu2`, an up and a down projection)
NON_GATED_ACTIVATIONS = ("relu2",)


def expert_projections(activation: str) -> int:
    """Projections of an expert's first GEMM (`ExpertGemm.num_up`) for its activation
    (a record's `extra.activation`; "" or "silu": SwiGLU, 2)."""
    return 1 if activation in NON_GATED_ACTIVATIONS else 2


def num_sms(gpu: str) -> int:
    """Streaming multiprocessors of a zoo GPU (132, Hopper's, for one not listed)."""
    return NUM_SMS.get(gpu, DEFAULT_NUM_SMS)


@fast_init
@dataclass(frozen=True)
class ExpertGemm:
    """The shape of one SwiGLU expert's GEMMs and the GPU they run on.

    Attributes:
        hidden_size, intermediate_size: H and I of one expert (`moe_intermediate_size`).
        weight_bytes: bytes of one expert's weights (`3 * H * I * bytes per parameter`).
        num_sms: streaming multiprocessors (wave size).
        act_in_bytes: bytes of one element the GEMMs read as input (x, h): 2 for BF16, the
            quantised copy's for a quantised format (`epsim.cost.quant.quant_expert_gemm`).
        quant_bytes_per_row: bytes the activation quantisation moves per row (0: none).
        scale_block_k: K-depth of a weight-scale block whose partial sums the kernel rescales
            in its main loop (fp8_block: 128; each costs `dequant_us` per wave); 0: none.
        tile_rows: rows (token-expert pairs) per tile, `TILE_M`; FlashInfer's TRT-LLM MoE runs
            the token tile its launcher picks (`epsim.cost.quant.trtllm_tile`, 8 to 256 rows).
        num_up: projections of the first GEMM: 2 for SwiGLU's gate and up (`[2I, H]`), 1 for a
            non-gated MLP (ReLU², NVIDIA's Nemotron-3 experts: `[I, H]`), whose experts hold
            `2 H I` weights and do `4 H I` FLOPs a row (`expert_projections`).
        serial_rows: the rows' activation bytes (`act_bytes_per_row`) run beside the roofline,
            not under it: FlashInfer's TRT-LLM MoE gathers each tile's rows, writes the down
            GEMM's BF16 rows and sums them in a finalize kernel of its own, work that does not
            hide behind the weight stream (a larger share as MoE-TP narrows the weights while
            the rows keep their hidden-size width); a wave then also pays `wave_row_us` per row
            of its token tile (its epilogue writes them).
        sm_fed: each SM's operand feed bounds its MMA (FlashInfer's TRT-LLM MoE on NVFP4, as
            its dense CuTe-DSL GEMM, `epsim.cost.fp4_gemm`): a wave streams its tile's rows and
            `TILE_N` weight columns over K (`feed_kb`), at `sm_feed_gbps` per SM, so a short-K
            wave costs its bytes, not a fixed share of a long one.
        finalize_bytes_per_row: bytes per row a finalize kernel moves after the GEMMs, on the
            roofline's memory side with the rows' activations: it reads the down GEMM's BF16
            rows back and writes each token's sum (FlashInfer's TRT-LLM MoE on NVFP4, whose
            finalize overlaps the GEMM's tail: `epsim.cost.quant.finalize_bytes_per_row`).
        split_k: the kernel splits K over the SMs a last partial wave would leave idle (cuBLAS's
            BF16 GEMMs, the dense MLP's: `epsim.cost.dense_gemm.SPLIT_K_FORMATS`, as the `gemm`
            component prices them), so its FLOPs are tile-quantised but not wave-quantised; the
            waves keep their fixed cost. False: a grouped kernel's tiles fill whole waves.
        sm_stream: the weights stream at the busiest SM's pace (`stream_kb`): SGLang's Triton
            fused MoE on Hopper, whose CTAs each stream one `TILE_N`-column slice of an
            expert's weights over K, dealt round-robin over the SMs.
    """

    hidden_size: int
    intermediate_size: int
    weight_bytes: float
    num_sms: int = DEFAULT_NUM_SMS
    act_in_bytes: float = 2.0
    quant_bytes_per_row: float = 0.0
    scale_block_k: int = 0
    tile_rows: float = TILE_M
    num_up: int = 2
    serial_rows: bool = False
    sm_fed: bool = False
    finalize_bytes_per_row: float = 0.0
    tile_cols: int = TILE_N
    split_k: bool = False
    sm_stream: bool = False

    @property
    def feed_ratio(self) -> float:
        """Operand bytes per FLOP of a `tile_rows x tile_cols` tile over the reference
        `TILE_M x TILE_N` one's: `((BM + BN) / (BM BN)) / ((TILE_M + TILE_N) / (TILE_M TILE_N))`
        (1 at the reference tile; 0.5 at 128 x 256)."""
        bm, bn = float(self.tile_rows), float(self.tile_cols)
        return ((bm + bn) / (bm * bn)) / ((TILE_M + TILE_N) / (TILE_M * TILE_N))

    @property
    def act_bytes_per_row(self) -> float:
        """Activation bytes one row moves: x in, gate/up out and in, h out (BF16) and in, y out
        (`4H + 12I` at BF16 inputs and SwiGLU; the first GEMM's output is `num_up I` wide)."""
        a = self.act_in_bytes
        return (2.0 + a) * self.hidden_size + (4.0 * self.num_up + 2.0 + a) * self.intermediate_size

    @property
    def roofline_row_bytes(self) -> float:
        """Bytes a row moves on the roofline's memory side: its activations and its finalize
        (`act_bytes_per_row + finalize_bytes_per_row`)."""
        return self.act_bytes_per_row + self.finalize_bytes_per_row

    @property
    def flops_per_row(self) -> float:
        """Unpadded FLOPs of one row through the expert (`num_up + 1` projections x 2 flops per
        multiply-add)."""
        return 2.0 * (self.num_up + 1) * self.hidden_size * self.intermediate_size

    def stream_kb(self, active) -> np.ndarray:
        """[...] KB of the weights of `active` [...] experts, as the HBM rate prices them: with
        `sm_stream`, counted at the busiest SM, `sum over both GEMMs of ceil(a ceil(N / TILE_N)
        / num_sms) num_sms K TILE_N w` (one M-block an expert; at least the bytes themselves),
        so a fair share of the HBM rate per SM (`hbm_gbps / num_sms`) prices the SM that holds
        the most slices; else `a` experts' `weight_bytes`.

        SGLang's Triton fused MoE (Hopper; its block-FP8 default config 64 x 128 x 128, 4 warps)
        streams an expert's weights through `ceil(N / 128)` CTAs a GEMM. AIC's H200 DeepSeek-V3
        rows (0.5.14, block-FP8) at 1-12 active experts time as that busiest SM at 25-36 GB/s
        (132 x 31 GB/s = 4.1 TB/s, the fitted HBM rate), with a step where a GEMM's CTAs pass a
        multiple of the SMs: 8 experts (256 + 448 CTAs) 109 µs, 10 (320 + 560) 161 µs."""
        active = np.asarray(active, dtype=np.float64)
        flat = active * self.weight_bytes * 1e-3
        if not self.sm_stream:
            return flat
        per_elem = self.weight_bytes / ((self.num_up + 1.0) * self.hidden_size
                                        * self.intermediate_size)
        busiest = sum(np.ceil(active * -(-n // self.tile_cols) / self.num_sms) * self.num_sms
                      * k * self.tile_cols * per_elem for n, k in self.gemm_shapes())
        return np.maximum(busiest * 1e-3, flat)

    def gemm_shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(N, K) of the first GEMM (`num_up I`, H) and of the down GEMM (H, I)."""
        return ((self.num_up * self.intermediate_size, self.hidden_size),
                (self.hidden_size, self.intermediate_size))

    def quantized_mflops(self, row_tiles: np.ndarray) -> np.ndarray:
        """[...] MFLOPs run after tile and wave quantization, from `row_tiles` [...] =
        `sum_e ceil(n_e / TILE_M)` over a rank's experts."""
        return self._waves(row_tiles)[0]

    def waves(self, row_tiles: np.ndarray) -> np.ndarray:
        """[...] waves of tiles the two GEMMs run (each pays a tile's prologue and epilogue)."""
        return self._waves(row_tiles)[1]

    def scale_blocks(self, row_tiles: np.ndarray) -> np.ndarray:
        """[...] waves x weight-scale blocks along K, summed over both GEMMs (a block-scaled
        format's rescaling of the partial sums; 0 without `scale_block_k`)."""
        if not self.scale_block_k:
            return np.zeros_like(np.asarray(row_tiles, dtype=np.float64))
        s, b = self.num_sms, self.scale_block_k
        return sum(np.ceil(np.asarray(row_tiles, dtype=np.float64) * -(-n // TILE_N) / s)
                   * -(-k // b) for n, k in self.gemm_shapes())

    def feed_kb(self, row_tiles: np.ndarray) -> np.ndarray:
        """[...] KB of operands the busiest SM streams over both GEMMs' waves, `waves
        (tile_rows + TILE_N) K a_f` each (`epsim.cost.fp4_gemm.sm_feed_elements`); 0 unless
        `sm_fed`."""
        tiles = np.asarray(row_tiles, dtype=np.float64)
        if not self.sm_fed:
            return np.zeros_like(tiles)
        return sum(sm_feed_elements(np.ceil(tiles * -(-n // TILE_N) / self.num_sms),
                                    self.tile_rows, TILE_N) * k * self.act_in_bytes * 1e-3
                   for n, k in self.gemm_shapes())

    def _waves(self, row_tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = self.num_sms
        mflops, waves = 0.0, 0.0
        for n, k in self.gemm_shapes():                     # gate+up GEMM, then down GEMM
            tiles = np.asarray(row_tiles, dtype=np.float64) * -(-n // self.tile_cols)
            w = np.ceil(tiles / s)
            filled = tiles if self.split_k else w * s     # split K: idle SMs share the last wave
            mflops = mflops + filled * (2.0 * self.tile_rows * self.tile_cols * k * 1e-6)
            waves = waves + w
        return mflops, waves


def row_tiles(rows_per_expert: np.ndarray, tile_rows=TILE_M) -> np.ndarray:
    """[...] `sum_e ceil(n_e / tile_rows)` over the last axis (`[..., experts]` rows per expert;
    `tile_rows` [...] or a scalar, `TILE_M` unless the kernel tiles otherwise)."""
    rows = np.asarray(rows_per_expert, dtype=np.float64)
    tile = np.asarray(tile_rows, dtype=np.float64)[..., None]
    return np.ceil(rows / tile).sum(axis=-1)


def experts_defaults(hardware: HardwareSpec, weight_dtype: str = "bf16") -> dict[str, float]:
    """Datasheet parameters of `any/experts`: HBM and tensor peak times stated efficiencies;
    the peak at the rate the weight format's GEMM runs (`epsim.spec.quant.weight_tensor_dtype`:
    FP8 for fp8 / fp8_block, FP4 for nvfp4, BF16 for bf16 and the weight-only w4a16)."""
    dtype = weight_tensor_dtype(weight_dtype)
    peak = hardware.tensor_tflops(dtype)
    if peak is None:
        raise SpecError(f"weight format ({weight_dtype!r}) must run on a GPU with {dtype.upper()} "
                        f"tensor cores: {hardware.name} has none")
    return {"base_us": 8.0, "per_expert_us": 0.0, "wave_us": 0.0,
            "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY, "tflops": peak * TENSOR_EFFICIENCY}


def carried_rates(params: dict[str, float], fitted_on: HardwareSpec,
                  on: HardwareSpec) -> dict[str, float]:
    """A dense kernel's fitted `params` (`EXPERT_TERMS`: absolute rates) carried from the GPU it
    was fitted on to another: the efficiencies kept, the rates the other GPU's datasheet times
    them (`hbm_gbps x HBM_on / HBM_fitted`, `tflops x BF16_on / BF16_fitted`, as the `gemm`
    component's fractions `hbm_frac`, `tensor_frac` carry); fixed costs (`base_us`, `wave_us`)
    kept. The same GPU, or one without a BF16 peak on either side: `params` as they are."""
    if fitted_on.name == on.name or not (fitted_on.bf16_tflops and on.bf16_tflops):
        return dict(params)
    out = dict(params)
    if "hbm_gbps" in out:
        out["hbm_gbps"] = out["hbm_gbps"] * on.hbm_gbps / fitted_on.hbm_gbps
    if "tflops" in out:
        out["tflops"] = out["tflops"] * on.bf16_tflops / fitted_on.bf16_tflops
    return out


def _work(pairs, active, tiles, gemm: ExpertGemm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(memory KB under the roofline, quantized MFLOPs, waves), elementwise over [..., ranks]
    (the rows' bytes outside it where `gemm.serial_rows`: `serial_kb`)."""
    rows_kb = 0.0 if gemm.serial_rows else pairs * gemm.roofline_row_bytes
    mem_kb = (gemm.stream_kb(active) + rows_kb * 1e-3 if gemm.sm_stream
              else (active * gemm.weight_bytes + rows_kb) * 1e-3)
    mflops, waves = gemm._waves(tiles)
    return mem_kb, mflops, waves


def serial_kb(pairs, gemm: ExpertGemm):
    """[...] KB of the rows' activations priced beside the roofline (`ExpertGemm.serial_rows`;
    0 where they are under it)."""
    return pairs * gemm.act_bytes_per_row * 1e-3 if gemm.serial_rows else 0.0 * pairs


def _math_us(mflops, waves, params: dict[str, float], gemm: ExpertGemm | None = None):
    """The math side: MFLOPs at `tflops` and the waves' fixed cost; where `params` hold the
    datasheet `peak_tflops` (a tuned tile's record, `epsim.cost.record`), the tile's feed share
    (`gemm.feed_ratio`) at `tflops` and the rest at the peak (module docstring)."""
    if gemm is None or not params.get("peak_tflops"):
        per_mflop = 1.0 / params["tflops"]
    else:
        ratio = gemm.feed_ratio
        per_mflop = ratio / params["tflops"] + (1.0 - ratio) / params["peak_tflops"]
    return mflops * per_mflop + waves * params.get("wave_us", 0.0)


def experts_rank_us(pairs: np.ndarray, active: np.ndarray, tiles: np.ndarray, gemm: ExpertGemm,
                    params: dict[str, float], reread_us=0.0) -> np.ndarray:
    """[..., ranks] microseconds each rank spends on its local experts.

    Args:
        pairs: [..., ranks] token-expert pairs (rows) computed per rank.
        active: [..., ranks] local experts that received >= 1 token.
        tiles: [..., ranks] `row_tiles` of each rank's experts.
        reread_us: [..., ranks] weight re-reads of a kernel whose token tiles each stream the
            expert's weights (`epsim.cost.rereads.reread_kb`), on the memory side of the
            roofline: a compute-bound kernel's refills overlap its math.
    """
    pairs, active, tiles = (np.asarray(a, dtype=np.float64) for a in (pairs, active, tiles))
    mem_kb, mflops, waves = _work(pairs, active, tiles, gemm)
    math = _math_us(mflops, waves, params, gemm)
    if gemm.sm_fed and params.get("sm_feed_gbps"):      # the MMA or the SMs' feed, the longer
        math = math + np.maximum(gemm.feed_kb(tiles) / params["sm_feed_gbps"]
                                 - mflops / params["tflops"], 0.0)
    if gemm.serial_rows and params.get("wave_row_us"):   # a wave's epilogue writes its rows
        math = math + params["wave_row_us"] * waves * gemm.tile_rows
    if gemm.scale_block_k:      # a block-scaled format rescales its partial sums per K block
        math = math + params.get("dequant_us", 0.0) * gemm.scale_blocks(tiles)
    t = np.maximum(mem_kb / params["hbm_gbps"] + reread_us, math)
    t = t + params["base_us"]
    if gemm.serial_rows:        # the rows' own kernels and tiles, beside the weight stream
        t = t + serial_kb(pairs, gemm) / params["hbm_gbps"]
    if params.get("per_expert_us"):
        t = t + params["per_expert_us"] * active
    if gemm.quant_bytes_per_row:    # a quantised format's activation quantisation (own kernels)
        t = t + pairs * gemm.quant_bytes_per_row * 1e-3 / params["hbm_gbps"]
    return t


def experts_features(pairs: np.ndarray, active: np.ndarray, tiles: np.ndarray, gemm: ExpertGemm,
                     params: dict[str, float]) -> np.ndarray:
    """Design rows at the slowest rank (slowest and bound side picked with `params`).

    Returns:
        [..., 5] columns (1, active, memory KB if memory-bound else 0, then if compute-bound
        else 0: quantized MFLOPs, waves); times `EXPERT_TERMS.coefficients(params)` gives
        `experts_us`.
    """
    pairs, active, tiles = (np.asarray(a, dtype=np.float64) for a in (pairs, active, tiles))
    slowest = experts_rank_us(pairs, active, tiles, gemm, params).argmax(axis=-1)[..., None]
    a, p, n = (np.take_along_axis(x, slowest, axis=-1)[..., 0] for x in (active, pairs, tiles))
    mem_kb, mflops, waves = _work(p, a, n, gemm)
    mem_bound = mem_kb / params["hbm_gbps"] >= _math_us(mflops, waves, params, gemm)
    return np.stack([np.ones_like(a), a, np.where(mem_bound, mem_kb, 0.0) + serial_kb(p, gemm),
                     np.where(mem_bound, 0.0, mflops), np.where(mem_bound, 0.0, waves)], axis=-1)


def experts_us(pairs: np.ndarray, active: np.ndarray, tiles: np.ndarray, gemm: ExpertGemm,
               params: dict[str, float]) -> np.ndarray:
    """[...] microseconds of the slowest rank (`max_r experts_rank_us`)."""
    return experts_rank_us(pairs, active, tiles, gemm, params).max(axis=-1)


def dense_us(tokens: np.ndarray, gemm: ExpertGemm, params: dict[str, float]) -> np.ndarray:
    """[...] microseconds of a dense SwiGLU MLP (one expert) on `tokens` rows; 0 when idle."""
    tokens = np.asarray(tokens, dtype=np.float64)
    busy = tokens > 0
    t = experts_rank_us(tokens, busy.astype(np.float64), np.ceil(tokens / TILE_M), gemm, params)
    return np.where(busy, t, 0.0)


def even_row_tiles(pairs: np.ndarray, active: np.ndarray, tile_rows=TILE_M) -> np.ndarray:
    """[...] `row_tiles` when a rank's rows split evenly over its active experts (the
    simulator's expected loads: each active expert gets `pairs / active` rows), in tiles of
    `tile_rows` [...] (or a scalar) rows."""
    pairs = np.asarray(pairs, dtype=np.float64)
    active = np.asarray(active, dtype=np.float64)
    per = np.divide(pairs, active, out=np.zeros_like(pairs), where=active > 0)
    return active * np.ceil(per / tile_rows)


def even_experts_us(pairs: np.ndarray, active: np.ndarray, gemm: ExpertGemm,
                    params: dict[str, float]) -> np.ndarray:
    """[...] `experts_us` at `even_row_tiles` (the simulator's expected loads; `[..., ranks]`
    in, last axis reduced).

    Where every rank has the same active experts (a loaded batch: all of them), a rank's time
    grows with its pairs alone -- its tiles `a ceil(p / a / TILE_M)`, its memory, the math
    (positive factors, `ceil`, a non-negative `wave_us`) and their roofline; rounding keeps
    the order -- so the busiest rank's pairs give the slowest rank's time: the same bits from
    one rank's terms instead of every rank's (the engines' hot path)."""
    pairs = np.asarray(pairs, dtype=np.float64)
    active = np.asarray(active, dtype=np.float64)
    if (pairs.shape[-1] > 1 and active.shape == pairs.shape and params.get("wave_us", 0.0) >= 0
            and params["tflops"] > 0 and params["hbm_gbps"] > 0
            and active.min() == active.max()):
        pairs, active = pairs.max(axis=-1, keepdims=True), active[..., :1]
    return experts_us(pairs, active, even_row_tiles(pairs, active, gemm.tile_rows), gemm, params)


def model_gemm(model, gpu: str, moe_tp_size: int = 1) -> ExpertGemm:
    """The routed experts' `ExpertGemm` of a `ModelSpec` on a zoo GPU: with MoE-TP, one GPU's
    share (the intermediate and the weights split over `moe_tp_size` GPUs)."""
    if moe_tp_size == 1:
        return ExpertGemm(model.hidden_size, model.moe_intermediate_size, model.expert_bytes,
                          num_sms(gpu))
    return ExpertGemm(model.hidden_size, model.moe_intermediate_size // moe_tp_size,
                      model.expert_bytes / moe_tp_size, num_sms(gpu))


def record_projections(record) -> int:
    """`expert_projections` of a MeasurementRecord's experts (`extra.activation`; SwiGLU where
    the record names none)."""
    return expert_projections(str(record.extra.get("activation", "")))


def dense_gemm(hidden_size: int, intermediate_size: int, bytes_per_param: float,
               gpu: str) -> ExpertGemm:
    """A dense SwiGLU MLP of width `intermediate_size` as one expert, its two GEMMs cuBLAS's
    (`split_k`: FLOPs tile- but not wave-quantised, as the `gemm` component's BF16 GEMMs)."""
    return ExpertGemm(hidden_size, intermediate_size,
                      3.0 * hidden_size * intermediate_size * bytes_per_param, num_sms(gpu),
                      split_k=True)
