"""What the decode-stage benchmarks share (`qwen_h200_decode_stages.py`,
`deepseek_b200_decode_stages.py`): aiconfigurator-core's op tables of one system, a GEMM between
the table's widths, and one decode step of a silicon row as epsim's mapping prices it.

Op tables are calibration data; the silicon rows are read only for the deployment their mapping
builds (`plan_row`), never for their measured latencies here.
"""

from __future__ import annotations

import copy

import numpy as np

from epsim.calibrate.aic_tables import package_root
from epsim.cost.attention import BatchCounts
from epsim.sim.engine import Simulation
from epsim.spec.scenario import scenario_from_dict
from epsim.validate.silicon.mapping import plan_row
from lmsys_decode_stages import measured


def frames(system: str, tables: dict[str, str]) -> dict:
    """{name: the parquet table at `data/<system>/<path>`} of the installed aiconfigurator-core."""
    import pandas as pd
    return {k: pd.read_parquet(package_root() / "data" / system / v) for k, v in tables.items()}


def gemm_us(frame, m: int, n: int, k: int, dtype: str) -> float:
    """AIC's GEMM at (m, n, k) and `dtype` (µs), linear in n between the table's bracketing
    widths (NaN where the table has no width at or beyond n)."""
    widths = np.array(sorted(frame[(frame.gemm_dtype == dtype) & (frame.k == k)].n.unique()))
    if not len(widths) or n < widths.min() or n > widths.max():
        return float("nan")
    lo, hi = widths[widths <= n].max(), widths[widths >= n].min()
    at = {w: measured(frame, gemm_dtype=dtype, m=m, n=int(w), k=k) for w in {lo, hi}}
    return at[lo] if lo == hi else at[lo] + (at[hi] - at[lo]) * (n - lo) / (hi - lo)


def between(frame, column: str, value: float, **where) -> float:
    """AIC's latency (µs) at `column` = `value`, linear between the table's bracketing values of
    `column` among the rows matching `where` (NaN outside them)."""
    keep = np.ones(len(frame), dtype=bool)
    for name, v in where.items():
        keep &= (frame[name] == v).to_numpy()
    points = np.array(sorted(frame[keep][column].unique()), dtype=np.float64)
    if not len(points) or value < points.min() or value > points.max():
        return float("nan")
    lo, hi = points[points <= value].max(), points[points >= value].min()
    at = {p: measured(frame, **where, **{column: type(frame[column].iloc[0])(p)}) for p in {lo, hi}}
    return at[lo] if lo == hi else at[lo] + (at[hi] - at[lo]) * (value - lo) / (hi - lo)


def uniform_loads(num_layers: int, num_experts: int, top_k: int, tokens: int,
                  seed: int = 0) -> np.ndarray:
    """[layers, experts] pairs of `tokens` tokens each routed to `top_k` distinct experts
    uniformly at random (a random-token benchmark's routing, no skew)."""
    rng = np.random.default_rng(seed)
    loads = np.zeros((num_layers, num_experts))
    for layer in range(num_layers):
        for _ in range(tokens):
            loads[layer, rng.choice(num_experts, top_k, replace=False)] += 1
    return loads


def row_simulation(row) -> Simulation:
    """The simulation epsim's silicon mapping builds for the row's (first) instance; for a row
    several deployments fit (`candidates`), the first candidate without a speculative draft
    (the decode step itself, not its MTP cycle)."""
    plan = plan_row(row)
    if not plan.instances:
        plan = next(c for c in plan_row(row, approximate=True).candidates
                    if "speculative_algorithm" not in c.instances[0].data["deployment"])
    return Simulation(scenario_from_dict(copy.deepcopy(plan.instances[0].data),
                                         where="silicon row"))


def decode_step(sim: Simulation, requests: int, keys: int, seed: int = 0):
    """One decode step of `requests` requests of `keys` keys each on one attention group, routed
    by `uniform_loads` (epsim's `StepCost`)."""
    m = sim.cost_model.model
    loads = uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, requests, seed)
    return sim.cost_model.step(BatchCounts.uniform_decode(1, requests, keys), loads,
                               sim.placement.tables)


def attention_stages(f: dict, sim: Simulation, b: int, keys: int, mla_label: str,
                     mla_where: dict, ar_label: str) -> tuple[list[tuple[str, float, float]], float]:
    """([(stage, epsim µs, AIC µs)] of one MLA layer's attention side at `b` requests of `keys`
    keys, TP attention: the decode kernel (AIC's `f["mla"]` rows matching `mla_where`), the
    fused q_a + kv_a, q_b and o_proj GEMMs (`f["gemm"]`, epsim's format), the absorbed BMMs
    (`f["bmm"]`), the all-reduce (`f["ar"]`, CUDA graph) and the block ops no table has; and
    AIC's all-reduce (µs), which the MoE side pays again)."""
    from epsim.cost.mla import _gemm
    cm = sim.cost_model
    mla, par = cm.params.attention.mla, cm.params.parallel
    batch = BatchCounts.uniform_decode(1, b, keys)
    t = np.array([float(b)])
    heads, hidden = mla.heads, mla.hidden_size
    gemm_dtype = {"fp8_block": "fp8_block", "bf16": "bfloat16"}[mla.gemm_format]
    bmm_dtype = {"fp8": "fp8", "bf16": "bfloat16"}.get(mla.bmm_format, mla.bmm_format)
    ar = between(f["ar"], "message_size", b * hidden * 2.0, backend="sglang_graph",
                 num_gpus=par.tp_size)
    qkv_a = mla.q_lora_rank + mla.kv_lora_rank + mla.rope_dim
    q_b = heads * (mla.nope_dim + mla.rope_dim)
    out = [(mla_label, float(cm._decode_kernel.us(batch.decode_tokens, batch.decode_context)[0]),
            measured(f["mla"], num_heads=heads, batch_size=b, step=keys, **mla_where)),
           (f"fused q_a + kv_a GEMM ({mla.gemm_format})", float(_gemm(t, qkv_a, hidden, mla)[0]),
            gemm_us(f["gemm"], b, qkv_a, hidden, gemm_dtype)),
           (f"q_b GEMM ({mla.gemm_format})", float(_gemm(t, q_b, mla.q_lora_rank, mla)[0]),
            gemm_us(f["gemm"], b, q_b, mla.q_lora_rank, gemm_dtype)),
           (f"o_proj GEMM ({mla.gemm_format})", float(_gemm(t, hidden, heads * mla.v_dim, mla)[0]),
            gemm_us(f["gemm"], b, hidden, heads * mla.v_dim, gemm_dtype)),
           (f"absorbed BMM W_UK ({mla.bmm_format})",
            float(_gemm(t, mla.kv_lora_rank, mla.nope_dim, mla, heads, bmm=True)[0]),
            measured(f["bmm"], op_name="mla_gen_pre", bmm_dtype=bmm_dtype, num_tokens=b,
                     num_heads=heads)),
           (f"absorbed BMM W_UV ({mla.bmm_format})",
            float(_gemm(t, mla.v_dim, mla.kv_lora_rank, mla, heads, bmm=True)[0]),
            measured(f["bmm"], op_name="mla_gen_post", bmm_dtype=bmm_dtype, num_tokens=b,
                     num_heads=heads)),
           (ar_label.format(gpus=par.tp_size), cm._collectives_us(batch, True), ar)]
    ops = cm._attention_ops(t)
    out.append(("attention block ops (norms, RoPE, KV write; no AIC table)",
                0.0 if ops is None else float(ops.max()), float("nan")))
    return out, ar


def shared_expert_stage(f: dict, sim: Simulation, s, b: int, shared_inter: int,
                        moe_dtype: str) -> tuple[tuple[str, float, float], float]:
    """(the shared expert's row: epsim's step `s` against AIC's two GEMMs at `moe_dtype`, its
    intermediate split by TP; AIC's µs)."""
    p = sim.cost_model.params
    inter, hidden = shared_inter // p.parallel.tp_size, p.attention.mla.hidden_size
    aic = (gemm_us(f["gemm"], b, 2 * inter, hidden, moe_dtype)
           + gemm_us(f["gemm"], b, hidden, inter, moe_dtype))
    fused = p.fused_shared_experts
    return ((f"shared expert ({'fused into the MoE kernel' if fused else 'its own GEMMs'}; "
             f"AIC: its two GEMMs, {moe_dtype})", float(s.shared_experts_us.mean()), aic), aic)


def step_totals(s, num_layers: int, out: list[tuple[str, float, float]],
                aic_layer_us: float) -> dict:
    """The step's totals (ms): epsim's step, its MoE layers, what lies outside them, AIC's
    layer sum over the MoE layers, and the stages no AIC table prices."""
    return {"epsim_step_ms": s.step_us / 1e3,
            "epsim_layers_ms": float(s.layer_us.sum()) / 1e3,
            "outside_ms": (s.dense_us + s.overhead_us) / 1e3,
            "aic_layers_ms": aic_layer_us * num_layers / 1e3,
            "ops_ms": float(np.nan_to_num(sum(e for name, e, a in out if np.isnan(a)))
                            ) * num_layers / 1e3,
            "layers": num_layers}


def stage_report(title: str, script: str, tables: dict[str, str], sections: list,
                 moe_note: str) -> list[str]:
    """The markdown of a decode-stage comparison: `sections` [(heading, row id, stages,
    totals, measured TPOT ms)], each a table and its step line."""
    import platform
    from datetime import datetime, timezone

    from epsim.calibrate.aic_tables import package_version
    lines = [title, "", f"Generated by `python benchmarks/{script}` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). Per MoE "
             "layer, µs, device time; AIC: " + ", ".join(f"`{t}`" for t in tables.values())
             + ". The script's docstring says what each row compares.", ""]
    for heading, row_id, out, tot, tpot_ms in sections:
        lines += [f"## {heading} (`{row_id}`)", "",
                  "| stage | epsim | AIC | epsim / AIC |", "|---|---:|---:|---:|"]
        lines += [f"| {name} | {ours:.1f} | {theirs:.1f} | "
                  f"{'-' if np.isnan(theirs) or theirs == 0 else f'{ours / theirs:.2f}'} |"
                  for name, ours, theirs in out]
        lines += ["", f"epsim's step {tot['epsim_step_ms']:.2f} ms: {tot['layers']} MoE layers "
                  f"{tot['epsim_layers_ms']:.2f} ms (of which block ops without an AIC table "
                  f"{tot['ops_ms']:.2f}) + dense layers, LM head and per-step overhead "
                  f"{tot['outside_ms']:.2f}. AIC's stages x {tot['layers']} ({moe_note}): "
                  f"{tot['aic_layers_ms']:.2f} ms; with epsim's block ops, dense layers, LM head "
                  f"and overhead: {tot['aic_layers_ms'] + tot['ops_ms'] + tot['outside_ms']:.2f} "
                  f"ms. The row's measured TPOT (validation only): {tpot_ms:.2f} ms.", ""]
    return lines
