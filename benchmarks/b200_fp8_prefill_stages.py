"""Where the B200 FP8 agg rows' TPOT and TTFT miss (issue 39): epsim's agg timeline split into
decode (verify) cycles and the prefill chunks between them, and one prefill forward of an 8k
prompt at the rows' three layouts (TP8 MoE-TP 8, TP4 MoE-TP 4, TP8 EP8) taken apart stage by
stage against aiconfigurator-core's B200 SGLang op tables.

    python benchmarks/b200_fp8_prefill_stages.py [--out benchmarks/results/b200_fp8_prefill_stages.md]

1. The timeline (`agg_timeline.timeline`, `measured_loop`): each 8k/1k SGLang 0.5.9 row's
   benchmark run as `epsim validate` runs it, its prefill steps' share of the time and price a
   prompt token, and what the measured loop implies (Little's law; validation data, a
   diagnostic, never a setting): a prompt token's price if epsim's cycle were right. A deficit
   that is the prefill's shows as the same implied price at every client count; one that is the
   cycle's grows with the batch.
2. The prefill forward: one prompt of 7373 tokens (the mean of InferenceX's [0.8 L, L] at
   8192) and two (the 16384-token chunk of the TP8 MTP recipe holds two), the row's own routing;
   epsim's stages per MoE layer beside AIC's rows at the same per-GPU shapes: the TRT-LLM MLA
   prefill kernel (`context_mla`, FP8 KV, the GPU's heads), the projections' FP8-block GEMMs
   (`gemm`, kernel `sglang_deepgemm_gemm_nt_f8f8bf16`), FlashInfer's TRT-LLM FP8-block MoE
   (`moe_perf`, balanced and power_law_1.01; at EP 8 AIC's balanced rows hand rank 0 five
   times the mean pairs -- `epsim.calibrate.aic_records.grouped_balanced_counts` -- so only
   MoE-TP is compared) and NCCL's all-reduce of the layer's two `[T, 7168]` BF16 sums.
   Device time. Op tables are calibration data; the rows' measured figures are read only in
   part 1 and in the cross-system table.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import platform
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from agg_timeline import measured_loop, timeline  # noqa: E402
from aic_stages import between, frames, gemm_us, row_simulation  # noqa: E402
from epsim.calibrate.aic_tables import package_version  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.cost.comm import l2_bytes  # noqa: E402
from epsim.cost.mla import _gemm, mla_kernel_us, mla_token_us, prefill_kernel_work  # noqa: E402
from epsim.cost.trtllm_fp8_gemm import TrtllmFp8Gemm, token_tile  # noqa: E402
from epsim.cost.trtllm_fp8_gemm import gemm_us as trtllm_gemm_us  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.sim.engine import Simulation  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

RECORD = ROOT / "benchmarks/results/silicon_rows.json.gz"
TABLES = {"kernel": "mla/sglang/0.5.14/context_mla_perf.parquet",
          "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet",
          "moe": "moe/sglang/0.5.14/moe_perf.parquet",
          "nccl": "comm/nccl/2.28.9/nccl_perf.parquet"}
# DeepSeek-V3/R1 (config.json)
HIDDEN, Q_LORA, KV_LORA, ROPE, NOPE, V_DIM, HEADS = 7168, 1536, 512, 64, 128, 128, 128
SHARED_INTER, MOE_LAYERS = 2048, 58
MEAN_ISL = int(0.9 * 8192)          # InferenceX's prompts: uniform in [0.8 L, L]
P = "2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_"
# (row id, epsim's accept length a cycle: the MTP rows' 2.17, `mtp_b200_verify`; 1 without)
TIMELINE = [(P + "c8_tp8_ep1_133", 2.17), (P + "c16_tp8_ep1_132", 2.17),
            (P + "c32_tp8_ep1_7", 2.17), (P + "c64_tp8_ep1_901", 2.17),
            (P + "c128_tp8_ep1_1744", 2.17),
            (P + "c8_tp8_ep8_1054", 1.0), (P + "c16_tp8_ep8_1041", 1.0),
            (P + "c32_tp8_ep8_1057", 1.0), (P + "c64_tp8_ep8_1055", 1.0),
            (P + "c8_tp4_ep1_1988", 1.0), (P + "c16_tp4_ep1_1987", 1.0),
            (P + "c32_tp4_ep1_1230", 1.0)]
# (label, a row of the layout, TP, MoE-TP, EP)
LAYOUTS = (("TP8, MoE-TP 8 (MTP recipe)", P + "c128_tp8_ep1_1744", 8, 8, 1),
           ("TP4, MoE-TP 4", P + "c32_tp4_ep1_1230", 4, 4, 1),
           ("TP8, EP 8", P + "c64_tp8_ep8_1055", 8, 1, 8))
# the 8k/1k rows at 4 clients of the other stacks on the same SGLang (cross-system table)
FEW_CLIENTS = ("dsr1_h200_sglang_fp8_agg_8192x1024_c4_cfg81",
               "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg87",
               "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271",
               "dsr1_b200_sglang_fp4_agg_8192x1024_c4_cfg201",
               "dsr1_b200_sglang_fp4_agg_8192x1024_c4_cfg202")


READING = """## Reading

- The deficit is the prefill's (table 1): at 8k/1k the measured loop implies a prompt token of
  43-47 µs at TP8 (MTP rows, 8 to 128 clients), 65-71 at TP8/EP8 and 41-47 at TP4 if epsim's
  cycle were right, flat in the client count, against epsim's 18-23 (TP4 29-30); the cycle
  would have to grow from 1.15x to 2.2x epsim's with the batch. The few-client TTFT says the
  same (table 2): B200 FP8 TP8 misses by 25 µs a prompt token, TP4 by 36, while B200 FP4
  misses by 7-8 and H200 FP8 (DeepGEMM, Triton MoE) by -4: measured, the B200 FP8 TP8 prompt
  (479 ms) is no faster than the H200's (447 ms).
- Not in any stage AIC times (table 3): at the same per-GPU shapes epsim's MLA kernel,
  projections, kv_b and all-reduces are within 0.9-1.1x of AIC's B200 rows, and its routed
  experts are 1.2-1.6x AIC's TRT-LLM FP8-block MoE (MoE-TP 8 and 4; AIC's EP rows hand rank 0
  five times the mean pairs under grouped "balanced" routing, so EP 8 is not compared). The
  TRT-LLM MoE's tile rule is the same in FlashInfer 0.6.3 (SGLang 0.5.9's pin) and 0.6.12 (AIC's
  0.5.14 image): {8..128}, the fallback one rung below the centre.
- What the recipes ran that AIC did not time: InferenceX's B200 FP8 scripts set
  `SGLANG_ENABLE_JIT_DEEPGEMM=false` and `--fp8-gemm-backend flashinfer_trtllm` (MTP) or
  `SGLANG_ENABLE_FLASHINFER_GEMM=true` (an alias of SGLANG_ENABLE_FLASHINFER_FP8_GEMM in 0.5.9's
  `environ.py`), so every FP8-block linear (q_a/kv_a, q_b, kv_b, o, shared expert, dense MLP)
  runs `flashinfer_gemm_w8a8_block_fp8_linear_with_fallback` -> `gemm_fp8_nt_groupwise(backend=
  "trtllm")` with tactic -1: FlashInfer 0.6.3's `select_kernel_fp8` picks one of four
  low-latency swap-AB kernels by N / K alone (token tiles 8, 16 or 32; unchanged in 0.6.12),
  whatever the token count. AIC's B200 FP8-block GEMM rows are DeepGEMM's; no table times these
  kernels. And `--moe-runner-backend flashinfer_trtllm` makes 0.5.9 set
  `disable_shared_experts_fusion` (server_args.py), where epsim fuses the shared expert at EP 1.
- Table 4 prices those GEMMs with the row profile's fitted TRT-LLM FP8-block MoE kernel (the
  same trtllm-gen family; extrapolated: hundreds of 16-32-row tiles where the fit's experts
  hold a few): 4-9x DeepGEMM at a prompt's 7.4k tokens, +104 ms a TP8 forward and +141 ms a
  TP4 one (the fusion turned off takes 26 and 36 ms back at MoE-TP 8 and 4): +10.6, +14.2 and
  +14.1 µs a prompt token at TP8 MoE-TP 8, TP4 and TP8/EP 8. First order (the prefill steps'
  time scaled, no feedback through the loop) that closes the TP4 rows (13.9 / 20.2 / 30.8 ->
  14.8 / 22.0 / 34.3 ms against 15.3 / 22.3 / 34.1), about half of the TP8 MTP rows' gap at
  8-32 clients and 37 % at 128 (39.6 -> 49.5 against 66.5), and a quarter of TP8/EP 8's at 64
  (30.9 -> 37.8 against 56.2). At decode sizes (<= 64 tokens, table 5) it is DeepGEMM's price,
  as the no-MTP decode rows want; from 128 tokens it grows (+1.6 ms a step at 256, +7.4 at
  768, +15.7 at 1536): an MTP verify's 3b tokens at 256-512 clients, the direction of the
  1k/1k and 1k/8k MTP rows' large-batch shortfall.
- Landed since (twelfth session): `deployment.fp8_gemm_backend: flashinfer_trtllm`, priced by
  `epsim.cost.trtllm_fp8_gemm` as table 4 prices it (extrapolated, said so in each row), set by
  the silicon mapping for the B200/B300 FP8 scripts that name it, with the shared expert unfused
  under the `flashinfer_trtllm` MoE runner; tables 1-3 and 5 of a regenerated record price with
  it. What would settle the price: the `t128x{8,16,32}x128` trtllm-gen FP8 block-scale GEMMs
  timed on a B200 at 1-64 and 256-16384 tokens (an H100 cannot run them). The rest of the gap
  (EP 8 ~45 µs a token more, TP8 ~10 before the landing) is then the routing of random-token
  prompts at EP 8 or a further term.
- Thirteenth session: the price is now the kernel's own tile model, fitted on published B200
  timings of `gemm_fp8_nt_groupwise(backend="trtllm")` at 8-4096 tokens
  (`benchmarks/trtllm_fp8_gemm_fit.py`); the figures quoted in the bullets above are the
  borrowed price's, tables 4 and 5 as regenerated price with the tile model.
"""


def timeline_rows(rows: dict, record: dict, keep: dict) -> list[str]:
    """Part 1: epsim's timeline of each `TIMELINE` row and the measured loop's implied price
    (each row's `timeline` kept in `keep` for part 4)."""
    out = ["| row | clients | TPOT measured / epsim ms | cycle ms | prefill share | epsim µs a "
           "prompt token | measured: µs a prompt token if epsim's cycle | measured: cycle ms "
           "if epsim's prefill |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for row_id, accept in TIMELINE:
        row = rows[row_id]
        t = keep[row_id] = timeline(row, record[row_id]["epsim"])
        m = measured_loop(row, accept, t)
        out.append(f"| `{row_id[len(P):]}` | {row.concurrency} | {row.tpot_ms:.1f} / "
                   f"{t['tpot_ms']:.1f} | {t['cycle_ms']:.1f} | {t['prefill_share']:.2f} | "
                   f"{t['prefill_us_per_token']:.1f} | {m['prefill_us_per_token_if_cycle']:.1f} | "
                   f"{m['cycle_ms_if_prefill']:.1f} |")
    return out


def epsim_stages(sim, seqs: int, length: int) -> dict[str, float]:
    """One prefill forward of `seqs` fresh prompts of `length` tokens on the row's one attention
    group: µs per MoE layer (mean over layers) and the forward (ms)."""
    tokens, zero = np.full(1, float(seqs * length)), np.zeros(1)
    batch = BatchCounts(zero, zero, tokens, tokens, np.full(1, seqs * length * (length + 1) / 2),
                        np.full(1, float(seqs)), "prefill", np.full(1, float(seqs)))
    loads = sim.skew.loads(batch.routed_tokens, np.random.default_rng(0))
    s = sim.cost_model.step(batch, loads, sim.placement.tables)
    mla = sim.cost_model.params.attention.mla
    work = prefill_kernel_work(batch.prefill_tokens, batch.prefill_context, batch.prefill_chunks,
                               mla.heads, mla.prefill_form, mla.num_sms)
    kernel = float(mla_kernel_us(work, mla.prefill, mla.hardware)[0])
    proj = float(mla_token_us(batch.tokens, zero, mla)[0])
    kv_b = float(_gemm(batch.prefill_context, mla.heads * (mla.nope_dim + mla.v_dim),
                       mla.kv_lora_rank, mla)[0])
    attention = float(s.attention_us.mean())
    return {"MLA kernel": kernel, "q_a/kv_a, q_b, o GEMMs": proj, "kv_b GEMM": kv_b,
            "rest of attention (its all-reduce, norms, rope, quant)": attention - kernel - proj - kv_b,
            "routed (+ fused shared) experts": float(s.experts_us.mean()),
            "shared expert": float(s.shared_experts_us.mean()),
            "MoE all-reduce (combine)": float(s.combine_us.mean()),
            "MoE block ops": float(s.block_ops_us.mean()),
            "layer": float(s.layer_us.mean()), "forward (ms)": s.step_us / 1e3}


def aic_stages(f, tp: int, moe_tp: int, ep: int, seqs: int) -> dict[str, float]:
    """AIC's rows at the same per-GPU shapes, `seqs` prompts of 8192 tokens (µs; NaN where the
    table has none)."""
    heads, tokens = HEADS // tp, 8192 * seqs
    k = f["kernel"]
    kernel = measured(k[(k.num_heads == heads) & (k.kv_cache_dtype == "fp8")], batch_size=seqs,
                      isl=8192)
    g = f["gemm"]
    proj = (gemm_us(g, tokens, Q_LORA + KV_LORA + ROPE, HIDDEN, "fp8_block")
            + gemm_us(g, tokens, heads * (NOPE + ROPE), Q_LORA, "fp8_block")
            + gemm_us(g, tokens, HIDDEN, heads * V_DIM, "fp8_block"))
    kv_b = gemm_us(g, tokens, heads * (NOPE + V_DIM), KV_LORA, "fp8_block")
    moe = {}
    if ep == 1:
        where = dict(kernel_source="sglang_flashinfer_trtllm_moe", moe_dtype="fp8_block",
                     hidden_size=HIDDEN, inter_size=2048, topk=8, num_experts=256,
                     moe_tp_size=moe_tp, moe_ep_size=1)
        for dist in ("balanced", "power_law_1.01"):
            moe[dist] = between(f["moe"], "num_tokens", tokens, distribution=dist, **where)
    shared = (gemm_us(g, tokens, 2 * SHARED_INTER // tp, HIDDEN, "fp8_block")
              + gemm_us(g, tokens, HIDDEN, SHARED_INTER // tp, "fp8_block"))
    ar = between(f["nccl"], "message_size", tokens * HIDDEN, op_name="all_reduce",
                 nccl_dtype="half", num_gpus=tp)
    return {"kernel": kernel, "proj": proj, "kv_b": kv_b, "moe": moe, "shared": shared, "ar": ar}


def stage_rows(f, rows: dict) -> list[str]:
    """Part 2: the forward's stages, epsim beside AIC, per layout and prompt count."""
    out = []
    for label, row_id, tp, moe_tp, ep in LAYOUTS:
        sim = row_simulation(rows[row_id])
        for seqs in (1, 2):
            tokens = seqs * MEAN_ISL
            ours = epsim_stages(sim, seqs, MEAN_ISL)
            aic = aic_stages(f, tp, moe_tp, ep, seqs)
            scale = tokens / (8192 * seqs)        # AIC's rows at 8192 a prompt, linear in tokens
            moe = " / ".join(f"{v * scale:.0f}" for v in aic["moe"].values()) or "- (EP: see doc)"
            out += [f"### {label}: {seqs} x {MEAN_ISL} tokens (`{row_id[len(P):]}`)", "",
                    "| stage | epsim µs | AIC µs (x tokens / 8192 a prompt) | AIC's op |",
                    "|---|---:|---:|---|",
                    f"| MLA kernel | {ours['MLA kernel']:.0f} | {aic['kernel'] * scale:.0f} | "
                    f"context_mla, {HEADS // tp} heads, FP8 KV, isl 8192, batch {seqs} |",
                    f"| q_a/kv_a, q_b, o GEMMs | {ours['q_a/kv_a, q_b, o GEMMs']:.0f} | "
                    f"{aic['proj'] * scale:.0f} | DeepGEMM FP8-block |",
                    f"| kv_b GEMM | {ours['kv_b GEMM']:.0f} | {aic['kv_b'] * scale:.0f} | "
                    "DeepGEMM FP8-block |",
                    f"| rest of attention (all-reduce, norms, rope, quant) | "
                    f"{ours['rest of attention (its all-reduce, norms, rope, quant)']:.0f} | "
                    f"{aic['ar'] * scale:.0f} | NCCL all-reduce alone, {tp} GPUs |",
                    f"| routed (+ fused shared) experts | "
                    f"{ours['routed (+ fused shared) experts']:.0f} | {moe} | TRT-LLM FP8-block "
                    f"MoE, MoE-TP {moe_tp} (balanced / power_law_1.01; no shared expert) |",
                    f"| shared expert | {ours['shared expert']:.0f} | {aic['shared'] * scale:.0f} |"
                    " DeepGEMM FP8-block, TP-split |",
                    f"| MoE all-reduce | {ours['MoE all-reduce (combine)']:.0f} | "
                    f"{aic['ar'] * scale:.0f} | NCCL all-reduce, {tp} GPUs |",
                    f"| MoE block ops | {ours['MoE block ops']:.0f} | - | |",
                    f"| layer | {ours['layer']:.0f} | | |", "",
                    f"epsim's forward: {ours['forward (ms)']:.0f} ms, "
                    f"{ours['forward (ms)'] * 1e3 / tokens:.1f} µs a prompt token.", ""]
    return out


def few_clients(record: dict) -> list[str]:
    """The 8k/1k rows at 4 clients: TTFT measured against epsim, by stack (validation data)."""
    out = ["| row | system, precision | layout | TTFT measured ms | epsim ms | gap ms | gap a "
           "prompt token µs |", "|---|---|---|---:|---:|---:|---:|"]
    for row_id in FEW_CLIENTS:
        r = record[row_id]
        gap = r["measured"]["ttft_ms"] - r["epsim"]["ttft_ms"]
        out.append(f"| `{row_id}` | {r['system']} {r['precision']} | {r['layout_as_run']} | "
                   f"{r['measured']['ttft_ms']:.0f} | {r['epsim']['ttft_ms']:.0f} | {gap:.0f} | "
                   f"{gap * 1e3 / MEAN_ISL:.1f} |")
    return out


def dense_token_tile(n: int, k: int) -> int:
    """`select_kernel_fp8`'s token tile (`epsim.cost.trtllm_fp8_gemm.token_tile`)."""
    return token_tile(n, k)


def trtllm_dense_us(sim, m: int, n: int, k: int) -> float:
    """One `[m, k] x [k, n]` FP8-block GEMM on FlashInfer's trtllm kernel, priced as epsim now
    prices it for `fp8_gemm_backend: flashinfer_trtllm` (`epsim.cost.trtllm_fp8_gemm`: its tile
    model fitted on published B200 timings of the kernel)."""
    kernel = sim.cost_model.params.fp8_gemm
    if kernel is None:                  # the row's deployment runs DeepGEMM: B200's kernel
        hw = sim.cost_model.params.cluster.hardware
        kernel = TrtllmFp8Gemm(sim.cost_model.params.gemm.num_sms, hw.hbm_gbps,
                               l2_bytes(sim.cost_model.params.cluster.gpu))
    return float(trtllm_gemm_us(np.array([float(m)]), n, k, kernel)[0])


def dense_gemms(tp: int, fused_shared: bool) -> list[tuple[str, int, int, int]]:
    """(name, layers, n, k) of the FP8-block dense GEMMs a forward runs on one GPU at TP `tp`:
    every layer's attention projections, the MoE layers' shared expert (unless fused), the
    three dense layers' MLP (DeepSeek-V3: intermediate 18432)."""
    heads = HEADS // tp
    layers = MOE_LAYERS + 3
    out = [("q_a/kv_a", layers, Q_LORA + KV_LORA + ROPE, HIDDEN),
           ("q_b", layers, heads * (NOPE + ROPE), Q_LORA),
           ("kv_b", layers, heads * (NOPE + V_DIM), KV_LORA), ("o", layers, HIDDEN, heads * V_DIM),
           ("dense MLP gate/up", 3, 2 * 18432 // tp, HIDDEN), ("dense MLP down", 3, HIDDEN, 18432 // tp)]
    if not fused_shared:
        out += [("shared gate/up", MOE_LAYERS, 2 * SHARED_INTER // tp, HIDDEN),
                ("shared down", MOE_LAYERS, HIDDEN, SHARED_INTER // tp)]
    return out


def deepgemm_us(frame, n: int, k: int) -> float:
    """AIC's DeepGEMM FP8-block GEMM at 8192 tokens, linear in k between the table's depths
    where k is not one (the dense MLP's 18432 / TP)."""
    depths = np.array(sorted(frame[frame.gemm_dtype == "fp8_block"].k.unique()))
    lo, hi = depths[depths <= k].max(), depths[depths >= k].min()
    at = {d: gemm_us(frame, 8192, n, int(d), "fp8_block") for d in {lo, hi}}
    return at[lo] if lo == hi else at[lo] + (at[hi] - at[lo]) * (k - lo) / (hi - lo)


def what_if(f, rows: dict, record: dict, timeline_out: dict) -> list[str]:
    """Part 4: the forward's extra time if its FP8-block GEMMs ran the low-latency trtllm
    kernels (`trtllm_dense_us` over AIC's DeepGEMM at the same shape) and, for the MoE-TP rows,
    without the shared-expert fusion SGLang 0.5.9 turns off for `--moe-runner-backend
    flashinfer_trtllm` (`server_args.py`: `disable_shared_experts_fusion = True`); and the
    first-order TPOT a prefill that much dearer gives each part-1 row (its prefill steps'
    time scaled, the cycles kept: no feedback through the loop)."""
    out = ["| layout | GEMM | token tile | layers | trtllm what-if µs | DeepGEMM (AIC) µs |",
           "|---|---|---:|---:|---:|---:|"]
    extra = {}
    m = MEAN_ISL
    for label, row_id, tp, moe_tp, ep in LAYOUTS:
        sim = row_simulation(rows[row_id])
        fused = ep == 1
        total = 0.0
        for name, layers, n, k in dense_gemms(tp, fused_shared=False):
            ours = trtllm_dense_us(sim, m, n, k)
            deep = deepgemm_us(f["gemm"], n, k) * m / 8192
            total += layers * (ours - deep)
            out.append(f"| {label} | {name} (n {n}, k {k}) | {dense_token_tile(n, k)} | {layers} | "
                       f"{ours:.0f} | {deep:.0f} |")
        fusion_ms = 0.0
        if fused:                  # the forward with the shared expert apart, epsim's own price
            data = copy.deepcopy(plan_row(rows[row_id], approximate=True).instances[0].data)
            before = epsim_stages(sim, 1, m)["forward (ms)"]
            data["deployment"]["disable_shared_experts_fusion"] = True
            apart = Simulation(scenario_from_dict(data, where="what-if"))
            fusion_ms = epsim_stages(apart, 1, m)["forward (ms)"] - before
            # the shared expert's DeepGEMM price is in `apart`; its trtllm excess is in `total`
        extra[label] = (total / 1e3 + fusion_ms) * 1e3 / m          # µs a prompt token
        out.append(f"| {label} | **forward of {m} tokens** | | | +{total / 1e3:.0f} ms (GEMMs) "
                   f"{fusion_ms:+.0f} ms (fusion off) | +{extra[label]:.1f} µs a prompt token |")
    out += ["", "First-order TPOT with that prefill (validation rows; ms):", "",
            "| row | measured | epsim | epsim µs a prompt token -> what-if | what-if TPOT |",
            "|---|---:|---:|---|---:|"]
    layout_of = {"tp8 dp1 moe_tp8 ep1": LAYOUTS[0][0], "tp4 dp1 moe_tp4 ep1": LAYOUTS[1][0],
                 "tp8 dp1 moe_tp1 ep8": LAYOUTS[2][0]}
    for row_id, t in timeline_out.items():
        d = extra[layout_of[record[row_id]["layout_as_run"]]]
        p = t["prefill_us_per_token"]
        tpot = t["tpot_ms"] * ((1.0 - t["prefill_share"]) + t["prefill_share"] * (p + d) / p)
        out.append(f"| `{row_id[len(P):]}` | {rows[row_id].tpot_ms:.1f} | {t['tpot_ms']:.1f} | "
                   f"{p:.1f} -> {p + d:.1f} | {tpot:.1f} |")
    return out


def by_tokens(f, rows: dict) -> list[str]:
    """Part 5: the TP8 attention projections' what-if over DeepGEMM by the step's tokens: a
    decode step's `b`, an MTP verify's `3b` (the same GEMMs, the same kernel choice)."""
    sim = row_simulation(rows[LAYOUTS[0][1]])
    out = ["| tokens | trtllm what-if µs a layer | DeepGEMM (AIC) µs | x 61 layers, ms more |",
           "|---:|---:|---:|---:|"]
    for m in (32, 64, 128, 256, 512, 768, 1536, 4096):
        ours = deep = 0.0
        for _, _, n, k in dense_gemms(8, fused_shared=True)[:4]:
            ours += trtllm_dense_us(sim, m, n, k)
            deep += gemm_us(f["gemm"], m, n, k, "fp8_block")
        out.append(f"| {m} | {ours:.0f} | {deep:.0f} | {(ours - deep) * 61 / 1e3:+.1f} |")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/b200_fp8_prefill_stages.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")              # the profile's extrapolation notes
    rows = {r.id: r for r in read_rows(default_csv_path())}
    record = {r["id"]: r for r in json.loads(gzip.decompress(RECORD.read_bytes()))["rows"]}
    f = frames("b200_sxm", TABLES)
    lines = ["# B200 FP8 DeepSeek-R1 agg: the prefill between the cycles, stage by stage", "",
             f"Generated by `python benchmarks/b200_fp8_prefill_stages.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). "
             "The script's docstring says what each table compares.", "",
             "## 1. epsim's agg runs, 8k/1k, SGLang 0.5.9 (measured columns: validation only)", ""]
    kept: dict = {}
    lines += timeline_rows(rows, record, kept)
    lines += ["", "## 2. 8k/1k at 4 clients: TTFT by stack (validation only)", ""]
    lines += few_clients(record)
    lines += ["", "## 3. One prefill forward, per MoE layer: epsim against AIC's B200 tables", ""]
    lines += stage_rows(f, rows)
    lines += ["## 4. What-if: the FP8-block GEMMs on the kernels the recipes ran (not in epsim)", ""]
    lines += what_if(f, rows, record, kept)
    lines += ["", "## 5. The same what-if by a step's tokens, TP8 attention projections", ""]
    lines += by_tokens(f, rows)
    lines += ["", READING.rstrip()]
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
