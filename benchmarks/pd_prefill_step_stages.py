"""One full-chunk prefill step of three P/D prefills, stage by stage: epsim against
aiconfigurator-core's op tables at the same per-GPU shapes (issue 39; docs/silicon.md, "What
carries the P/D gap at 128-512 clients").

    python benchmarks/pd_prefill_step_stages.py [--write]

The prefills, each its row's (`plan_row(row).instances[0]`, the row's own recipe and routing):
GB200 FP4 1k/1k DEP4 (16 prompts of 1024 a DP rank: its 16384-token chunk, 65536 tokens
gathered for the MoE), GB200 FP4 8k/1k TP4 (16 prompts of 8192: its 131072-token chunk) and B200
FP8 1k/1k TEP8 (32 prompts of 1024: its 32768-token chunk; its FP8-block linears on FlashInfer's
trtllm GEMM, the recipe's JIT DeepGEMM being off, and on DeepGEMM beside). Per MoE layer, device
time (µs).

AIC (op-level calibration data, SGLang tables of the same system): the TRT-LLM MLA prefill
kernel (`context_mla` 0.5.14, FP8 KV, the GPU's heads: the table's `num_heads` is a GPU's,
`tp_size` the rest; 8192-token prompts scaled from 4 a batch), the projections' GEMMs (`gemm`
0.5.14, FP8-block = DeepGEMM, and BF16; beyond the table's 32768 rows scaled linearly), and the
trtllm-gen NVFP4 MoE at MoE-TP 4 (`moe_perf` 0.5.14, `balanced`, which the collector routes
grouped: epsim is given the same per-expert counts, `grouped_balanced_counts`). The measured rows are not read.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results" / "pd_prefill_step_stages.md"
HIDDEN, Q_LORA, KV_LORA, ROPE, NOPE, V_DIM = 7168, 1536, 512, 64, 128, 128
GEMM_ROWS = 32768                     # the gemm table's largest m
# (label, system, row, DP ranks, prompts a rank, prompt tokens, heads a GPU, AIC MLA tp_size)
CASES = (("GB200 FP4 1k/1k DEP4", "gb200", "dsr1_gb200_sglang_fp4_disagg_1024x1024_c512_cfg483",
          4, 16, 1024, 128, 1),
         ("GB200 FP4 8k/1k TP4", "gb200",
          "2026_04_06_deepseek_r1_gb200_sglang_fp4_disagg_8192x1024_c512_tp4_ep1_1709",
          1, 16, 8192, 32, 2),
         ("B200 FP8 1k/1k TEP8", "b200_sxm",
          "2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_disagg_1024x1024_c256_tp8_ep8_1281",
          1, 32, 1024, 16, 4))
MOE_TP4_TOKENS = (2048, 4096, 8192, 16384)


def _batch(ranks: int, seqs: int, length: int):
    """Every rank prefilling `seqs` fresh prompts of `length` tokens (epsim's `BatchCounts`)."""
    from epsim.cost.attention import BatchCounts
    tokens, zero = np.full(ranks, float(seqs * length)), np.zeros(ranks)
    return BatchCounts(zero, zero, tokens, tokens, np.full(ranks, seqs * length * (length + 1) / 2),
                       np.full(ranks, float(seqs)), "prefill", np.full(ranks, float(seqs)))


def _sim(row, fp8_gemm_backend=None):
    from epsim.sim.engine import Simulation
    from epsim.spec.scenario import scenario_from_dict
    from epsim.validate.silicon.mapping import plan_row
    data = copy.deepcopy(plan_row(row).instances[0].data)
    if fp8_gemm_backend:
        data["deployment"]["fp8_gemm_backend"] = fp8_gemm_backend
    return Simulation(scenario_from_dict(data, where="silicon row"))


def _step(sim, ranks: int, seqs: int, length: int, loads=None):
    batch = _batch(ranks, seqs, length)
    if loads is None:
        loads = sim.skew.loads(batch.routed_tokens, np.random.default_rng(0))
    return batch, sim.cost_model.step(batch, loads, sim.placement.tables)


def _aic_gemms(f, m: int, heads: int, dtype: str) -> tuple[float, float]:
    """(q_a/kv_a + q_b + o, kv_b) µs at `m` rows, linear beyond the table's rows."""
    from aic_stages import gemm_us
    rows, scale = min(m, GEMM_ROWS), max(1.0, m / GEMM_ROWS)
    proj = (gemm_us(f, rows, Q_LORA + KV_LORA + ROPE, HIDDEN, dtype)
            + gemm_us(f, rows, heads * (NOPE + ROPE), Q_LORA, dtype)
            + gemm_us(f, rows, HIDDEN, heads * V_DIM, dtype))
    return proj * scale, gemm_us(f, rows, heads * (NOPE + V_DIM), KV_LORA, dtype) * scale


def stage_rows(label, system, row, ranks, seqs, length, heads, mla_tp) -> list[str]:
    from aic_stages import frames
    from epsim.cost.mla import _gemm, mla_kernel_us, mla_token_us, prefill_kernel_work
    from lmsys_decode_stages import measured
    f = frames(system, {"kernel": "mla/sglang/0.5.14/context_mla_perf.parquet",
                        "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet"})
    sim = _sim(row)
    batch, s = _step(sim, ranks, seqs, length)
    mla = sim.cost_model.params.attention.mla
    work = prefill_kernel_work(batch.prefill_tokens, batch.prefill_context, batch.prefill_chunks,
                               mla.heads, mla.prefill_form, mla.num_sms, mla.hardware.name)
    m = seqs * length
    # the kernel table holds up to 4 prompts of 8192 at a GPU's heads: scaled by the prompts
    per = min(seqs, 4) if length >= 8192 else seqs
    kernel = measured(f["kernel"], num_heads=heads, batch_size=per, isl=length, tp_size=mla_tp,
                      kv_cache_dtype="fp8", kernel_source="trtllm_mla") * seqs / per
    fp8, bf16 = _aic_gemms(f["gemm"], m, heads, "fp8_block"), _aic_gemms(f["gemm"], m, heads, "bfloat16")
    lines = [f"## {label}: {seqs} x {length} tokens a rank, {ranks} rank(s) (`{row.id}`)", "",
             "| stage | epsim µs | AIC at the same shape µs |", "|---|---:|---|",
             f"| MLA kernel | {mla_kernel_us(work, mla.prefill, mla.hardware)[0]:,.0f} | {kernel:,.0f} |",
             f"| q_a/kv_a, q_b, o GEMMs | {mla_token_us(batch.tokens, np.zeros(ranks), mla)[0]:,.0f} "
             f"| FP8-block {fp8[0]:,.0f}; BF16 {bf16[0]:,.0f} |",
             f"| kv_b | {_gemm(batch.prefill_context, mla.heads * (NOPE + V_DIM), KV_LORA, mla)[0]:,.0f} "
             f"| FP8-block {fp8[1]:,.0f}; BF16 {bf16[1]:,.0f} |",
             f"| attention, whole | {s.attention_us.mean():,.0f} | |",
             f"| routed experts ({s.traffic.num_tokens:,.0f} tokens into the MoE) | "
             f"{s.experts_us.mean():,.0f} | |",
             f"| dispatch / all-gather | {s.dispatch_us.mean():,.0f} | |",
             f"| combine / all-reduce | {s.combine_us.mean():,.0f} | |",
             f"| shared expert | {s.shared_experts_us.mean():,.0f} | |",
             f"| layer | {s.layer_us.mean():,.0f} | |", "",
             f"epsim's step {s.step_us / 1e3:,.0f} ms (dense layers + LM head {s.dense_us / 1e3:,.0f} "
             f"ms): {ranks * m / s.step_us * 1e3:,.1f} k prompt tokens/s an instance."]
    if system == "b200_sxm":      # the row's linears run FlashInfer's trtllm GEMM: DeepGEMM's beside
        _, t = _step(_sim(row, "deep_gemm"), ranks, seqs, length)
        lines.append(f"With the FP8-block linears on DeepGEMM (`fp8_gemm_backend: deep_gemm`): "
                     f"attention {t.attention_us.mean():,.0f}, shared expert "
                     f"{t.shared_experts_us.mean():,.0f} µs, step {t.step_us / 1e3:,.0f} ms, "
                     f"{ranks * m / t.step_us * 1e3:,.1f} k tokens/s.")
    return lines + [""]


def moe_tp4_rows(row) -> list[str]:
    """epsim's NVFP4 MoE at MoE-TP 4 against AIC's rows, the collector's counts given to both."""
    from aic_stages import frames
    from epsim.calibrate.aic_records import grouped_balanced_counts
    from lmsys_decode_stages import measured
    f = frames("gb200", {"moe": "moe/sglang/0.5.14/moe_perf.parquet"})["moe"]
    sim = _sim(row)
    layers = sim.cost_model.model.num_moe_layers
    lines = ["## GB200 NVFP4 MoE at MoE-TP 4 (trtllm-gen), the table's own shapes", "",
             "| tokens | epsim µs | AIC µs | epsim / AIC |", "|---:|---:|---:|---:|"]
    for tokens in MOE_TP4_TOKENS:
        loads = np.tile(grouped_balanced_counts(tokens, 256, 8, 8, 4), (layers, 1))
        _, s = _step(sim, 1, 1, tokens, loads)
        aic = measured(f, moe_dtype="nvfp4", moe_tp_size=4, moe_ep_size=1, distribution="balanced",
                       num_tokens=tokens, hidden_size=HIDDEN, inter_size=2048, num_experts=256,
                       kernel_source="sglang_flashinfer_trtllm_moe")
        lines.append(f"| {tokens:,} | {s.experts_us.mean():,.0f} | {aic:,.0f} | "
                     f"{s.experts_us.mean() / aic:.2f} |")
    return lines + [""]


def body() -> str:
    import warnings
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from epsim.validate.silicon.rows import default_csv_path, read_rows
    warnings.simplefilter("ignore")
    rows = {r.id: r for r in read_rows(default_csv_path())}
    lines = []
    for label, system, row_id, *shape in CASES:
        lines += stage_rows(label, system, rows[row_id], *shape)
    lines += moe_tp4_rows(rows[CASES[1][2]])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "One full-chunk P/D prefill step, stage by "
                         "stage: epsim against AIC's op tables",
                         "python benchmarks/pd_prefill_step_stages.py --write", body)


if __name__ == "__main__":
    sys.exit(main())
