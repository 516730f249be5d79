"""The stages of LMSYS's MTP case study's decode step (DeepSeek-V3 on 16 H200, 2 requests per rank,
65,536-token prompts) as epsim prices `scenarios/deepseek_v3_mtp_decode.yaml` without MTP, against
aiconfigurator-core's H200 SGLang op tables at the same shapes: where a step the published
throughput asks to be ~9 ms longer could lose that time (benchmarks/mtp_lmsys.py).

    python benchmarks/lmsys_mtp_stages.py [--out benchmarks/results/lmsys_mtp_stages.md]

Deployment (sgl-project/sglang#7998's decode command): DP attention 16 (attention TP 1, all 128
heads on a GPU), EP 16 over DeepEP low-latency on 2 nodes, 256 + 32 redundant experts (18 a
rank), `--disable-shared-experts-fusion`, `--moe-dense-tp-size 1`, `--enable-dp-lm-head`,
`--page-size 64`, `--cuda-graph-max-bs 2`, no `--attention-backend` and no `--kv-cache-dtype`:
SGLang's `ModelRunner.model_specific_adjustment` of mid-2025 picks `fa3` for an MLA model on
Hopper and the cache stays BF16. So no DP gather or scatter runs in the forward: the MoE
layers' tokens move by DeepEP, the dense layers' MLP and the LM head run on each rank's own 2
tokens; the DP ranks' batch-info all-gather is the scheduler's (host time, below).

epsim: the cost model `Simulation` builds for the scenario with MTP off, one decode step of 2
requests a rank at 67,584 keys (the prompt plus half the 4,096-token output), routed by the
scenario's skew model; the per-stage rows at AIC's shapes (its MLA table's `step` 65,535).
AIC: the mean of the matching rows of each table (op-level calibration data); a GEMM between
table widths (or depths) is linear between them, the LM head's 129,280 columns linear beyond
the table's two widest. Stages with no AIC table (the attention block's norms, RoPE and KV
write; the router's top-k and the MoE block's own ops; the per-step overhead and the
scheduler's host time) are epsim's on both sides. The published step (2 requests / 51 tokens/s
per rank = 39.2 ms) is validation data, set beside the sums only: nothing is fitted or chosen
on it.

Reading (benchmarks/results/lmsys_mtp_stages.md): priced stage by stage from AIC's tables the
step comes out ~1.3 ms above epsim's, not ~8 ms: no device stage is off by
the ~140 µs a MoE layer the published step would ask for. The MLA kernel (FA3, BF16 cache) and
the projections agree within a few µs; the two-node DeepEP exchanges agree since the profile's
low-latency fit reads AIC's multi-node rows (before, it held one node and priced them ~17 µs a
layer below AIC's table, last section); AIC's uniform-routing experts row is dearer and its
power-law rows agree; epsim's shared expert is dearer than AIC's. What
remains is outside every op table: the scheduler's host time per iteration, which SGLang of
mid-2025 runs with `--disable-overlap-schedule` in turn with the GPU: its eager launches, and
two gloo collectives over the 16 ranks' CPU group across both nodes every iteration (the control
requests' broadcast in `recv_requests`, and the DP batch-info all-gather,
`Scheduler.prepare_mlp_sync_batch_raw(tp_cpu_group)`, which the scenario's `mlp_sync_group: cpu`
prices as that version ran it), priced in `epsim.cost.scheduler_host`.
"""

from __future__ import annotations

import argparse
import platform
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from aic_stages import frames  # noqa: E402
from epsim.calibrate.aic_tables import package_version  # noqa: E402
from epsim.cost.attention import BatchCounts, lm_head_us  # noqa: E402
from epsim.cost.mla import _gemm  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

SYSTEM = "h200_sxm"
SCENARIO = ROOT / "scenarios" / "deepseek_v3_mtp_decode.yaml"
TABLES = {"mla": "mla/sglang/0.5.14/generation_mla_perf.parquet",
          "module6": "mla/sglang/0.5.6.post2/wideep_generation_mla_perf.parquet",
          "module10": "mla/sglang/0.5.10/wideep_generation_mla_perf.parquet",
          "bmm": "mla_bmm/sglang/0.5.14/mla_bmm_perf.parquet",
          "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet",
          "mlp": "mlp/sglang/0.5.6.post2/wideep_generation_mlp_perf.parquet",
          "moe6": "moe/sglang/0.5.6.post2/wideep_generation_moe_perf.parquet",
          "moe10": "moe/sglang/0.5.10/wideep_generation_moe_perf.parquet",
          "ll": "comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet"}
REQUESTS, TABLE_KEYS, STEP_KEYS = 2, 65535, 65536 + 2048
PUBLISHED_STEP_MS = 2 / 51.0 * 1e3       # LMSYS: 51 tokens/s per rank at 2 requests (validation)
NO_MTP = {f"deployment.speculative_{k}": None for k in ("algorithm", "num_steps", "eagle_topk",
                                                         "num_draft_tokens", "accept_length")}


def gemm_at(frame, m: int, n: int, k: int, dtype: str) -> float:
    """AIC's GEMM at (m, n, k) (µs): linear in k between the table's bracketing depths, and at
    each depth linear in n between bracketing widths, or beyond the two widest (NaN below)."""
    rows = frame[(frame.gemm_dtype == dtype) & (frame.m == m)]
    depths = np.array(sorted(rows.k.unique()))
    lo_k, hi_k = depths[depths <= k].max(), depths[depths >= k].min()

    def at_depth(depth: int) -> float:
        widths = np.array(sorted(rows[rows.k == depth].n.unique()))
        if n > widths.max():
            lo, hi = widths[-2], widths[-1]
        else:
            lo, hi = widths[widths <= n].max(), widths[widths >= n].min()
        a = measured(rows, k=int(depth), n=int(lo))
        b = measured(rows, k=int(depth), n=int(hi))
        return a if lo == hi else a + (b - a) * (n - lo) / (hi - lo)
    a, b = at_depth(lo_k), at_depth(hi_k)
    return a if lo_k == hi_k else a + (b - a) * (k - lo_k) / (hi_k - lo_k)


def simulation():
    from epsim.sim.engine import Simulation
    from epsim.spec import load_scenario
    return Simulation(load_scenario(SCENARIO, NO_MTP))


def stages(f: dict) -> tuple[list[tuple[str, float, float]], dict]:
    """[(stage, epsim µs, AIC µs)] of one MoE layer, and the step's totals (ms)."""
    sim = simulation()
    cm = sim.cost_model
    m, p = cm.model, cm.params
    mla = p.attention.mla
    dp = p.parallel.dp_size
    batch = BatchCounts.uniform_decode(dp, REQUESTS, STEP_KEYS)
    loads = sim.skew.loads(batch.routed_tokens, sim.routing_rng, t_s=0.0, step=0)
    s = cm.step(batch, loads, sim.placement.tables, record=False)
    t = np.array([float(REQUESTS)])
    heads, hidden = mla.heads, m.hidden_size
    # the kernel of the rank's decode tokens over their keys in all (`BatchCounts.decode_context`)
    kernel = lambda keys: float(cm._decode_kernel.us(t, t * keys)[0])  # noqa: E731
    gemm = f["gemm"]
    mla_rows = dict(kernel_source="flash_attention", kv_cache_dtype="bfloat16", num_heads=heads,
                    batch_size=REQUESTS)
    # AIC's rows of the format epsim prices (BF16: SGLang dequantises block-FP8 `kv_b_proj`)
    bmm = dict(bmm_dtype="fp8" if mla.bmm_format == "fp8" else "bfloat16", num_tokens=REQUESTS,
               num_heads=heads)
    ops = float(cm._attention_ops(t)[0])
    proj = [(f"fused q_a + kv_a GEMM ({mla.gemm_format})",
             float(_gemm(t, mla.q_lora_rank + mla.kv_lora_rank + mla.rope_dim, hidden, mla)[0]),
             gemm_at(gemm, REQUESTS, mla.q_lora_rank + mla.kv_lora_rank + mla.rope_dim, hidden,
                     "fp8_block")),
            (f"q_b GEMM ({mla.gemm_format})",
             float(_gemm(t, heads * (mla.nope_dim + mla.rope_dim), mla.q_lora_rank, mla)[0]),
             gemm_at(gemm, REQUESTS, heads * (mla.nope_dim + mla.rope_dim), mla.q_lora_rank,
                     "fp8_block")),
            (f"absorbed BMM W_UK ({mla.bmm_format})",
             float(_gemm(t, mla.kv_lora_rank, mla.nope_dim, mla, heads, bmm=True)[0]),
             measured(f["bmm"], op_name="mla_gen_pre", **bmm)),
            (f"absorbed BMM W_UV ({mla.bmm_format})",
             float(_gemm(t, mla.v_dim, mla.kv_lora_rank, mla, heads, bmm=True)[0]),
             measured(f["bmm"], op_name="mla_gen_post", **bmm)),
            (f"o_proj GEMM ({mla.gemm_format})",
             float(_gemm(t, hidden, heads * mla.v_dim, mla)[0]),
             gemm_at(gemm, REQUESTS, hidden, heads * mla.v_dim, "fp8_block"))]
    out = [(f"MLA decode kernel, {REQUESTS} x {TABLE_KEYS} keys, BF16 cache (AIC: FA3)",
            kernel(TABLE_KEYS), measured(f["mla"], step=TABLE_KEYS, **mla_rows))] + proj
    out.append(("attention block ops (norms, RoPE, KV write; no AIC table)", ops, float("nan")))
    module_epsim = sum(e for _, e, _ in proj) + ops + kernel(1)
    for key, version in (("module6", "0.5.6.post2"), ("module10", "0.5.10")):
        out.append((f"check: the whole MLA module at 1 key (AIC: wideep_generation_mla {version}, "
                    "fa3, FP8 cache)", module_epsim,
                    measured(f[key], kernel_source="fa3", num_heads=heads, batch_size=REQUESTS,
                             isl=1)))
    inter = m.moe_intermediate_size
    out.append(("shared expert MLP (AIC: the module, wideep_generation_mlp)",
                float(s.shared_experts_us.mean()), measured(f["mlp"], num_token=REQUESTS,
                                                            intermediate_size=inter)))
    out.append(("check: shared expert's two GEMMs (AIC gemm, fp8_block; no SiLU, no quant)",
                float("nan"), gemm_at(gemm, REQUESTS, 2 * inter, hidden, "fp8_block")
                + gemm_at(gemm, REQUESTS, hidden, inter, "fp8_block")))
    out.append(("MoE block ops (router GEMM, top-k, expert map; AIC: the router GEMM, bf16)",
                float(s.block_ops_us.mean()),
                gemm_at(gemm, REQUESTS, m.num_experts, hidden, "bfloat16")))
    ep = p.parallel.ep_size
    moe = dict(moe_ep_size=ep, num_tokens=ep * REQUESTS)
    out.append((f"routed experts, EP {ep}, {ep * REQUESTS} tokens (AIC 0.5.10 deepepmoe, uniform; "
                "epsim: the scenario's routing, 18 experts a rank)", float(s.experts_us.mean()),
                measured(f["moe10"], distribution="uniform", **moe)))
    for key, version in (("moe6", "0.5.6.post2"), ("moe10", "0.5.10")):
        out.append((f"check: routed experts, AIC {version} power_law_0.6", float("nan"),
                    measured(f[key], distribution="power_law_0.6", **moe)))
    slots = m.num_experts + cm.deployment.ep_num_redundant_experts      # physical experts
    nodes = -(-ep // cm.cluster.hardware.gpus_per_node)
    for stage, ours in (("dispatch", s.dispatch_us), ("combine", s.combine_us)):
        out.append((f"DeepEP low-latency {stage}, {nodes} nodes, {REQUESTS} tokens/rank, {slots} "
                    f"experts", float(ours.mean()),
                    measured(f["ll"], f"{stage}_avg_t_us", node_num=nodes, num_experts=slots,
                             hidden_size=hidden, num_token=REQUESTS)))
    # the step: AIC's stages where it has them, epsim's elsewhere
    mla_step = measured(f["mla"], step=TABLE_KEYS, **mla_rows) + (
        measured(f["mla"], step=2 * TABLE_KEYS + 1, **mla_rows)
        - measured(f["mla"], step=TABLE_KEYS, **mla_rows)) * (STEP_KEYS - TABLE_KEYS) / (TABLE_KEYS + 1)
    aic_attention = mla_step + sum(a for _, _, a in proj) + ops
    aic = {n.split(" (")[0].split(",")[0]: a for n, _, a in out}
    aic_layer = (aic_attention + aic["shared expert MLP"] + float(s.block_ops_us.mean())
                 + aic["routed experts"] + sum(a for n, _, a in out if n.startswith("DeepEP")))
    dense_mlp_epsim = float(cm._mlp_us(t, m.intermediate_size, p.gemm_rates(True))[0])
    dense_mlp_aic = (gemm_at(gemm, REQUESTS, 2 * m.intermediate_size, hidden, "fp8_block")
                     + gemm_at(gemm, REQUESTS, hidden, m.intermediate_size, "fp8_block"))
    lm_epsim = float(lm_head_us(t, m, p.gemm_rates(True), p.tp_size)[0])
    lm_aic = gemm_at(gemm, REQUESTS, m.vocab_size, hidden, "bfloat16")
    host = cm.scheduler_host
    outside = s.overhead_us - host.step_us
    n_moe, n_dense = m.num_moe_layers, m.num_dense_layers
    tail = [(f"dense layer MLP ({m.intermediate_size} wide, TP 1; AIC: its two fp8_block GEMMs), "
             f"x {n_dense}", dense_mlp_epsim, dense_mlp_aic),
            (f"LM head ({m.vocab_size} x {hidden}, bf16, DP LM head; AIC: bf16 GEMM, "
             "extrapolated in n)", lm_epsim, lm_aic),
            (f"scheduler host time, not overlapped ({host.launches} launches "
             f"{host.launches_us:.1f} + NCCL DP gather {host.gather_us:.1f} + "
             f"gloo collectives {host.gloo_us:.1f} (GPU host, {host.gloo_ranks} ranks); no AIC table)",
             host.step_us, float("nan")),
            ("per-step overhead (base + per layer; no AIC table)", outside, float("nan"))]
    epsim_attention = float(s.attention_us.mean())
    totals = {"epsim_step_ms": s.step_us / 1e3,
              "epsim_layers_ms": float(s.layer_us.sum()) / 1e3,
              "epsim_attention_us": epsim_attention, "aic_attention_us": aic_attention,
              "aic_layer_us": aic_layer, "epsim_layer_us": float(s.layer_us.mean()),
              "aic_step_ms": (n_moe * aic_layer + n_dense * (aic_attention + dense_mlp_aic)
                              + lm_aic + s.overhead_us) / 1e3,
              "epsim_dense_ms": s.dense_us / 1e3, "host_ms": host.step_us / 1e3,
              "overhead_ms": s.overhead_us / 1e3, "moe_layers": n_moe, "dense_layers": n_dense}
    return out, tail, totals


def deepep_nodes() -> list[str]:
    """Markdown rows: the default H200 profile's DeepEP low-latency price of every row of
    `TABLES["ll"]` (1, 2, 4, 8 nodes), by stage and node count."""
    from epsim.calibrate.aic import import_source
    from epsim.calibrate.aic_tables import _table, package_root, parse_source
    from epsim.cost.record import predict_record
    from epsim.default_profile import default_profile
    rel = TABLES["ll"].split("/")
    table = _table(SYSTEM, rel[0], rel[1], rel[2], rel[3].removesuffix(".parquet"),
                   package_root() / "data" / SYSTEM / "/".join(rel[:3]))
    records = import_source(parse_source(f"aic:{SYSTEM}/sglang"), [table]).fit
    profile = default_profile("H200")
    out = ["| stage | nodes (EP) | rows | MAPE | bias | 2 tokens/rank: AIC / epsim (µs) | "
           "256 tokens/rank: AIC / epsim (µs) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for kind in ("dispatch", "combine"):
        for nodes in (1, 2, 4, 8):
            mine = [r for r in records if r.kind == kind and r.extra["node_num"] == nodes]
            pred = np.array([predict_record(r, profile) for r in mine])
            meas = np.array([r.median_us for r in mine])
            err = pred / meas - 1

            def at(tokens: int) -> str:
                i = [j for j, r in enumerate(mine) if r.num_tokens_per_rank == tokens
                     and r.num_experts == (288 if nodes > 1 else 256)]
                return f"{meas[i[0]]:.1f} / {pred[i[0]]:.1f}" if i else "-"
            out.append(f"| {kind} | {nodes} ({8 * nodes}) | {len(mine)} | "
                       f"{np.abs(err).mean():.1%} | {err.mean():+.1%} | {at(2)} | {at(256)} |")
    return out


def _ratio(ours: float, theirs: float) -> str:
    return "-" if np.isnan(ours) or np.isnan(theirs) or theirs == 0 else f"{ours / theirs:.2f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/lmsys_mtp_stages.md"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")              # the profile's extrapolation notes
    f = frames(SYSTEM, TABLES)
    out, tail, tot = stages(f)
    lines = ["# LMSYS's MTP case study's decode step on H200: epsim's stages against AIC's op "
             "tables", "",
             f"Generated by `python benchmarks/lmsys_mtp_stages.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). Device "
             "time, µs; AIC: " + ", ".join(f"`{t}`" for t in TABLES.values())
             + ". The script's docstring says what each row compares.", "",
             f"## One MoE layer ({REQUESTS} requests a rank)", "",
             "| stage | epsim | AIC | epsim / AIC |", "|---|---:|---:|---:|"]
    fmt = lambda x: "-" if np.isnan(x) else f"{x:.1f}"  # noqa: E731
    lines += [f"| {n} | {fmt(e)} | {fmt(a)} | {_ratio(e, a)} |" for n, e, a in out]
    lines += ["", "## Once a step", "", "| stage | epsim | AIC | epsim / AIC |",
              "|---|---:|---:|---:|"]
    lines += [f"| {n} | {fmt(e)} | {fmt(a)} | {_ratio(e, a)} |" for n, e, a in tail]
    gap = PUBLISHED_STEP_MS - tot["epsim_step_ms"]
    lines += ["", "## The step", "",
              f"epsim's step at {STEP_KEYS} keys: {tot['epsim_step_ms']:.2f} ms = "
              f"{tot['moe_layers']} MoE layers x {tot['epsim_layer_us']:.1f} µs "
              f"({tot['epsim_layers_ms']:.2f} ms; attention {tot['epsim_attention_us']:.1f} µs a "
              f"layer) + {tot['dense_layers']} dense layers and the LM head "
              f"{tot['epsim_dense_ms']:.2f} + overhead {tot['overhead_ms']:.2f} (of which the "
              f"scheduler's host time {tot['host_ms']:.2f}).",
              f"AIC's stages (epsim's where AIC has no table; the MLA kernel at {STEP_KEYS} keys "
              f"linear between the table's 65,535 and 131,071): a MoE layer "
              f"{tot['aic_layer_us']:.1f} µs (attention {tot['aic_attention_us']:.1f}), the step "
              f"{tot['aic_step_ms']:.2f} ms.",
              f"The published throughput's step (validation only): {PUBLISHED_STEP_MS:.2f} ms, "
              f"{gap:+.2f} ms beyond epsim's ({gap / tot['moe_layers'] * 1e3:+.0f} µs a MoE "
              f"layer if it were there), {PUBLISHED_STEP_MS - tot['aic_step_ms']:+.2f} ms beyond "
              "AIC's stages.", ""]
    lines += ["## DeepEP low-latency across nodes: the H200 profile against AIC's multi-node rows",
              "", "Every row of `" + TABLES["ll"] + "` (DeepEP's test, uniform routing, 1-8 "
              "nodes of 8) as the importer makes it (`epsim.calibrate.aic_comm`), priced by the "
              "default H200 profile (`predict_record`). The profile's low-latency fit reads "
              "`comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet` (one node) and this table's "
              "2-8-node rows, which `AicSource.tables` fills in by node count as AIC serves "
              "them (`NODE_FILL_TABLES`); this table's one-node rows, an older DeepEP's, are not "
              "fitted. Before that fill the fit held one node and priced the 2-8-node rows at "
              "17-28 % MAPE, half the time at 2 tokens a rank (docs/model.md, \"Remote "
              "signals\").", ""]
    lines += deepep_nodes() + [""]
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
