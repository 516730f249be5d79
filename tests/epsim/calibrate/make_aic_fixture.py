"""Write the aiconfigurator-core fixture the importer's tests read without the package: a few
hundred rows of a few h200_sxm tables, in the package's `systems/` layout, with its NOTICE.

    python tests/epsim/calibrate/make_aic_fixture.py      # needs aiconfigurator-core installed

Rows are chosen by value (no sampling), so the same package gives the same files.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
OUT = Path(__file__).resolve().parent / "aic_fixture" / "systems"
SYSTEM = "h200_sxm"
GRID = (1, 4, 16, 64, 256, 1024, 4096, 16384)


def _rows(name: str, frame):
    """The rows of table `name` the fixture keeps."""
    f = frame
    if name == "moe_perf":
        qwen = ((f.hidden_size == 2048) & (f.inter_size == 768)) | \
               ((f.hidden_size == 4096) & (f.inter_size == 1536))
        keep = qwen & (f.moe_tp_size == 1) & f.num_tokens.isin(GRID) & (f.topk == 8)
        bf16 = keep & (f.moe_dtype == "bfloat16") & (f.kernel_source == "sglang_fused_moe_triton") \
            & f.moe_ep_size.isin([1, 8]) & (f.distribution == "balanced")
        other = keep & (f.moe_ep_size == 8) & f.num_tokens.isin([16, 1024]) & \
            (f.moe_dtype.isin(["fp8_block"]) | f.distribution.str.startswith("power_law"))
        return f[bf16 | other]
    if name == "gemm_perf":
        shapes = ((f.n == 1536) & (f.k == 2048)) | ((f.n == 2048) & (f.k == 768))
        return f[shapes & f.m.isin(GRID) & f.gemm_dtype.isin(["bfloat16", "fp8_block"])]
    if name.endswith("attention_perf"):
        keep = f.num_heads.isin([32, 64]) & (f.num_key_value_heads == 4) & (f.head_dim == 128) \
            & (f.window_size == 0) & (f.kv_cache_dtype == "bfloat16") & (f.kernel_source == "fa3")
        if name.startswith("generation"):
            return f[keep & f.batch_size.isin([1, 16, 256]) & (f.isl + f.step).isin([256, 4096])]
        return f[keep & f.batch_size.isin([1, 16]) & f.isl.isin([256, 4096, 16384])]
    if name == "generation_mla_perf":
        return f[(f.num_heads == 128) & f.batch_size.isin([1, 64]) & (f.step + f.isl).isin([1024, 8192])]
    if name == "wideep_deepep_ll_perf":
        return f[f.hidden_size.isin([4096, 7168]) & (f.num_topk == 8)]
    if name == "wideep_deepep_normal_perf":
        return f[(f.hidden_size == 7168) & (f.num_topk == 8) & f.dispatch_sms.isin([20, 24])]
    if name == "custom_allreduce_perf":
        return f[f.num_gpus == 8]
    if name == "nccl_perf":
        return f[(f.num_gpus == 8) & (f.nccl_dtype == "half")]
    raise KeyError(name)


def main() -> int:
    from epsim.calibrate.aic_tables import package_root, package_version, parse_source
    from epsim.calibrate.aic_versions import part_tables, part_versions
    source = parse_source(f"aic:{SYSTEM}/sglang")
    if OUT.exists():
        shutil.rmtree(OUT)
    lines = []
    # the profile's tables, and each older collection a version part is fitted on
    # (`epsim.calibrate.aic_versions`)
    older = [t for v in part_versions(SYSTEM) for t in part_tables(SYSTEM, v)]
    for table in source.tables() + older:
        if table.name not in ("moe_perf", "gemm_perf", "context_attention_perf",
                              "generation_attention_perf", "generation_mla_perf",
                              "wideep_deepep_ll_perf", "wideep_deepep_normal_perf",
                              "custom_allreduce_perf", "nccl_perf"):
            continue
        rows = _rows(table.name, table.frame())
        folder = OUT / "data" / Path(table.rel).parent
        folder.mkdir(parents=True, exist_ok=True)
        rows.to_parquet(folder / f"{table.name}.parquet", index=False)
        meta = table.path.parent / "collection_meta.yaml"
        if meta.is_file() and not (folder / meta.name).exists():
            shutil.copy(meta, folder / meta.name)
        digest = hashlib.sha256(table.path.read_bytes()).hexdigest()
        lines.append(f"- data/{table.rel}: {len(rows)} of its rows (source sha256 {digest})")
    root = package_root()
    for name in ("query_versions.yaml", f"{SYSTEM}.yaml"):
        shutil.copy(root / name, OUT / name)
    (OUT.parent / "NOTICE").write_text(
        "This folder holds a few rows of the op-level performance tables of aiconfigurator-core "
        f"{package_version()}\n(https://pypi.org/project/aiconfigurator-core/, "
        "https://github.com/ai-dynamo/aiconfigurator),\nCopyright (c) 2025-2026 NVIDIA "
        "CORPORATION & AFFILIATES, licensed under the Apache License,\nVersion 2.0 "
        "(http://www.apache.org/licenses/LICENSE-2.0). Rows are copied unchanged; files:\n\n"
        + "\n".join(lines) + "\n\nplus its query_versions.yaml, h200_sxm.yaml and the "
        "collection_meta.yaml of each folder.\nWritten by tests/epsim/calibrate/make_aic_fixture.py.\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
