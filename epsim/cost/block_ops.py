"""The MoE block's own ops around the experts: router, permute into expert order, top-k weighting.

What the live block (`live.block.Qwen3MoeSparseMoeBlock`) runs on one rank besides dispatch,
grouped GEMM and combine, per MoE layer, with `T` the rank's own tokens, `P` the token-expert
pairs its experts compute (one rank: `P = T * top_k`), `H` hidden, `E` experts, `k` top-k:

  router             gate GEMM `[T, H] x [H, E]` (BF16), softmax in fp32, top-k, renormalize,
                     slot choice: `2TH + 2EH + 12TE + 40Tk + 8T` bytes, `2TEH` FLOPs
  permute            choices -> (row, k) pairs sorted by slot (`torch.argsort`), rows gathered
                     into expert order: `4HP + 112P` bytes
  combine_weighting  each pair's output times its weight (BF16), fp32 copy, `index_add_` into
                     `[T, H]` fp32 (k atomic adds per element), cast back: `22HP + 10TH + 36P`

(bytes counted from the kernels' reads and writes: `epsim/cost/block_ops.py`'s `block_ops_work`).
The kernels run one after another, so their times add; the router GEMM alone is a roofline:

    t = launch_us * kernels + sort_block_us * [P > 128] + sort_device_us * [P > 4096]
        + other_bytes / hbm_gbps * 1e-3
        + max(gemm_bytes / hbm_gbps * 1e-3, router_flops / tflops * 1e-6)

  launch_us       per-launch base: the fixed device time (launch, ramp, tail) of each of the
                  parts' kernels (`KERNELS`: 6 router, 14 permute, 7 weighting; counted from the
                  aten ops the block dispatches, tests/live/test_block.py)
  sort_block_us   `torch.argsort` of more than 128 keys runs a one-block radix sort instead of
                  the in-warp/bitonic sort (PyTorch `sortKeyValueInplace`)
  sort_device_us  more than 4096 keys: the multi-kernel device-wide radix sort (cub)
  hbm_gbps        HBM bandwidth these passes reach (<= datasheet; the fp32 atomic adds of the
                  weighting, most of the bytes, run below a plain copy's rate)
  tflops          the router GEMM's tensor rate (<= datasheet BF16 peak); at `E` 128-256 the
                  GEMM is memory-bound on H200 (intensity ~E FLOP/byte), so a fit on such
                  records keeps the datasheet value

The layer waits for the slowest rank: `max_r t_r`. Fitted as `any/block_ops/graph` (device
time) and `any/block_ops/host` (what an eager step adds) on `block_ops` records of one GPU.

The engine that serves the model (`ENGINES`, as `epsim.cost.attention_ops`) names which kernels
run and what they move; the fit's per-launch, per-byte and router-GEMM coefficients price them
alike. `transformers` is the live block above (what the records and the composition axis
measure). `sglang` is SGLang's MoE block on CUDA in decode (python/sglang/srt/models/
deepseek_v2.py `MoEGate`/`DeepseekV2MoE`, qwen3_moe.py, layers/moe/topk.py `select_experts`,
layers/moe/fused_moe_triton/fused_moe.py `fused_experts_impl`; sgl-kernel's
`moe_fused_gate`, `topk_softmax`, `moe_align_block_size`), one launch per kernel:

  router             gate GEMM (`F.linear`, BF16 out), its cast to fp32 for the gate, the fused
                     top-k (`moe_fused_gate`: sigmoid, bias, grouped top-k, renormalize,
                     scaling; softmax models `topk_softmax`), and the padded-region mask /
                     logical-to-physical map of the ids (`_biased_grouped_topk_postprocess`, one
                     compiled kernel): 4 launches, `2TH + 2EH + 12TE + 8Tk` bytes (GEMM out,
                     cast, gate read, weights and ids written), the same GEMM roofline. At <= 16
                     tokens of a DeepSeek-shaped gate (`H` 7168, `E` 256 or 384) on Hopper
                     `dsv3_router_gemm` writes fp32 itself: no cast, 3 launches, `8TE` for `12TE`
  permute            `moe_align_block_size`: the zeroed expert counts, the count/align kernel
                     and the scatter of pair ids into expert order: 3 launches, `12P` bytes
                     (ids read, sorted ids written, counts); no rows move (the fused MoE GEMM
                     gathers its rows by the sorted ids) and no `torch.argsort` (no sort steps)
  combine_weighting  the top-k weight is multiplied inside the down GEMM (`mul_routed_weight`);
                     `moe_sum_reduce` (the top-k sum with the routed scaling factor): 1 launch,
                     `2HP + 2TH` bytes

  so 8 launches against transformers' 27; DeepEP low-latency still adds the router alone (its
  dispatch writes per-expert rows, its combine weights and sums). DeepEP normal's `ep_scatter` /
  `ep_gather` are priced by the same permute and weighting counts (their row copies are not
  counted apart).

  gate               the router's gate GEMM and its fp32 cast alone, no top-k: 2 launches (1 at
                     `dsv3_router_gemm`), `2TH + 2EH + 8TE` bytes (`4TE` fp32 out at dsv3); what
                     a step adds where the experts' fit timed a top-k of its own (aiconfigurator's
                     Triton MoE rows: `epsim.cost.block_ops_parts.topk_in_fit`). transformers': the
                     `F.linear` alone, 1 launch, `2TH + 2EH + 2TE`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from epsim.cost.attention_ops import ENGINES      # the serving engines, one list for both blocks
from epsim.cost.linear import BLOCK_OPS_TERMS
from epsim.cost.roofline import HBM_EFFICIENCY, TENSOR_EFFICIENCY
from epsim.spec.hardware import HardwareSpec

# kernels each part launches in transformers' block: the aten ops the live block dispatches on
# CUDA in BF16, views and scalars left out (tests/live/test_block.py counts them)
KERNELS = {"router": 6, "permute": 14, "combine_weighting": 7, "gate": 1}
# SGLang's (module docstring): gate GEMM, fp32 cast, fused top-k, id postprocess; the counts'
# memset, align and scatter of `moe_align_block_size`; `moe_sum_reduce`
SGLANG_KERNELS = {"router": 4, "permute": 3, "combine_weighting": 1, "gate": 2}
ENGINE_KERNELS = {"transformers": KERNELS, "sglang": SGLANG_KERNELS}
# SGLang's `MoEGate` takes `dsv3_router_gemm` (fp32 out, no cast kernel) up to this many tokens
# of a gate of these shapes (deepseek_v2.py `MoEGate.forward`; sm90+, every GPU epsim models)
DSV3_ROUTER_TOKENS = 16
DSV3_ROUTER_HIDDEN = 7168
DSV3_ROUTER_EXPERTS = (256, 384)
SMALL_SORT_KEYS = 128       # argsort up to this many keys: one warp / bitonic sort
BLOCK_SORT_KEYS = 4096      # up to this many: one-block radix sort; above: device radix sort
PARTS = ("router", "permute", "combine_weighting")
# the router's gate GEMM alone (SGLang: and its fp32 cast), without the top-k: what a step adds
# where the experts' fit timed a top-k of its own (`epsim.cost.block_ops_parts.topk_in_fit`); never
# beside "router"
GATE = "gate"
ROUTER_PARTS = ("router", GATE)          # parts that run the gate GEMM


def block_ops_defaults(hardware: HardwareSpec) -> dict[str, float]:
    """Datasheet parameters of `any/block_ops`: 2 µs per kernel launched from a CUDA graph (a
    stated assumption), no sort steps, HBM and tensor peak times the stated efficiencies."""
    return {"launch_us": 2.0, "sort_block_us": 0.0, "sort_device_us": 0.0,
            "hbm_gbps": hardware.hbm_gbps * HBM_EFFICIENCY,
            "tflops": hardware.bf16_tflops * TENSOR_EFFICIENCY}


def block_ops_work(tokens, pairs, hidden_size: int, num_experts: int, top_k: int,
                   parts: tuple[str, ...] = PARTS, engine: str = "transformers"
                   ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{part: (bytes, FLOPs)} of each of `parts` as `engine` runs them (module docstring),
    elementwise over `tokens` and `pairs`.

    Each term keeps its own shape: the router's are `tokens`-shaped, the permute's and the
    weighting's broadcast `tokens` against `pairs`, and their FLOPs are a scalar 0.

    Args:
        tokens: [...] the rank's own tokens (router, the weighted sum's output rows).
        pairs: [...] token-expert pairs the rank's experts compute (permute, weighting).
    """
    t = np.asarray(tokens, dtype=np.float64)
    p = np.asarray(pairs, dtype=np.float64)
    h, e, k = float(hidden_size), float(num_experts), float(top_k)
    has_tokens = t > 0
    # a rank with tokens runs every part; the mask is needed only where some rank has none
    busy = None if has_tokens.all() else has_tokens | (p > 0)

    def on_busy(x: np.ndarray) -> np.ndarray:
        return x if busy is None else np.where(busy, x, 0.0)

    work = {}
    if engine == "sglang":
        for part in parts:
            if part == "router":       # the cast's 6TE less where the gate writes fp32
                cast = 6.0 * ~_dsv3_router(t, hidden_size, num_experts)
                work[part] = (np.where(has_tokens, 2 * t * h + 2 * e * h + (6 + cast) * t * e
                                       + 8 * t * k, 0.0), 2.0 * t * e * h)
            elif part == GATE:         # GEMM out (BF16, or fp32 at dsv3) and the cast's 6TE
                out = np.where(_dsv3_router(t, hidden_size, num_experts), 4.0, 8.0)
                work[part] = (np.where(has_tokens, 2 * t * h + 2 * e * h + out * t * e, 0.0),
                              2.0 * t * e * h)
            elif part == "permute":
                work[part] = (on_busy(12 * p), 0.0)
            else:
                work[part] = (on_busy(2 * h * p + 2 * t * h), 0.0)
        return work
    for part in parts:
        if part == "router":
            work[part] = (np.where(has_tokens, 2 * t * h + 2 * e * h + 12 * t * e + 40 * t * k
                                   + 8 * t, 0.0), 2.0 * t * e * h)
        elif part == GATE:             # `F.linear` alone: operands in, logits out (BF16)
            work[part] = (np.where(has_tokens, 2 * t * h + 2 * e * h + 2 * t * e, 0.0),
                          2.0 * t * e * h)
        elif part == "permute":
            work[part] = (on_busy(4 * h * p + 112 * p), 0.0)
        else:
            work[part] = (on_busy(22 * h * p + 10 * t * h + 36 * p), 0.0)
    return work


@lru_cache(maxsize=16)
def _bytes_per_pair(hidden_size: int, num_experts: int, top_k: int, parts: tuple[str, ...],
                    engine: str) -> float:
    """Bytes the parts move per token-expert pair (`block_ops_work` of one pair, no tokens of
    its own: the work is linear in the pairs)."""
    one = block_ops_work(0.0, 1.0, hidden_size, num_experts, top_k, parts, engine)
    return float(sum(one[part][0] for part in parts))


def _router_gemm(t: np.ndarray, work: dict, hidden_size: int, num_experts: int,
                 params: dict[str, float], parts: tuple[str, ...]) -> tuple:
    """The router GEMM's roofline over tokens `t` ([...]): (its operand bytes where it is
    compute-bound at `params`, else 0 -- what leaves the memory column; its MFLOPs where
    compute-bound, else 0), tokens-shaped; (0, 0) without the router."""
    gate = next((part for part in parts if part in ROUTER_PARTS), None)
    if gate is None:
        return 0.0, 0.0
    flops = work[gate][1]
    gemm_bytes = np.where(t > 0, 2.0 * (t + num_experts) * hidden_size + 2.0 * t * num_experts,
                          0.0)
    compute_bound = flops * 1e-6 / params["tflops"] > gemm_bytes * 1e-3 / params["hbm_gbps"]
    return np.where(compute_bound, gemm_bytes, 0.0), np.where(compute_bound, flops * 1e-6, 0.0)


def block_ops_features(tokens, pairs, hidden_size: int, num_experts: int, top_k: int,
                       params: dict[str, float], parts: tuple[str, ...] = PARTS,
                       engine: str = "transformers") -> np.ndarray:
    """[..., 5] design columns (kernels, [P > 128], [P > 4096], memory KB, router GEMM MFLOPs)
    of the given parts; times `BLOCK_OPS_TERMS.coefficients(params)` gives `block_ops_us`.

    The router GEMM is a roofline: its operand bytes (`2TH + 2EH + 2TE`) go to the memory
    column when memory-bound at `params`, else its FLOPs to the math column; every other pass
    streams memory. The kernels column counts the parts' launches (none on an idle rank),
    the sort columns come with the permute. `tokens` may be `[ranks]` against `pairs`
    `[..., ranks]` (the engines' draws and layers): the terms of the tokens alone are then
    computed once per rank, with the same bits as on tokens broadcast to the pairs' shape."""
    work = block_ops_work(tokens, pairs, hidden_size, num_experts, top_k, parts, engine)
    t = np.asarray(tokens, dtype=np.float64)
    p = np.asarray(pairs, dtype=np.float64)
    shape = np.broadcast_shapes(t.shape, p.shape)
    num_bytes = sum(work[part][0] for part in parts)
    gemm_bytes, gemm_mflops = _router_gemm(t, work, hidden_size, num_experts, params, parts)
    rows = np.empty(shape + (5,))
    busy = np.greater(num_bytes, 0, out=rows[..., 0])        # 1.0 where the rank runs anything
    if _sorts(parts, engine):
        np.multiply(busy, p > SMALL_SORT_KEYS, out=rows[..., 1])
        np.multiply(busy, p > BLOCK_SORT_KEYS, out=rows[..., 2])
    else:
        rows[..., 1:3] = 0.0
    np.multiply(num_bytes - gemm_bytes, 1e-3, out=rows[..., 3])
    rows[..., 4] = gemm_mflops
    kernels = launches(parts, engine)
    if engine == "sglang" and _gates(parts):                              # no cast kernel
        kernels = kernels - (_dsv3_router(t, hidden_size, num_experts) & (t > 0))
    rows[..., 0] *= kernels                   # (`busy` is this column: 0/1 until here)
    return rows


def launches(parts: tuple[str, ...], engine: str = "transformers") -> int:
    """Kernels `parts` launch per MoE layer on a busy rank as `engine` runs them."""
    if engine not in ENGINES:
        raise ValueError(f"engine ({engine!r}) must be one of {list(ENGINES)}")
    return sum(ENGINE_KERNELS[engine][part] for part in parts)


def _dsv3_router(t: np.ndarray, hidden_size: int, num_experts: int) -> np.ndarray:
    """[...] bool: SGLang's gate runs `dsv3_router_gemm` (fp32 out, no cast) on these tokens."""
    fits = hidden_size == DSV3_ROUTER_HIDDEN and num_experts in DSV3_ROUTER_EXPERTS
    return (t <= DSV3_ROUTER_TOKENS) & fits


def _gates(parts: tuple[str, ...]) -> bool:
    """Whether `parts` run the router's gate GEMM (the router, or its gate alone)."""
    return any(part in ROUTER_PARTS for part in parts)


def _sorts(parts: tuple[str, ...], engine: str) -> bool:
    """Whether the sort steps apply: transformers' permute runs `torch.argsort`; SGLang's
    `moe_align_block_size` counts and scatters (no sort)."""
    return "permute" in parts and engine == "transformers"


_OWN_TERMS: dict = {}     # the last batches' tokens-only terms (`_own_terms`)


def _own_terms(t: np.ndarray, hidden_size: int, num_experts: int, top_k: int,
               params: dict[str, float], parts: tuple[str, ...], per_kb: float,
               per_mflop: float, engine: str) -> tuple[np.ndarray, np.ndarray, bool, bool]:
    """The tokens' own terms (no pairs), tokens-shaped (read-only): (bytes that move,
    microseconds: those bytes less the router GEMM's where it is compute-bound at `per_kb`,
    plus its MFLOPs at `per_mflop`), whether every rank's bytes are positive, and whether
    every rank's are alike. Remembered per tokens and parameters: every draw of a batch, and
    every batch of the same shape, has the same ones (a few dozen small operations each)."""
    key = (t.tobytes(), t.shape, hidden_size, num_experts, top_k, tuple(params.items()), parts,
           engine)
    hit = _OWN_TERMS.get(key)
    if hit is None:
        work = block_ops_work(t, 0.0, hidden_size, num_experts, top_k, parts, engine)
        own_bytes = sum(work[part][0] for part in parts)
        gemm_bytes, gemm_mflops = _router_gemm(t, work, hidden_size, num_experts, params, parts)
        own = (own_bytes - gemm_bytes) * (per_kb * 1e-3) + gemm_mflops * per_mflop
        if engine == "sglang" and _gates(parts):                          # no cast kernel
            own = own - params["launch_us"] * (_dsv3_router(t, hidden_size, num_experts)
                                               & (t > 0))
        own_bytes, own = np.asarray(own_bytes), np.asarray(own)
        own_bytes.flags.writeable = own.flags.writeable = False
        alike = own.ndim == 1 and own.min() == own.max()
        if len(_OWN_TERMS) >= 64:
            _OWN_TERMS.clear()
        hit = _OWN_TERMS[key] = (own_bytes, own, bool((own_bytes > 0).all()), alike)
    return hit


def block_ops_us(tokens, pairs, hidden_size: int, num_experts: int, top_k: int,
                 params: dict[str, float], parts: tuple[str, ...] = PARTS,
                 engine: str = "transformers") -> np.ndarray:
    """[...] microseconds of the slowest rank's block ops (`[..., ranks]` in, last axis reduced).

    `max_r (block_ops_features(...) @ BLOCK_OPS_TERMS.coefficients(params))`, evaluated
    without the design rows (the engines' hot path, one value per draw, layer and rank): the
    terms of the tokens alone (router, the weighting's output rows, the launches) are summed
    once per rank, and per pair only what the pairs change (their bytes, the two sort steps)
    is added. Equal to the rows' product up to rounding (tests/epsim/cost/test_block_ops.py).

    Args:
        tokens: [..., ranks] (or [ranks]) each rank's own tokens; pairs: [..., ranks] pairs
            it computes.
        parts: the parts to cost (the rest lie inside another fitted stage: docs/model.md).
        engine: whose kernels (`ENGINES`; the records' and the composition axis' block is
            transformers').
    """
    launch, sort_block, sort_device, per_kb, per_mflop = BLOCK_OPS_TERMS.coefficients(params)
    t = np.asarray(tokens, dtype=np.float64)
    p = np.asarray(pairs, dtype=np.float64)
    own_bytes, own, all_launch, own_alike = _own_terms(t, hidden_size, num_experts, top_k,
                                                       params, parts, per_kb, per_mflop,
                                                       engine)
    per_pair = _bytes_per_pair(hidden_size, num_experts, top_k, parts, engine)
    if t.shape != p.shape[p.ndim - t.ndim:]:          # tokens reach beyond the pairs' shape
        p = np.broadcast_to(p, np.broadcast_shapes(t.shape, p.shape))
    per_pair_us = per_pair * per_kb * 1e-3
    launched = launch * launches(parts, engine)
    # every rank's own terms alike (a full batch): a rank's time then grows with its pairs
    # alone (non-negative factors and steps; rounding keeps the order), so the busiest rank's
    # pairs give the slowest rank's time, the same bits without the [..., ranks] terms
    alike = (all_launch and own_alike and own.shape[0] == p.shape[-1] and per_pair_us >= 0
             and sort_block >= 0 and sort_device >= 0)
    if alike:
        p, own = p.max(axis=-1), own[0]
    out = p * per_pair_us                                      # [..., ranks] ([...] if alike)
    if all_launch:                          # every rank's own tokens move bytes: all launch
        out += own + launched
    else:                                   # as `block_ops_features`: where bytes move
        out += own
        out += np.where(own_bytes + per_pair * p > 0, launched, 0.0)
    if _sorts(parts, engine):
        if sort_block:                      # (a bool times a float: that float or 0)
            out += (p > SMALL_SORT_KEYS) * sort_block
        if sort_device:
            out += (p > BLOCK_SORT_KEYS) * sort_device
    return out if alike else out.max(axis=-1)
