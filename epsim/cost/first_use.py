"""First use of a kernel at a shape key the serving process has not met: its compile time.

SGLang serves DeepSeek-V3/R1 block-FP8 MoE layers on Hopper with its Triton fused-MoE GEMM
(`fused_moe_triton_kernels.py` `fused_moe_kernel`, launched by `invoke_fused_moe_kernel`). Which
compiled kernel a batch of M tokens runs is set by two things (line numbers of
`sglang/srt/layers/moe/fused_moe_triton/` in the 0.5.9 wheel; the same at sgl-project/sglang
018e2ed):

- its tile config: `try_get_optimal_moe_config` (`fused_moe_triton_config.py:239`, w2's down
  table `:257`) takes the key of the device's tuned table nearest M (`min(configs, key=lambda
  x: abs(x - M))`); the tile sizes,
  `GROUP_SIZE_M`, warps and stages are `tl.constexpr`, so two keys with one config share a kernel;
- Triton's specialisation of plain integer arguments on divisibility by 16: `EM` (the padded
  routed rows, `sorted_token_ids.shape[0]`: `numel + (E + 1)(BLOCK_M - 1)`, or `numel x BLOCK_M`
  below `E + 1` routed rows, `moe_align_block_size.py:58-61`) and `num_valid_tokens`
  (`topk_ids.numel()`, M x top-k), passed as plain ints (`fused_moe_triton_kernels.py:790-791`
  to `fused_moe_kernel`, `:324`). N, K and the strides are fixed per layer.

Each layer launches it twice (w13 without the routed weight, top_k = k; w2 with it, top_k = 1:
two constexpr sets), every MoE layer with the same shapes, so a new (config, specialisation) key
compiles two kernels once per process; every TP rank's process compiles its own at the same
time. Decode runs captured CUDA graphs: their batch sizes compile at start-up. A prefill batch
runs eagerly and meets the keys of its token count.

The tables are SGLang 0.5.9's for DeepSeek-R1 with the shared expert fused (E 257) at TP 8
(N 256) on H200 under Triton 3.5.1 (torch 2.9.1's, which the 0.5.9 images run; `get_moe_configs`
reads `configs/triton_<version>/` first): `E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,
block_shape=[128, 128].json` for w13 and its `_down.json` for w2 (which runs with TMA
descriptors, `fused_moe.py:394-398`); per key (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K,
GROUP_SIZE_M, num_warps, num_stages). Both stop at key 1024, so every prefill batch above 768
tokens runs one tile config and only the specialisation tells its kernels apart. (The Triton
3.3.1 table of earlier releases goes on to 4096 with three configs above 768 tokens.)
"""

from __future__ import annotations

H200_FP8_W13_TILES = {
    1: (16, 64, 128, 1, 4, 5), 2: (16, 64, 128, 1, 4, 5), 4: (16, 64, 128, 32, 4, 5),
    8: (16, 64, 128, 1, 4, 5), 16: (16, 64, 128, 1, 4, 3), 24: (16, 128, 128, 16, 4, 3),
    32: (16, 64, 128, 16, 4, 5), 48: (16, 64, 128, 1, 4, 5), 64: (16, 64, 128, 16, 4, 4),
    96: (16, 64, 128, 16, 4, 5), 128: (16, 64, 128, 16, 4, 3), 256: (16, 128, 128, 32, 4, 4),
    512: (32, 128, 128, 1, 4, 5), 1024: (64, 128, 128, 1, 4, 4),
}
H200_FP8_W2_TILES = {
    1: (16, 128, 128, 16, 4, 2), 2: (16, 128, 64, 64, 4, 3), 4: (16, 128, 128, 1, 4, 2),
    8: (16, 128, 128, 1, 4, 2), 16: (16, 128, 128, 1, 4, 2), 24: (16, 128, 64, 64, 4, 3),
    32: (16, 256, 64, 1, 4, 3), 48: (16, 128, 64, 1, 4, 3), 64: (16, 128, 128, 64, 4, 2),
    96: (16, 128, 128, 64, 4, 2), 128: (16, 128, 128, 64, 4, 2), 256: (16, 128, 128, 64, 4, 2),
    512: (32, 128, 128, 16, 4, 2), 1024: (64, 128, 128, 64, 4, 3),
}
# by the hardware zoo's GPU name: (w13 table, w2 table)
TILE_TABLES = {"H200": (H200_FP8_W13_TILES, H200_FP8_W2_TILES)}
KERNELS_PER_KEY = 2          # w13 and w2: two constexpr sets of one kernel per layer
DIVISIBILITY = 16            # Triton's integer specialisation


def _nearest(table: dict, num_tokens: int) -> tuple:
    return table[min(table, key=lambda k: abs(k - num_tokens))]   # first nearest, as SGLang


def fused_moe_key(num_tokens: int, num_experts: int, top_k: int, tables: tuple) -> tuple:
    """The compiled-kernel key SGLang's Triton fused MoE runs a batch of `num_tokens` with.

    Args:
        num_tokens: tokens of the batch (M), > 0.
        num_experts: experts of the kernel's weights (the routed ones plus fused shared ones).
        top_k: experts each token runs in the kernel (the router's plus fused shared ones).
        tables: (w13, w2) tuned tables, {key: (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, warps,
            stages)}.
    Returns:
        (w13 tiles, w2 tiles, EM % 16 == 0, num_valid_tokens % 16 == 0).
    """
    if num_tokens <= 0:
        raise ValueError(f"num_tokens ({num_tokens}) must be > 0")
    w13, w2 = (_nearest(table, num_tokens) for table in tables)
    block_m = w13[0]              # `moe_align_block_size` pads to the w13 config's BLOCK_M
    numel = num_tokens * top_k
    rows = numel * block_m if numel < num_experts + 1 else numel + (num_experts + 1) * (block_m - 1)
    return w13, w2, rows % DIVISIBILITY == 0, numel % DIVISIBILITY == 0


def warm_keys(token_counts, num_experts: int, top_k: int, tiles: dict) -> set:
    """The keys a process has compiled after running batches of these token counts."""
    return {fused_moe_key(int(m), num_experts, top_k, tiles) for m in token_counts if m > 0}
