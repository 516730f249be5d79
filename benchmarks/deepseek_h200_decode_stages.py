"""The stages of a DeepSeek-R1 FP8 decode step on H200 (SGLang 0.5.9, TP8 attention, MoE-TP8,
EP 1, BF16 cache), as epsim prices the silicon sample's aggregated rows, against
aiconfigurator-core's H200 SGLang op tables at the same shapes: which stage of the step is
mispriced at 16-64 clients, where the rows' TPOT is priced long (issue 39).

    python benchmarks/deepseek_h200_decode_stages.py [--out benchmarks/results/deepseek_h200_decode_stages.md]

epsim: the cost model the silicon mapping builds for a row (`plan_row` -> `Simulation`), one
decode step of `b` requests of `keys` keys each, routed top-8 uniformly at random (seed 0), per
MoE layer (58). AIC: the mean of the matching rows of its tables (op-level calibration data):
MLA generation (FlashAttention-3, BF16 cache: the rows' `--kv-cache-dtype auto`), its absorbed
BMMs, the FP8-block GEMMs (linear in n between table widths), the custom all-reduce of 0.5.9
(the rows' image; CUDA graph, linear in the message between table sizes), and the Triton fused
MoE (`sglang_fused_moe_triton`, what SGLang runs for FP8-block weights under MoE-TP on Hopper
without `--moe-runner-backend`) of 0.5.10 and 0.5.14. The two MoE tables route their `balanced`
tokens differently: 0.5.10's collector by plain top-k of `balanced_logits` (min(8 b, 256)
experts active, near the ~220 of a benchmark's random tokens at 64 requests), 0.5.14's through
DeepSeek's grouped top-k (never more than 128: `epsim.calibrate.aic_records.collector_counts`).
The MoE is given at each table's own counts (AIC's row against epsim's kernel on the same
counts: the kernel's error at equal work) and on uniform routing (what the step prices). The
TPOT column is the row's measured figure, read only to set beside the sums (validation data:
nothing is fitted or chosen on it). Device time, µs per layer.
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
from epsim.calibrate.aic_records import balanced_counts, grouped_balanced_counts  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

SYSTEM = "h200_sxm"
TABLES = {"mla": "mla/sglang/0.5.14/generation_mla_perf.parquet",
          "bmm": "mla_bmm/sglang/0.5.14/mla_bmm_perf.parquet",
          "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet",
          "ar": "comm/sglang/0.5.9/custom_allreduce_perf.parquet",
          "moe10": "moe/sglang/0.5.10/moe_perf.parquet",
          "moe14": "moe/sglang/0.5.14/moe_perf.parquet"}
# (row id whose mapping is priced, requests, keys): the 1k/8k rows (decode-dominated: one prefill
# per ~8k decode steps of a client; a request's mean context ~0.9k + 4k, the MLA table's `step`
# 4095) at 4, 16 and 64 clients, and 1k/1k at 32 (mean context ~1.4k, `step` 1023 and 2047)
SHAPES = (("dsr1_h200_sglang_fp8_agg_1024x8192_c4_cfg81", 4, 4095),
          ("dsr1_h200_sglang_fp8_agg_1024x8192_c16_cfg81", 16, 4095),
          ("dsr1_h200_sglang_fp8_agg_1024x8192_c64_cfg81", 64, 4095),
          ("dsr1_h200_sglang_fp8_agg_1024x1024_c32_cfg81", 32, 2047))
HIDDEN, SHARED_INTER, EXPERTS, TOP_K, GROUPS = 7168, 2048, 256, 8, (8, 4)


def stages(f: dict, row, b: int, keys: int) -> tuple[list[tuple[str, float, float]], dict]:
    """[(stage, epsim µs, AIC µs)] of one MoE layer, and the step's totals (ms)."""
    sim = row_simulation(row)
    cm, m = sim.cost_model, sim.cost_model.model
    par = cm.params.parallel
    s = decode_step(sim, b, keys)
    out, ar = attention_stages(f, sim, b, keys,
                               "MLA decode kernel (AIC: FlashAttention-3, BF16 cache)",
                               {"kernel_source": "flash_attention", "kv_cache_dtype": "bfloat16"},
                               "attention all-reduce ({gpus} GPUs; AIC: custom 0.5.9, graph)")
    fused = cm.params.fused_shared_experts
    shared_row, shared_aic = shared_expert_stage(f, sim, s, b, SHARED_INTER, "fp8_block")
    out.append(shared_row)
    where = dict(kernel_source="sglang_fused_moe_triton", moe_dtype="fp8_block",
                 hidden_size=HIDDEN, inter_size=m.moe_intermediate_size, num_experts=EXPERTS,
                 topk=TOP_K, moe_tp_size=par.moe_tp_size, moe_ep_size=par.ep_size, num_tokens=b)
    tokens = cm.ep_tokens(BatchCounts.uniform_decode(1, b, keys))
    scale = {}
    for label, key, counts in (("0.5.10, plain balanced", "moe10", balanced_counts(b, EXPERTS, TOP_K)),
                               ("0.5.14, grouped top-k", "moe14",
                                grouped_balanced_counts(b, EXPERTS, TOP_K, *GROUPS))):
        ours = float(cm.moe(np.tile(counts, (m.num_moe_layers, 1)), tokens, sim.placement.tables,
                            graph=True).experts_us[0])
        aic = measured(f[key], distribution="balanced", **where)
        scale[key] = (aic, ours)
        out.append((f"routed experts at AIC {label}'s counts ({int((counts > 0).sum())} active"
                    f"{'; + the fused shared expert' if fused else ''})", ours, aic))
    uniform = float(s.experts_us.mean())
    out.append(("routed experts, uniform routing (epsim's step; AIC: 0.5.10 power_law_1.01 row)",
                uniform, measured(f["moe10"], distribution="power_law_1.01", **where)))
    out.append((f"MoE all-reduce ({par.tp_size} GPUs; AIC: custom 0.5.9, graph)",
                float(s.combine_us.mean()), ar))
    out.append(("MoE block ops (the gate GEMM: the fused MoE fit holds a top-k; no AIC table)",
                float(s.block_ops_us.mean()), float("nan")))
    # AIC's layer: every stage it has, its MoE (0.5.10) scaled from its counts to uniform routing
    # by epsim's own ratio (the kernel's price per active expert from AIC, the count from epsim);
    # the shared expert's own GEMMs only where SGLang does not fuse it into the MoE kernel
    aic10, ours10 = scale["moe10"]
    aic_layer = sum(a for _, _, a in out[:7]) + ar + (0.0 if fused else shared_aic) + (
        aic10 * uniform / ours10)
    return out, step_totals(s, m.num_moe_layers, out, aic_layer)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/deepseek_h200_decode_stages.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")              # the profile's extrapolation notes
    f = frames(SYSTEM, TABLES)
    rows = {r.id: r for r in read_rows(default_csv_path())}
    sections = []
    for row_id, b, keys in SHAPES:
        out, tot = stages(f, rows[row_id], b, keys)
        sections.append((f"TP8 + MoE-TP8 (EP 1): {b} requests x {keys} keys", row_id, out, tot,
                         rows[row_id].tpot_ms))
    lines = stage_report("# A DeepSeek-R1 FP8 decode step's stages on H200: epsim against AIC's "
                         "op tables", "deepseek_h200_decode_stages.py", TABLES, sections,
                         "its 0.5.10 MoE scaled to uniform routing by epsim's ratio")
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
