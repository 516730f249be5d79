"""The stages of a DeepSeek-R1 decode step on B200 (SGLang, TP attention, MoE-TP or EP, FP8 block
and NVFP4 weights), as epsim prices the silicon sample's aggregated rows, against
aiconfigurator-core's B200 SGLang op tables at the same shapes: which stage of the step is
mispriced, and whether the tables' sum lands on the rows' TPOT (docs/silicon.md).

    python benchmarks/deepseek_b200_decode_stages.py [--out benchmarks/results/deepseek_b200_decode_stages.md]

epsim: the cost model the silicon mapping builds for a row (`plan_row` -> `Simulation`), one
decode step of `b` requests of `keys` keys each, routed top-8 uniformly at random (seed 0), per
MoE layer (58). AIC: the mean of the matching rows of its tables (op-level calibration data):
MLA generation (`trtllm_mla`, FP8 cache), its absorbed BMMs, the GEMMs at epsim's format for
the row (linear in n between table widths), the custom all-reduce (CUDA graph, linear in the
message between table sizes), and the fused MoE. AIC's MoE collector routes its `balanced`
tokens through DeepSeek's grouped top-k, which keeps 4 of 8 expert groups, so its rows never
activate more than 128 experts (`epsim.calibrate.aic_records.collector_counts`); a benchmark's
random tokens reach ~220-256. The MoE is therefore given three ways: AIC's row, epsim's kernel
on AIC's own counts (the kernel's error at equal work), and epsim on uniform routing (what the
step prices). The TPOT column is the row's measured figure, read only to set beside the sums
(validation data: nothing is fitted or chosen on it). Device time, µs per layer.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from aic_stages import (attention_stages, decode_step, frames, row_simulation,  # noqa: E402
                        shared_expert_stage, stage_report, step_totals)
from epsim.calibrate.aic_records import grouped_balanced_counts  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

SYSTEM = "b200_sxm"
TABLES = {"mla": "mla/sglang/0.5.14/generation_mla_perf.parquet",
          "bmm": "mla_bmm/sglang/0.5.14/mla_bmm_perf.parquet",
          "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet",
          "ar": "comm/sglang/0.5.9/custom_allreduce_perf.parquet",
          "moe": "moe/sglang/0.5.14/moe_perf.parquet"}
# (label, row id whose mapping is priced, requests, keys): 1k/8k rows (decode-dominated: a
# request's mean context ~1k + 4k, the MLA table's `step` 4095) and 8k/1k TP4 (step 8191). The
# FP8 TP8 rows of 2026-03-25 fit the base key and its MTP twin (`agg_recipes.draft`): their
# candidate without MTP is priced, and their measured TPOT is one of the two drafts.
SHAPES = (("FP8, TP8 + MoE-TP8 (EP 1)", "dsr1_b200_sglang_fp8_agg_1024x8192_c4_cfg87", 4, 4095),
          ("FP8, TP8 + MoE-TP8 (EP 1)", "dsr1_b200_sglang_fp8_agg_1024x8192_c16_cfg87", 16, 4095),
          ("FP8, TP8 + MoE-TP8 (EP 1)", "dsr1_b200_sglang_fp8_agg_1024x8192_c64_cfg87", 64, 4095),
          ("FP8, TP4 + MoE-TP4 (EP 1)", "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271", 4, 8191),
          ("NVFP4, TP8 + EP8 (the row says MoE-TP8; its sweep ran EP 8)",
           "dsr1_b200_sglang_fp4_agg_1024x8192_c4_cfg99", 4, 4095),
          ("NVFP4, TP8 + EP8 (the row says MoE-TP8; its sweep ran EP 8)",
           "dsr1_b200_sglang_fp4_agg_1024x8192_c64_cfg99", 64, 4095),
          ("NVFP4, TP4 + EP4 (the row says MoE-TP4; its sweep ran EP 4)",
           "dsr1_b200_sglang_fp4_agg_1024x8192_c16_cfg88", 16, 4095))
HIDDEN, SHARED_INTER, EXPERTS, TOP_K = 7168, 2048, 256, 8


def _rows() -> dict:
    return {r.id: r for r in read_rows(default_csv_path())}


def stages(f: dict, row, b: int, keys: int) -> tuple[list[tuple[str, float, float]], dict]:
    """[(stage, epsim µs, AIC µs)] of one MoE layer, and the step's totals (ms)."""
    sim = row_simulation(row)
    cm, m = sim.cost_model, sim.cost_model.model
    p = cm.params
    par = p.parallel
    s = decode_step(sim, b, keys)
    batch = BatchCounts.uniform_decode(1, b, keys)
    out, ar = attention_stages(f, sim, b, keys, "MLA decode kernel (AIC: trtllm_mla, FP8 cache)",
                               {"kv_cache_dtype": "fp8"},
                               "attention all-reduce ({gpus} GPUs; AIC: custom, graph)")
    moe_dtype = "nvfp4" if m.weight_dtype == "nvfp4" else "fp8_block"
    fused = p.fused_shared_experts
    shared_row, shared_aic = shared_expert_stage(f, sim, s, b, SHARED_INTER, moe_dtype)
    out.append(shared_row)
    where = dict(moe_dtype=moe_dtype, hidden_size=HIDDEN, inter_size=m.moe_intermediate_size,
                 num_experts=EXPERTS, topk=TOP_K, moe_tp_size=par.moe_tp_size,
                 moe_ep_size=par.ep_size, num_tokens=b)
    aic_moe = measured(f["moe"], distribution="balanced", **where)
    counts = np.tile(grouped_balanced_counts(b, EXPERTS, TOP_K, 8, 4), (m.num_moe_layers, 1))
    ours_at_aic = float(cm.moe(counts, cm.ep_tokens(batch), sim.placement.tables,
                               graph=True).experts_us[0])
    out.append((f"routed experts at AIC's counts ({int((counts[0] > 0).sum())} experts active; "
                f"{'+ the fused shared expert' if fused else 'no shared'})", ours_at_aic, aic_moe))
    out.append(("routed experts, uniform routing (epsim's step; AIC: power_law_1.01 row)",
                float(s.experts_us.mean()), measured(f["moe"], distribution="power_law_1.01",
                                                     **where)))
    out.append((f"MoE all-reduce ({par.tp_size} GPUs; AIC: custom, graph)",
                float(s.combine_us.mean()), ar))
    out.append(("MoE block ops (router, top-k; no AIC table)", float(s.block_ops_us.mean()),
                float("nan")))
    # AIC's layer: every stage it has, its MoE scaled from its counts to uniform routing by
    # epsim's own ratio (the kernel's price per active expert from AIC, the count from epsim)
    aic_layer = sum(a for _, _, a in out[:7]) + ar + shared_aic + (
        aic_moe * float(s.experts_us.mean()) / ours_at_aic)
    return out, step_totals(s, m.num_moe_layers, out, aic_layer)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/deepseek_b200_decode_stages.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")              # the profile's extrapolation notes
    f, rows = frames(SYSTEM, TABLES), _rows()
    sections = []
    for label, row_id, b, keys in SHAPES:
        out, tot = stages(f, rows[row_id], b, keys)
        sections.append((f"{label}: {b} requests x {keys} keys", row_id, out, tot,
                         rows[row_id].tpot_ms))
    lines = stage_report("# A DeepSeek-R1 decode step's stages on B200: epsim against AIC's op "
                         "tables", "deepseek_b200_decode_stages.py", TABLES, sections,
                         "its MoE scaled to uniform routing by epsim's ratio")
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
