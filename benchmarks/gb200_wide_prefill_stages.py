"""The stages of one prefill forward of the GB200 (and GB300) FP8 wide-EP 8k/1k P/D rows' DEP8
prefill (srt-slurm `recipes/gb200-fp8/8k1k/max_tpt.yaml` / `mid-curve.yaml`: DP attention 8 +
DeepEP normal EP 8, chunks of 131072 / 8 = 16384 tokens a rank, no two-batch overlap, eager), as
epsim prices them, against aiconfigurator-core's SGLang op tables of the same system at the same
shapes: which stage is too cheap (issue 39; docs/silicon.md, "Why the GB200 FP8 wide-EP 8k/1k rows miss").

    python benchmarks/gb200_wide_prefill_stages.py [--out benchmarks/results/gb200_wide_prefill_stages.md]

epsim: the cost model the silicon mapping builds for the row's prefill instance (`plan_row` ->
`Simulation`), one forward of every rank running `seqs` fresh prompts of `length` tokens, the
row's own routing (uniform, the mapping's skew), per MoE layer. AIC (op-level calibration data):
its `wideep_context_mla` module (SGLang 0.5.10, trtllm_mla, FP8 KV, 128 heads: the attention
module timed whole), split as its 0.5.14 kernel table (`context_mla`) and the projections' FP8-block
GEMMs (q_a/kv_a fused, q_b, o, and kv_b over every key), its DeepEP MoE
(`wideep_context_moe`, whose `num_tokens` is the whole EP group's: collector `num_token *
simulated_ep_size`; it has no EP 8, so EP 4 and EP 16 at the same routed pairs a rank bracket
it), DeepEP normal dispatch/combine (`wideep_deepep_normal`, one node, the rank's tokens, at
SGLang's default 20 SMs and at 24) and the shared expert's two FP8-block GEMMs. MoE rows are
given balanced (`uniform`) and at `power_law_1.01`, the distribution AIC's own DeepSeek model
prices (`aiconfigurator_core/sdk/models/deepseek.py`, `_power_law_alpha = 1.01`). Device time.
Last, epsim's forward with the row's routing replaced by Zipf popularity (a sensitivity, not a
model). No end-to-end figure is read (docs/silicon.md sets the result beside the measured rate).
"""

from __future__ import annotations

import argparse
import copy
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from aic_stages import frames, gemm_us, row_simulation  # noqa: E402
from epsim.calibrate.aic_tables import package_version  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.cost.mla import _gemm, mla_kernel_us, mla_token_us, prefill_kernel_work  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.sim.engine import Simulation  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

TABLES = {"mla": "mla/sglang/0.5.10/wideep_context_mla_perf.parquet",
          "kernel": "mla/sglang/0.5.14/context_mla_perf.parquet",
          "moe": "moe/sglang/0.5.10/wideep_context_moe_perf.parquet",
          "a2a": "comm/sglang/0.5.12/wideep_deepep_normal_perf.parquet",
          "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet"}
# (AIC system, a row whose prefill instance is the DEP8 of the recipe): GB200's max_tpt /
# mid-curve, and GB300's `recipes/gb300-fp8/8k1k/stp/mid.yaml` (the same prefill flags, 0.75
# static memory) as a second system
CASES = (("gb200", "dsr1_gb200_sglang_fp8_disagg_8192x1024_c6144_cfg533"),
         ("gb300", "2026_04_06_deepseek_r1_gb300_sglang_fp8_disagg_8192x1024_c1024_tp8_ep8_1424"))
EP = 8
CHUNK = 131072 // EP               # --chunked-prefill-size over the DP size, tokens a rank
SHAPES = ((2, 8192), (4, 4096))    # (prompts a rank, tokens each): one chunk, fresh prompts
# DeepSeek-V3/R1 (config.json)
HIDDEN, INTER, SHARED_INTER, Q_LORA, KV_LORA, ROPE, TOP_K = 7168, 2048, 2048, 1536, 512, 64, 8
NOPE, V_DIM = 128, 128
MOE_LAYERS, DENSE_LAYERS = 58, 3
DISTRIBUTIONS = ("uniform", "power_law_1.01")
ZIPF_ALPHAS = (0.0, 0.3, 0.6, 1.0)   # sensitivity only (0: the row's uniform routing)


def epsim_layer(sim, seqs: int, length: int) -> dict[str, float]:
    """One MoE layer's stages as epsim prices the forward (µs, mean over the MoE layers; each
    rank runs `seqs` fresh prompts of `length` tokens) and the forward's step (ms)."""
    tokens = np.full(EP, float(seqs * length))
    zero = np.zeros(EP)
    batch = BatchCounts(zero, zero, tokens, tokens, np.full(EP, seqs * length * (length + 1) / 2),
                        np.full(EP, float(seqs)), "prefill", np.full(EP, float(seqs)))
    loads = sim.skew.loads(batch.routed_tokens, np.random.default_rng(0))   # [layers, experts]
    s = sim.cost_model.step(batch, loads, sim.placement.tables)
    mla = sim.cost_model.params.attention.mla
    work = prefill_kernel_work(batch.prefill_tokens, batch.prefill_context, batch.prefill_chunks,
                               mla.heads, mla.prefill_form, mla.num_sms, mla.hardware.name)
    kernel_us = float(mla_kernel_us(work, mla.prefill, mla.hardware)[0])
    gemms_us = float(mla_token_us(batch.tokens, zero, mla)[0])
    kv_b_us = float(_gemm(batch.prefill_context, mla.heads * (mla.nope_dim + mla.v_dim),
                          mla.kv_lora_rank, mla)[0])
    # the parts above are priced at the tables' burst clock; the step slows a prefill forward's
    # device compute by the sustained / burst ratio (`epsim.cost.sustained`), named as its own part
    slow = 1.0 if sim.cost_model.sustained is None else sim.cost_model.sustained.factor(
        float(tokens.max()))
    return {"attention (projections, kernel, block ops)": float(s.attention_us.mean()),
            "- of it: MLA kernel": kernel_us,
            "- of it: q_a/kv_a, q_b, o GEMMs": gemms_us,
            "- of it: kv_b up-projection": kv_b_us,
            f"- of it: the sustained clock (x{slow:.3f})": (slow - 1.0) * (kernel_us + gemms_us
                                                                          + kv_b_us),
            "routed experts (slowest rank)": float(s.experts_us.mean()),
            "dispatch": float(s.dispatch_us.mean()), "combine": float(s.combine_us.mean()),
            "shared expert": float(s.shared_experts_us.mean()),
            "MoE block ops": float(s.block_ops_us.mean()),
            "layer": float(s.layer_us.mean()), "step (ms)": s.step_us / 1e3,
            "dense layers + LM head + overhead (ms)": (s.dense_us + s.overhead_us) / 1e3}


def rank_imbalance(sim, tokens: int) -> float:
    """Mean over MoE layers of the busiest EP rank's routed pairs over the mean rank's, for one
    forward of `tokens` tokens, at SGLang's trivial placement (slot p holds expert p mod E, the
    recipe's redundant slots included; a replicated expert's pairs split evenly over its slots)."""
    loads = sim.skew.loads(tokens, np.random.default_rng(0))            # [layers, experts]
    num_experts = loads.shape[1]
    slot_expert = np.arange(num_experts + sim.cost_model.deployment.ep_num_redundant_experts) % num_experts
    copies = np.bincount(slot_expert, minlength=num_experts)
    slot_loads = loads[:, slot_expert] / copies[slot_expert]            # [layers, slots]
    per_rank = slot_loads.reshape(loads.shape[0], EP, -1).sum(axis=2)  # [layers, ranks]
    return float((per_rank.max(axis=1) / per_rank.mean(axis=1)).mean())


def skew_sensitivity(row, seqs: int, length: int) -> list[str]:
    """epsim's forward with the row's routing replaced by Zipf(alpha) popularity (shuffled per
    layer, no EPLB): how much per-rank imbalance a given forward time needs. Not a model of
    the rows' routing, which is not known (no recorded DeepSeek loads on random-token prompts)."""
    lines = ["| Zipf alpha | busiest rank / mean (routed pairs) | forward (ms) | prompt tokens/s "
             "a GPU |", "|---:|---:|---:|---:|"]
    for alpha in ZIPF_ALPHAS:
        data = copy.deepcopy(plan_row(row).instances[0].data)
        if alpha:
            data["workload"]["skew"] = {"kind": "zipf", "alpha": alpha}
        sim = Simulation(scenario_from_dict(data, where="silicon row"))
        ours = epsim_layer(sim, seqs, length)
        lines.append(f"| {alpha} | {rank_imbalance(sim, EP * seqs * length):.3f} | "
                     f"{ours['step (ms)']:.0f} | {seqs * length / ours['step (ms)'] * 1e3:,.0f} |")
    return lines


def aic_moe_us(f, tokens_per_rank: int, distribution: str) -> tuple[float, float]:
    """AIC's DeepEP MoE at EP 4 and EP 16 with EP 8's routed pairs a rank (`tokens_per_rank x
    top_k`): the whole group's tokens are `tokens_per_rank x 8 x ep / 8`."""
    return tuple(measured(f["moe"], moe_ep_size=ep, distribution=distribution,
                          num_tokens=tokens_per_rank * ep) for ep in (4, 16))


def aic_layer(f, seqs: int, length: int) -> dict[str, float]:
    """One MoE layer's stages from AIC's tables (µs)."""
    m = seqs * length
    normal = dict(hidden_size=HIDDEN, num_topk=TOP_K, num_experts=256, num_token=m)
    heads = 128
    out = {"MLA module 0.5.10 (trtllm_mla, FP8 KV)": measured(
               f["mla"], num_heads=heads, batch_size=seqs, isl=length, kernel_source="trtllm_mla"),
           "MLA kernel 0.5.14 (trtllm_mla, FP8 KV)": measured(
               f["kernel"], num_heads=heads, batch_size=seqs, isl=length, tp_size=1,
               kv_cache_dtype="fp8", kernel_source="trtllm_mla"),
           "q_a/kv_a, q_b, o GEMMs": (gemm_us(f["gemm"], m, Q_LORA + KV_LORA + ROPE, HIDDEN, "fp8_block")
                                      + gemm_us(f["gemm"], m, heads * (NOPE + ROPE), Q_LORA, "fp8_block")
                                      + gemm_us(f["gemm"], m, HIDDEN, heads * V_DIM, "fp8_block")),
           "kv_b GEMM": gemm_us(f["gemm"], m, heads * (NOPE + V_DIM), KV_LORA, "fp8_block")}
    for dist in DISTRIBUTIONS:
        ep4, ep16 = aic_moe_us(f, m, dist)
        out[f"MoE {dist}, EP 4 / EP 16"] = (ep4, ep16)
    for sms in (20, 24):
        out[f"dispatch, {sms} SMs"] = measured(f["a2a"], "dispatch_transmit_us", dispatch_sms=sms,
                                               **normal)
        out[f"combine, {sms} SMs"] = measured(f["a2a"], "combine_transmit_us", combine_sms=sms,
                                              **normal)
    out["shared expert GEMMs"] = (gemm_us(f["gemm"], m, 2 * SHARED_INTER, HIDDEN, "fp8_block")
                                  + gemm_us(f["gemm"], m, HIDDEN, SHARED_INTER, "fp8_block"))
    return out


def _fmt(v) -> str:
    return " / ".join(f"{x:.0f}" for x in v) if isinstance(v, tuple) else f"{v:.0f}"


def report(f, sim, system: str) -> list[str]:
    lines = []
    for seqs, length in SHAPES:
        ours, theirs = epsim_layer(sim, seqs, length), aic_layer(f, seqs, length)
        lines += [f"## {system}: {seqs} prompts x {length} tokens a rank ({seqs * length} "
                  f"tokens, EP {EP})", "", "| epsim stage | µs | AIC at the same shape | µs |",
                  "|---|---:|---|---:|"]
        # each epsim stage beside the AIC rows that time the same work (µs)
        pairs = ((0, (0,)), (1, (1,)), (2, (2,)), (3, (3,)), (4, ()), (5, (4, 5)), (6, (6, 8)),
                 (7, (7, 9)), (8, (10,)), (9, ()), (10, ()))
        mine, aic = list(ours.items()), list(theirs.items())
        for i, js in pairs:
            names = "; ".join(aic[j][0] for j in js)
            values = "; ".join(_fmt(aic[j][1]) for j in js)
            lines.append(f"| {mine[i][0]} | {mine[i][1]:.0f} | {names} | {values} |")
        attn = theirs["MLA module 0.5.10 (trtllm_mla, FP8 KV)"]
        a2a = theirs["dispatch, 20 SMs"] + theirs["combine, 20 SMs"]
        rest = a2a + theirs["shared expert GEMMs"] + ours["MoE block ops"]
        layer = {d: tuple(attn + rest + x for x in theirs[f"MoE {d}, EP 4 / EP 16"])
                 for d in DISTRIBUTIONS}
        tail_ms = ours["dense layers + LM head + overhead (ms)"]
        rate = {d: tuple(seqs * length / ((x * MOE_LAYERS) / 1e3 + tail_ms) * 1e3 for x in v)
                for d, v in layer.items()}
        lines += ["", f"epsim: layer {ours['layer']:.0f} µs, forward {ours['step (ms)']:.0f} ms "
                  f"(dense layers + LM head + overhead {tail_ms:.0f} ms): "
                  f"{seqs * length / ours['step (ms)'] * 1e3:,.0f} prompt tokens/s a GPU.",
                  f"AIC's stages summed (MLA module {attn:.0f}, DeepEP normal at 20 "
                  f"SMs {a2a:.0f}, shared expert, epsim's MoE block ops, serial: no TBO), MoE at "
                  "EP 4 / EP 16 routed pairs:"]
        lines += [f"- {d}: layer {_fmt(layer[d])} µs; x {MOE_LAYERS} + epsim's "
                  f"{tail_ms:.0f} ms: {_fmt(rate[d])} prompt tokens/s a GPU" for d in DISTRIBUTIONS]
        lines.append("")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/gb200_wide_prefill_stages.md"))
    args = parser.parse_args(argv)
    lines = ["# One prefill forward of the GB200 / GB300 FP8 wide-EP DEP8 prefill: epsim against "
             "AIC's op tables", "", f"Generated by `python benchmarks/gb200_wide_prefill_stages.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). Per MoE "
             "layer, µs, device time; AIC: " + ", ".join(f"`{t}`" for t in TABLES.values())
             + " of each system.", ""]
    rows = {r.id: r for r in read_rows(default_csv_path())}
    seqs, length = SHAPES[0]
    for system, row_id in CASES:
        sim = row_simulation(rows[row_id])
        assert sim.cost_model.deployment.disaggregation_mode == "prefill"
        lines += [f"Row `{row_id}`'s prefill instance ({system}):", ""]
        lines += report(frames(system, TABLES), sim, system)
        lines += [f"## {system}: epsim's forward ({seqs} x {length} a rank) under skewed routing "
                  "(sensitivity)", ""]
        lines += skew_sensitivity(rows[row_id], seqs, length) + [""]
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
