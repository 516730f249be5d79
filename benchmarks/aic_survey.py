"""Survey of aiconfigurator-core's op tables that SGLang MoE deployments use: per table its
columns, units, axes and the epsim component it feeds; per system the version, rows and how
many became fit and pending records. Rewrites the generated section of docs/aic_tables.md.

    python benchmarks/aic_survey.py [--doc docs/aic_tables.md]

Needs the optional aiconfigurator-core (`pip install 'epsim[aic]'`); reads only its op tables.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.calibrate.aic import import_source  # noqa: E402
from epsim.calibrate.aic_tables import (AIC_TO_ZOO, package_root, package_version,  # noqa: E402
                                        parse_source)

BEGIN, END = "<!-- aic-survey:begin -->", "<!-- aic-survey:end -->"
SYSTEMS = tuple(AIC_TO_ZOO)
_MOE = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "num_experts", "topk",
        "moe_ep_size", "moe_tp_size", "distribution"]
_MLA = ["kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step",
        "tp_size"]
AXES = {
    "gemm_perf": ["gemm_dtype", "m", "n", "k"],
    "moe_perf": _MOE, "wideep_context_moe_perf": _MOE, "wideep_generation_moe_perf": _MOE,
    "context_attention_perf": ["kernel_source", "kv_cache_dtype", "batch_size", "isl",
                               "num_heads", "num_key_value_heads", "head_dim", "window_size"],
    "generation_attention_perf": ["kernel_source", "kv_cache_dtype", "batch_size", "step",
                                  "num_heads", "num_key_value_heads", "head_dim", "window_size"],
    "context_mla_perf": _MLA, "generation_mla_perf": _MLA,
    "wideep_context_mla_perf": _MLA, "wideep_generation_mla_perf": _MLA,
    "mla_bmm_perf": ["op_name", "bmm_dtype", "num_tokens", "num_heads"],
    "scale_matrix_perf": ["quant_dtype", "m", "k"], "computescale_perf": ["quant_dtype", "m", "k"],
    "custom_allreduce_perf": ["kernel_source", "num_gpus", "message_size"],
    "wideep_deepep_ll_perf": ["node_num", "hidden_size", "num_token", "num_topk", "num_experts"],
    "wideep_deepep_normal_perf": ["node_num", "hidden_size", "num_token", "num_topk",
                                  "num_experts", "dispatch_sms"],
    "nccl_perf": ["op_name", "nccl_dtype", "num_gpus", "message_size"],
}
# how each table maps to epsim (the converters in epsim/calibrate/aic_records.py, aic_comm.py)
MAPS = {
    "gemm_perf": "BF16, FP8, FP8-block, NVFP4 at m a power of 4, n and k in 512-16384 → `gemm` "
                 "→ **`any/gemm_<format>/graph`**, the rest pending; BF16 gate+up and down GEMM "
                 "pairs of 24 SwiGLU shapes → `dense_mlp` → **`any/dense/graph`**",
    "moe_perf": "BF16 fused-Triton, balanced, EP 1, MoE-TP 1 → `experts` → **`local/experts/graph`, "
                "`any/experts/graph`**; other BF16 kernels, EP > 1, MoE-TP > 1 → `experts` (pending); "
                "FP8-block and NVFP4 of SGLang's kernel for them, balanced, EP 1, MoE-TP 1 → "
                "`quant_experts` → **`any/experts_<format>/graph`**; their EP > 1 and MoE-TP > 1 "
                "rows, INT4, MXFP4 → `quant_experts` (pending); rows faster than the weights' "
                "HBM time and power-law rows not imported",
    "wideep_context_moe_perf": "uniform rows (`T k / E` rows per local expert) → `quant_experts` "
                               "→ **`deepep/experts_fp8_block/normal`**; power-law rows pending",
    "wideep_generation_moe_perf": "uniform rows → `quant_experts` → "
                                  "**`deepep/experts_fp8_block/graph/low_latency`**; power-law "
                                  "rows pending",
    "context_attention_perf": "GQA, BF16 KV, no window, head_dim 128, SGLang's kernel → "
                              "`attention_prefill` → **`any/attention_prefill/graph`**",
    "generation_attention_perf": "same selection → `attention_decode` → "
                                 "**`any/attention_decode/graph`**",
    "context_mla_perf": "the kernel, on the fit grid → `mla_prefill` → "
                        "**`any/mla_prefill_<bf16|fp8>/graph`**; the rest pending",
    "generation_mla_perf": "the kernel, on the fit grid → `mla_decode` → "
                           "**`any/mla_decode_<bf16|fp8>/graph`**; the rest pending",
    "wideep_context_mla_perf": "`mla_prefill` (pending; whole attention module)",
    "wideep_generation_mla_perf": "`mla_decode` (pending; whole attention module)",
    "mla_bmm_perf": "tokens a power of 4 → `mla_bmm` → **`any/mla_bmm_<bf16|fp8>/graph`**; "
                    "the rest pending",
    "scale_matrix_perf": "`quantize` (pending; activation quantisation)",
    "computescale_perf": "`quantize` (pending; rows timed 0 left out)",
    "custom_allreduce_perf": "CUDA-graph rows → `allreduce` → **`any/allreduce/graph/"
                             "{oneshot,twoshot}`** (as SGLang picks by size; beyond its 8 MiB "
                             "buffer SGLang calls NCCL: judged, not fitted); eager rows pending",
    "wideep_deepep_ll_perf": "FP8 `dispatch`, BF16 `combine` (EP 8, expected uniform counts) → "
                             "**`deepep/{dispatch,combine}/graph/low_latency[/fp8]`**",
    "wideep_deepep_normal_perf": "20-SM rows → FP8 `dispatch`, BF16 `combine` → "
                                 "**`deepep/{dispatch,combine}/normal[/fp8]`**",
    "nccl_perf": "FP16 all-reduce → `allreduce` → **`any/allreduce/graph/nccl`**; all-gather → "
                 "`none` `dispatch` → **`none/allgather`**; reduce-scatter, all-to-all not imported",
}


def _units(columns) -> str:
    columns = sorted(columns)                # a set's order changes from run to run
    out = []
    if "latency" in columns:
        out.append("`latency` ms")
    out += [f"`{c}` µs" for c in columns if c.endswith("_us")]
    out += [f"`{c}` ms" for c in columns if c.endswith("_ms")]
    return ", ".join(out) or "?"


def _axis(values) -> str:
    values = sorted(set(values), key=lambda v: (isinstance(v, str), v))
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        lo, hi = values[0], values[-1]
        return f"{lo:g}" if lo == hi else f"{lo:g}–{hi:g} ({len(values)})"
    shown = ", ".join(str(v) for v in values[:4])
    return shown + (f", … ({len(values)})" if len(values) > 4 else "")


def survey() -> tuple[list[str], dict]:
    """(markdown lines of the generated section, summary numbers)."""
    per_table = defaultdict(lambda: {"columns": set(), "axes": defaultdict(set), "rows": 0})
    cells: dict[tuple[str, str], str] = {}
    imported = {}
    for system in SYSTEMS:
        source = parse_source(f"aic:{system}/sglang")
        imp = import_source(source, require_gpu=False)
        imported[system] = imp
        for table in imp.tables:
            frame = table.frame()
            info = per_table[table.name]
            info["columns"] |= set(frame.columns)
            info["rows"] += len(frame)
            for col in AXES.get(table.name, []):
                if col in frame.columns:
                    info["axes"][col] |= set(frame[col].tolist())
            image = table.runtime.get("image", "")
            cells[(table.name, system)] = (f"{table.version}: {len(frame)}"
                                           + (f" (`{image.split(':')[-1]}`)" if image else ""))
    lines = [f"Generated by `python benchmarks/aic_survey.py` from aiconfigurator-core "
             f"{package_version()} ({datetime.now(timezone.utc):%Y-%m-%d}, Python "
             f"{platform.python_version()}): SGLang tables at AIC's current version (0.5.14), a "
             f"table last collected earlier filled in from the newest older version, NCCL at the "
             f"system's NCCL version.", "", "### The tables", "",
             "| table (op) | columns | units | axes (min–max (distinct) or values; all six systems) "
             "| epsim |", "|---|---|---|---|---|"]
    for name, info in per_table.items():
        axes = "; ".join(f"{c} {_axis(v)}" for c, v in info["axes"].items())
        lines.append(f"| `{name}` | {len(info['columns'])} | {_units(info['columns'])} | {axes} "
                     f"| {MAPS.get(name, '')} |")
    lines += ["", "### Per system: version folder and rows (container image where the "
              "`collection_meta.yaml` names one)", "",
              "| table | " + " | ".join(f"{s} ({AIC_TO_ZOO[s] or 'no zoo GPU'})" for s in SYSTEMS)
              + " |", "|---|" + "---|" * len(SYSTEMS)]
    for name in per_table:
        lines.append(f"| `{name}` | " + " | ".join(cells.get((name, s), "—") for s in SYSTEMS) + " |")
    lines += ["", "### Imported records per system", "",
              "| system | fit records (by kind) | pending records (by kind) |", "|---|---|---|"]
    summary = {}
    for system, imp in imported.items():
        fit = Counter(r.kind for r in imp.fit)
        pending = Counter(r.kind for r in imp.pending)
        summary[system] = (len(imp.fit), len(imp.pending))
        lines.append(f"| {system} | {len(imp.fit)}: " + ", ".join(f"{k} {v}" for k, v in
                                                                 sorted(fit.items()))
                     + f" | {len(imp.pending)}: " + ", ".join(f"{k} {v}" for k, v in
                                                             sorted(pending.items())) + " |")
    lines += ["", "Left out, per table (the importer's notes):", ""]
    for system, imp in imported.items():
        lines += [f"- {note}" for note in imp.notes]
    return lines, summary


def rewrite(doc: Path, lines: list[str]) -> None:
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(head + BEGIN + "\n" + "\n".join(lines) + "\n" + END + tail)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--doc", default=str(ROOT / "docs" / "aic_tables.md"))
    args = parser.parse_args(argv)
    package_root()                                   # a one-line error when absent
    lines, summary = survey()
    rewrite(Path(args.doc), lines)
    for system, (fit, pending) in summary.items():
        print(f"{system}: {fit} fit records, {pending} pending")
    return 0


if __name__ == "__main__":
    sys.exit(main())
