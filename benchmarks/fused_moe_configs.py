"""SGLang 0.5.9's fused-MoE tile configs for DeepSeek-V3 at MoE-TP 8, and the torch stand-ins
for its CUDA helpers, for benchmarks/fused_moe_configs_gpu.py (which says what is timed).

Config sources (`SOURCES`; `pick` copies `get_moe_configs` / `try_get_optimal_moe_config`,
`fused_moe_triton_config.py:38-266` of the 0.5.9 wheel, over its N 256 block-FP8 tables,
vendored in `data/sglang_0_5_9_moe_configs_n256.json`):

- `served`: E 257 (the shared expert fused as the 257th, hit by every token: top-k 9), device
  NVIDIA_H200, Triton 3.5.1 (the 0.5.9 image's): the tuned json for w13 and its `_down.json`
  for w2, whose USE_TMA loads A and B through TMA descriptors (`fused_moe.py:394-398`);
- `collector`: AIC's collector (`collector/sglang/collect_moe.py`): E 256, top-8, no shared
  expert, the E 256 H200 table (only under `triton_3_1_0/`: SGLang falls back to it from any
  Triton) as `override_config`, one config for both GEMMs, no TMA;
- `collector_tiles_e257`: the collector's tiles on the served problem (E 257, top-k 9): the
  config's effect alone;
- `device_served`, `device_collector`: the same two lookups under this GPU's own device name
  (`torch.cuda.get_device_name()`, spaces to '_'); where the wheel has no table for it (H100:
  none at N 256) SGLang's `get_default_config` (BLOCK_SIZE_M 64).

Torch stand-ins: `align` for sgl_kernel's `moe_align_block_size`, `quant_fp8_groups` for its
per-token-group FP8 quantiser. Imports torch only inside functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "data" / "sglang_0_5_9_moe_configs_n256.json"
HIDDEN = 7168
INTER_PER_GPU = 256          # DeepSeek-V3's 2048 / MoE-TP 8: SGLang's N
GROUP = 128                  # block-FP8 group (weights 128 x 128, activations 1 x 128)
NUM_ROUTED = 256
TOP_K_ROUTED = 8
ROUTED_SCALING = 2.5         # DeepSeek-V3's routed_scaling_factor
FP8_MAX = 448.0              # float8_e4m3fn
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SERVED_TRITON = "3.5.1"      # torch 2.9.1's, which SGLang 0.5.9's images run
# fused_moe_triton_config.py:62, newest first; 3.5.1 is not in it (its own folder is read first)
SUPPORTED_TRITON_VERSIONS = ("3.4.0", "3.3.1", "3.2.0", "3.1.0")
# one expert's MoE-TP slice: w13 [512, 7168] + w2 [7168, 256] fp8, their fp32 block scales
EXPERT_WEIGHT_BYTES = (2 * INTER_PER_GPU * HIDDEN + HIDDEN * INTER_PER_GPU
                       + 4 * (2 * INTER_PER_GPU // GROUP) * (HIDDEN // GROUP)
                       + 4 * (HIDDEN // GROUP) * (INTER_PER_GPU // GROUP))


@dataclass(frozen=True)
class Source:
    """Where a run's tile configs come from, and the MoE problem it times."""

    name: str
    num_experts: int            # experts of the timed problem: 257 (shared fused) or 256
    config_experts: int         # E of the table looked up
    device_name: str | None     # the table's device; None: this GPU's
    override: bool              # one config for both GEMMs (the collector's override_config)
    what: str


SOURCES = {s.name: s for s in (
    Source("served", 257, 257, "NVIDIA_H200", False,
           "SGLang 0.5.9 serving R1 on H200: E 257 json + _down json (TMA), Triton 3.5.1"),
    Source("collector", 256, 256, "NVIDIA_H200", True,
           "AIC's collector: E 256, top-8, the E 256 H200 json (triton_3_1_0), one config"),
    Source("collector_tiles_e257", 257, 256, "NVIDIA_H200", True,
           "the collector's tiles on the served E 257 problem"),
    Source("device_served", 257, 257, None, False, "the served lookup under this GPU's name"),
    Source("device_collector", 256, 256, None, True,
           "the collector's lookup under this GPU's name"),
)}


@dataclass(frozen=True)
class Picked:
    """The tiles one source runs at one token count (SGLang's config dicts, USE_TMA removed)."""

    w13: dict
    w2: dict
    w2_tma: bool
    w13_file: str               # the table read, or "default" (get_default_config)
    w2_file: str


def config_file_name(num_experts: int, n: int, device_name: str, down: bool) -> str:
    """`get_config_file_name` (fused_moe_triton_config.py:19-35) for fp8_w8a8, block [128, 128]."""
    return (f"E={num_experts},N={n},device_name={device_name},dtype=fp8_w8a8,"
            f"block_shape=[{GROUP}, {GROUP}]{'_down' if down else ''}.json")


def moe_configs(tables: dict, num_experts: int, n: int, device_name: str, triton_version: str,
                down: bool) -> tuple[dict | None, str]:
    """`get_moe_configs` (fused_moe_triton_config.py:38-126) over `tables`.

    Args:
        tables: {"triton_X_Y_Z/<file name>": {key: config}}, the wheel's configs folder.
    Returns:
        ({tokens: config} or None, the path read or "default").
    """
    name = config_file_name(num_experts, n, device_name, down)
    for version in (triton_version, *SUPPORTED_TRITON_VERSIONS):
        path = f"triton_{version.replace('.', '_')}/{name}"
        if path in tables:
            return {int(k): v for k, v in tables[path].items()}, path
    return None, "default"


def default_config() -> dict:
    """`get_default_config` for fp8_w8a8 with block_shape [128, 128] on CUDA (lines 129-190)."""
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": GROUP, "BLOCK_SIZE_K": GROUP,
            "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3}


def nearest(configs: dict, num_tokens: int) -> dict:
    """The first key nearest the token count (`min(configs, key=lambda x: abs(x - M))`)."""
    return dict(configs[min(configs, key=lambda k: abs(k - num_tokens))])


def pick(source: Source, num_tokens: int, tables: dict, this_device: str,
         tma_supported: bool = True) -> Picked:
    """`try_get_optimal_moe_config(..., return_down_config=True)` (lines 193-266) and
    `fused_experts_impl`'s USE_TMA rule (fused_moe.py:394-398) for one source.

    Args:
        this_device: this GPU's SGLang device name ("NVIDIA_H100_80GB_HBM3").
        tma_supported: Triton has `triton.tools.tensor_descriptor` (3.4 and later).
    """
    device = source.device_name or this_device
    configs, path = moe_configs(tables, source.config_experts, INTER_PER_GPU, device,
                                SERVED_TRITON, down=False)
    w13 = nearest(configs, num_tokens) if configs else default_config()
    if source.override:          # the collector's override_config: no down table is read
        return Picked(w13, dict(w13), False, path, path)
    down_configs, down_path = moe_configs(tables, source.config_experts, INTER_PER_GPU, device,
                                          SERVED_TRITON, down=True)
    if not down_configs:
        return Picked(w13, dict(w13), False, path, path)
    w2 = nearest(down_configs, num_tokens)
    assert w2["BLOCK_SIZE_M"] == w13["BLOCK_SIZE_M"]    # SGLang asserts it (line 262)
    tma = tma_supported and bool(w2.pop("USE_TMA", False))
    return Picked(w13, w2, tma, path, down_path)


def sglang_device_name(torch_name: str) -> str:
    """SGLang's device name in config files: `torch.cuda.get_device_name()`, spaces to '_'."""
    return torch_name.replace(" ", "_")


def align(topk_ids, block_m: int, num_experts: int):
    """`moe_align_block_size` (moe_align_block_size.py:19-86, sgl_kernel's) in torch: routed rows
    sorted by expert, each expert's run padded to a multiple of block_m with the sentinel numel.

    Args:
        topk_ids: [tokens, topk] int, expert of each routed row.
    Returns:
        sorted_ids [EM] int32 (EM = numel x block_m below num_experts + 1 routed rows, else
        numel + (num_experts + 1)(block_m - 1)), expert_ids [ceil(EM / block_m)] int32 (-1
        past the used blocks), num_tokens_post_padded [1] int32.
    """
    import torch
    flat = topk_ids.flatten().long()
    numel = flat.numel()
    em = (numel * block_m if numel < num_experts + 1
          else numel + (num_experts + 1) * (block_m - 1))
    counts = torch.bincount(flat, minlength=num_experts)              # [experts]
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(padded, 0) - padded                          # first padded row
    order = torch.argsort(flat, stable=True)                           # routed rows by expert
    experts = flat[order]
    rank = torch.arange(numel, device=flat.device) - (torch.cumsum(counts, 0) - counts)[experts]
    sorted_ids = torch.full((em,), numel, dtype=torch.int32, device=flat.device)
    sorted_ids[starts[experts] + rank] = order.to(torch.int32)
    blocks = torch.repeat_interleave(torch.arange(num_experts, device=flat.device),
                                     padded // block_m)
    expert_ids = torch.full((-(-em // block_m),), -1, dtype=torch.int32, device=flat.device)
    expert_ids[:blocks.numel()] = blocks.to(torch.int32)
    post = padded.sum().reshape(1).to(torch.int32)
    return sorted_ids, expert_ids, post


def quant_fp8_groups(x):
    """Per-token-group FP8 quantisation (`per_token_group_quant_fp8`, group 128, eps 1e-10).

    Args:
        x: [rows, K] bf16.
    Returns:
        [rows, K] float8_e4m3fn and [rows, K / 128] fp32 scales.
    """
    import torch
    rows, k = x.shape
    g = x.view(rows, k // GROUP, GROUP).float()
    scale = g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / FP8_MAX   # [rows, K/128, 1]
    q = (g / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(rows, k), scale.squeeze(-1)


def routing(num_tokens: int, seed: int):
    """Top-8 of 256 routed experts uniformly at random, and their weights (CPU, seeded).

    Returns:
        [tokens, 8] int32 ids, [tokens, 8] fp32 weights summing to 1 a token.
    """
    import torch
    gen = torch.Generator().manual_seed(seed)
    ids = torch.rand(num_tokens, NUM_ROUTED, generator=gen).topk(TOP_K_ROUTED, dim=1).indices
    w = torch.rand(num_tokens, TOP_K_ROUTED, generator=gen)
    return ids.to(torch.int32), w / w.sum(1, keepdim=True)


def load_tables(path: Path = CONFIGS) -> dict:
    """The vendored tables: {"triton_X_Y_Z/<file name>": {key: config}}."""
    return json.loads(path.read_text())


def bundle_tables(configs_dir: Path) -> dict:
    """The wheel's N 256 block-FP8 tables for E 256 and 257 (what `CONFIGS` holds), from
    `sglang/srt/layers/moe/fused_moe_triton/configs/` of an unpacked wheel."""
    out = {}
    for version in sorted(p for p in configs_dir.iterdir() if p.name.startswith("triton_")):
        for f in sorted(version.iterdir()):
            if (f.name.startswith(("E=256,", "E=257,")) and ",N=256," in f.name
                    and f"dtype=fp8_w8a8,block_shape=[{GROUP}, {GROUP}]" in f.name):
                out[f"{version.name}/{f.name}"] = json.loads(f.read_text())
    return out
