"""The tile config SGLang's fused Triton MoE runs a BF16 problem with: a tuned one, or the
default's large tile.

SGLang's `try_get_optimal_moe_config` (`fused_moe_triton_config.py`) loads a tuned JSON per
(E, N, device) -- N the intermediate size one GPU holds -- and picks its entry nearest the
tokens M; without one, `get_default_config` gives BF16 `BLOCK_SIZE_M/N/K = 64/64/32,
GROUP_SIZE_M 8` for M > E and `16/32/64` for M <= E. AIC's collector makes the same lookup
once per row (`collector/sglang/collect_moe.py`, `benchmark`: `get_moe_configs`, else
`get_default_config(num_tokens, ...)`, run under `override_config`).

The default's large tile is its own kernel: a 64x64 tile over 32-deep K steps (Triton's default
4 warps) moves 8 KB per 262 kFLOP, so it runs well under the tensor peak however many rows it
gets, and streams the weights slower than the small tile does. AIC's H200 BF16 `moe_perf`
(0.5.14, balanced, EP 1) shows both sides: every shape without a tuned H200 JSON plateaus at
188-269 TFLOP/s at 4096-16384 tokens while the tuned ones reach 358-591, and at the first
M > E its weights stream at 2.4-2.7 TB/s against 4.0-4.3 TB/s at M <= E (the small tile) and
3.7-4.3 TB/s for a tuned shape at the same M (h200_sxm: E 128 N 1536 at 64 -> 256 tokens
4211 -> 2672 GB/s; E 8 N 16384 at 4 -> 16 tokens 4213 -> 2715). So the records of the large
default tile fit a component of their own (`DEFAULT_TILE`, `local/experts/graph/default_tile`:
its own HBM and tensor rates, same model form), the rest the kernel model as before.

`TUNED_BF16`: the (E, N) of AIC's BF16 shapes that run a tuned JSON on each GPU, from the
tables' own rows at the tokens the hold-outs fit (<= 1024: the stream rate at the first M > E,
and the rate at 1024 tokens where compute-bound) and, where upstream names one, the file
(`triton_3_6_0/E=128,N=704,device_name=NVIDIA_H200.json`, sglang#26588 for Gemma 4). A GPU or
shape not listed runs the default config.

H100's E 512 N 2688 (H 1024, top-22: Nemotron-3 Super's latent experts) runs
`triton_3_5_1/E=512,N=2688,device_name=NVIDIA_H100_80GB_HBM3.json` (BLOCK_SIZE_M/N/K 64/128/128
at M 1024; 64/128/64 at 1536, 3072 and 4096, the entry M 16384 takes; 128/128/64 at 2048): its
one fit-side row past M > E (1024 tokens, 44 rows an expert) streams the weights at 2.72 TB/s,
where every default-tile H100 shape at its first M > E streams 1.92-2.29 TB/s and the tuned
E 128 shapes at 1024 tokens 2.33-2.39 (`aic:h100_sxm/sglang` 0.5.14). On the H200
the same row streams 2.29 TB/s, at the foot of the default's 2.38-2.72: left on the default.

`TUNED_TILES`: the BLOCK_SIZE_M / BLOCK_SIZE_N a tuned JSON gives per M, where the JSON is
readable here (kernel configuration, not measurements): SGLang takes the entry whose key is
nearest M (`configs[min(configs, key=lambda x: abs(x - M))]`), so past its last key the last
entry runs. Its tile sets the work's feed per FLOP (`epsim.cost.experts.ExpertGemm.feed_ratio`):
the tuned shapes switch to larger tiles past 1024 tokens, which the tokens hold-out's fit rows
cannot show. Sources, sgl-project/sglang `python/sglang/srt/layers/moe/moe_runner/triton_utils/
configs/` (SGLang looks in its Triton's own folder first, then the others newest first):

- H100 E 128 N 768: `triton_3_2_0/E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json` (008b79d2;
  the same entries as the fork xbfs/sglang's copy under the older `fused_moe_triton/configs/`).
- H100 E 128 N 704: `triton_3_5_1/E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3.json` (9a0575a4).
- B200 E 128 N 704: `triton_3_5_1/E=128,N=704,device_name=NVIDIA_B200.json` (40f33cd9).
- H200 E 128 N 704: `triton_3_6_0/E=128,N=704,device_name=NVIDIA_H200.json` (c7fdf81f; last key
  1024, so 64 x 128 at every larger M).
- H100 E 512 N 2688: `triton_3_5_1/E=512,N=2688,device_name=NVIDIA_H100_80GB_HBM3.json` (under
  `fused_moe_triton/configs/`, e3cf616c).

- H200 E 128 N 768: `triton_3_2_0/E=128,N=768,device_name=NVIDIA_H200.json`, not stored here;
  its entries at M 1, 4, 16, 32, 48, 64, 512, 1024, 2048 and 4096 as a public analysis of
  Qwen3-30B-A3B on H200 transcribes them (its section "Kernel fusion ... launch parameters",
  with the kernel's launch shapes from its own traces: 256 threads, 192 KB shared memory at
  prefill's M, i.e. 128 x 256 with 8 warps). Keys 2, 8, 24, 96, 128, 256, 1536 and 3072, if the
  file has them, are not listed, so M 256 takes the 64 entry here. SGLang falls back to this
  file where its own Triton's folder has none (a 2026-06 server log in the stored sources:
  "Config file not found at .../triton_3_5_1/... Fallback to triton version 3.2.0"); whether
  AIC's 0.5.14 image also held the `triton_3_6_0` file added upstream in 2026-07 (#30866, not
  readable here) is not settled. The tables agree with this file: the shape runs 468-520
  TFLOP/s at 4096-16384 tokens, where the H200's default-tile shapes plateau at 188-269.

- H200 E 8 N 14336 (Mixtral): `E=8,N=14336,device_name=NVIDIA_H200.json`, added upstream by
  SGLang's H200 tuning PR for Mixtral and Qwen2 (sglang#2689, in the old `fused_moe_triton/
  configs/`, later moved under `triton_3_1_0/`); read here from the fork xbfs/sglang's copy,
  `python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_1_0/` (c72ed544): 128 x 256
  from M 256. vLLM's H200 file of the shape (a separately stored study quotes its BLOCK_SIZE_M
  per M) climbs the same way, 128 rows from M 256. Whether a newer Triton folder of SGLang
  0.5.14 holds another H200 file of the shape is not settled here.
"""

from __future__ import annotations

DEFAULT_TILE = "default_tile"       # mode-path part of the default large tile's component
FUSED_TRITON_KERNEL = "sglang_fused_moe_triton"
# (num_experts, intermediate size per GPU) with a tuned BF16 JSON, per zoo GPU
TUNED_BF16 = {
    "H200": frozenset({(128, 768), (128, 704), (8, 14336)}),
    "H100": frozenset({(128, 768), (128, 704), (512, 2688)}),
    "B200": frozenset({(128, 704)}),
}

# (gpu, num_experts, N) -> ((M key, BLOCK_SIZE_M, BLOCK_SIZE_N), ...) of a readable tuned JSON
TUNED_TILES = {
    ("H100", 128, 768): ((1, 16, 64), (2, 16, 64), (4, 16, 64), (8, 16, 128), (16, 16, 128),
                         (24, 16, 64), (32, 16, 128), (48, 16, 128), (64, 16, 256), (96, 16, 128),
                         (128, 16, 128), (256, 32, 256), (512, 64, 128), (1024, 64, 128),
                         (1536, 128, 256), (2048, 128, 256), (3072, 128, 256), (4096, 128, 256)),
    ("H100", 128, 704): ((1, 16, 32), (2, 16, 32), (4, 16, 32), (8, 16, 64), (16, 16, 32),
                         (24, 16, 32), (32, 16, 32), (48, 16, 32), (64, 32, 32), (96, 16, 64),
                         (128, 16, 64), (256, 32, 64), (512, 64, 64), (1024, 128, 256),
                         (1536, 128, 256), (2048, 128, 256), (3072, 128, 256), (4096, 128, 256)),
    ("B200", 128, 704): ((1, 16, 64), (2, 16, 64), (4, 16, 64), (8, 16, 64), (16, 16, 64),
                         (24, 16, 64), (32, 16, 128), (48, 16, 64), (64, 16, 64), (96, 16, 64),
                         (128, 16, 64), (256, 16, 128), (512, 64, 128), (1024, 64, 128),
                         (1536, 128, 256), (2048, 128, 256), (3072, 256, 256), (4096, 256, 256)),
    ("H200", 128, 704): ((1, 16, 64), (2, 16, 64), (4, 16, 128), (8, 16, 64), (16, 16, 64),
                         (24, 16, 64), (32, 16, 64), (48, 16, 64), (64, 16, 64), (96, 16, 64),
                         (128, 16, 64), (256, 32, 128), (512, 64, 128), (1024, 64, 128)),
    # transcribed, not the file itself (module docstring): keys 2, 8, 24, 96, 128, 256, 1536, 3072 not listed
    ("H200", 128, 768): ((1, 16, 64), (4, 16, 64), (16, 16, 64), (32, 16, 64), (48, 16, 128), (64, 16, 256),
                         (512, 64, 128), (1024, 128, 256), (2048, 128, 256), (4096, 128, 256)),
    # the fork xbfs/sglang's copy of the file (module docstring)
    ("H200", 8, 14336): ((1, 16, 128), (2, 32, 64), (4, 16, 64), (8, 16, 128), (16, 16, 64),
                         (24, 16, 128), (32, 16, 128), (48, 32, 128), (64, 32, 128), (96, 32, 128),
                         (128, 64, 128), (256, 128, 256), (512, 128, 256), (1024, 128, 256),
                         (1536, 128, 256), (2048, 128, 256), (3072, 128, 256), (4096, 128, 256)),
    ("H100", 512, 2688): ((1, 16, 32), (2, 16, 32), (4, 16, 64), (8, 16, 32), (16, 32, 128),
                          (24, 32, 64), (32, 32, 64), (48, 16, 128), (64, 16, 32), (96, 32, 128),
                          (128, 32, 128), (256, 64, 128), (512, 32, 256), (1024, 64, 128),
                          (1536, 64, 128), (2048, 128, 128), (3072, 64, 128), (4096, 64, 128)),
}


def tuned_tile(gpu: str, num_experts: int, intermediate_size: int, num_tokens: int) -> tuple[int, int] | None:
    """(BLOCK_SIZE_M, BLOCK_SIZE_N) the fused Triton MoE runs at M = `num_tokens` from a tuned
    JSON in `TUNED_TILES` (its entry nearest M, the first of two as near, as SGLang's `min`
    takes); None where no readable JSON is listed."""
    entries = TUNED_TILES.get((gpu, num_experts, intermediate_size))
    if not entries:
        return None
    _, block_m, block_n = min(entries, key=lambda e: abs(e[0] - num_tokens))
    return block_m, block_n


def record_tuned_tile(record) -> tuple[int, int] | None:
    """`tuned_tile` of a single-GPU BF16 fused Triton MoE `experts` record at the kernel's M
    (`extra.num_tokens`); None for any other record or where no readable JSON is listed."""
    if (record.kind != "experts" or record.backend != "local" or record.weight_dtype != "bf16"
            or record.extra.get("kernel") != FUSED_TRITON_KERNEL):
        return None
    tokens = int(record.extra.get("num_tokens", record.num_tokens_per_rank * record.ep_size))
    return tuned_tile(record.provenance.hardware, record.num_local_experts or record.num_experts,
                      record.moe_intermediate_size, tokens)


def runs_default_tile(gpu: str, num_experts: int, intermediate_size: int, num_tokens: int) -> bool:
    """Whether the fused Triton MoE runs `get_default_config`'s large BF16 tile (64/64/32): no
    tuned JSON for (E, N) on `gpu` and more tokens M than experts E."""
    return (num_experts, intermediate_size) not in TUNED_BF16.get(gpu, ()) and num_tokens > num_experts


def record_default_tile(record) -> bool:
    """Whether an `experts` record times the fused Triton MoE (`extra.kernel`) at BF16 on one
    GPU in the default large tile (`runs_default_tile` at the kernel's M, `extra.num_tokens`)."""
    if (record.kind != "experts" or record.backend != "local" or record.weight_dtype != "bf16"
            or record.extra.get("kernel") != FUSED_TRITON_KERNEL):
        return False
    tokens = int(record.extra.get("num_tokens", record.num_tokens_per_rank * record.ep_size))
    return runs_default_tile(record.provenance.hardware, record.num_local_experts or record.num_experts,
                             record.moe_intermediate_size, tokens)


def default_tile_path(record, path: str) -> str:
    """The mode path of a single-GPU `experts` record's kernel component: `path`, with
    `DEFAULT_TILE` after it where the fused Triton MoE runs its default large tile."""
    return "/".join(p for p in (path, DEFAULT_TILE) if p) if record_default_tile(record) else path
