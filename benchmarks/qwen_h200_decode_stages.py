"""The stages of a Qwen3-235B-A22B-FP8 decode step on H200 (SGLang, TP2 / TP4, 2-8 requests,
1-4k keys), as epsim prices them for the silicon sample's agg rows, against aiconfigurator-core's
H200 SGLang op tables at the same shapes: which stage of the step is too cheap (docs/silicon.md).

    python benchmarks/qwen_h200_decode_stages.py [--out benchmarks/results/qwen_h200_decode_stages.md]

epsim: the cost model the silicon mapping builds for the row (`plan_row` -> `Simulation`), one
decode step of `b` requests of `keys` keys each, routed top-8 uniformly at random (seed 0), per
layer (94 MoE layers). AIC: the mean of the matching rows of its tables (op-level calibration
data); the QKV GEMM's width (9216 / TP) lies between table widths and is interpolated linearly in
n. The MoE row is given at both SGLang versions AIC collected `sglang_fused_moe_triton` on
(0.5.10, 0.5.14; the silicon rows ran 0.5.6.post2). No end-to-end figure is read. Device time.
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

from epsim.calibrate.aic_tables import package_root, package_version  # noqa: E402
from epsim.cost.attention import BatchCounts  # noqa: E402
from epsim.io.write import write_text  # noqa: E402
from epsim.sim.engine import Simulation  # noqa: E402
from epsim.spec.scenario import scenario_from_dict  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import read_rows, default_csv_path  # noqa: E402
from lmsys_decode_stages import measured  # noqa: E402

SYSTEM = "h200_sxm"
TABLES = {"attn": "attention/sglang/0.5.14/generation_attention_perf.parquet",
          "gemm": "gemm/sglang/0.5.14/gemm_perf.parquet",
          "ar": "comm/sglang/0.5.9/custom_allreduce_perf.parquet",
          "moe10": "moe/sglang/0.5.10/moe_perf.parquet",
          "moe14": "moe/sglang/0.5.14/moe_perf.parquet"}
# (TP, requests, keys): the silicon rows' TP and clients, keys at the attention table's `step`
SHAPES = ((2, 2, 4095), (2, 4, 1023), (2, 4, 2047), (4, 2, 2047), (4, 8, 1023), (4, 8, 2047),
          (4, 8, 4095))
ROW_OF_TP = {2: "agg_4000x2000_c2_tp2", 4: "agg_2000x500_c9_tp4"}   # a row whose mapping to reuse
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, EXPERTS, TOP_K = 4096, 64, 4, 128, 1536, 128, 8


def _frames() -> dict:
    import pandas as pd
    return {k: pd.read_parquet(package_root() / "data" / SYSTEM / v) for k, v in TABLES.items()}


def _gemm_us(frame, m: int, n: int, k: int, dtype: str = "fp8_block") -> float:
    """AIC's GEMM at (m, n, k), linear in n between the table's bracketing widths."""
    widths = np.array(sorted(frame[(frame.gemm_dtype == dtype) & (frame.k == k)].n.unique()))
    lo, hi = widths[widths <= n].max(), widths[widths >= n].min()
    at = {w: measured(frame, gemm_dtype=dtype, m=m, n=int(w), k=k) for w in {lo, hi}}
    return at[lo] if lo == hi else at[lo] + (at[hi] - at[lo]) * (n - lo) / (hi - lo)


def aic_layer(f: dict, tp: int, b: int, keys: int) -> dict[str, float]:
    """One layer's stages from AIC's tables (µs)."""
    heads, kv = HEADS // tp, max(KV_HEADS // tp, 1)
    moe = dict(hidden_size=HIDDEN, inter_size=INTER, num_experts=EXPERTS, topk=TOP_K,
               moe_dtype="fp8_block", moe_ep_size=1, moe_tp_size=tp, distribution="balanced",
               num_tokens=b)
    return {"attention kernel (fa3)": measured(f["attn"], kernel_source="fa3", num_heads=heads,
                                               num_key_value_heads=kv, head_dim=HEAD_DIM,
                                               kv_cache_dtype="bfloat16", window_size=0,
                                               batch_size=b, step=keys),
            "qkv GEMM": _gemm_us(f["gemm"], b, (HEADS + 2 * KV_HEADS) * HEAD_DIM // tp, HIDDEN),
            "o_proj GEMM": _gemm_us(f["gemm"], b, HIDDEN, HEADS * HEAD_DIM // tp),
            "router GEMM (bf16)": _gemm_us(f["gemm"], b, EXPERTS, HIDDEN, "bfloat16"),
            "all-reduce (one)": measured(f["ar"], backend="sglang_graph", num_gpus=tp,
                                         message_size=b * HIDDEN * 2),
            "MoE 0.5.10": measured(f["moe10"], **moe), "MoE 0.5.14": measured(f["moe14"], **moe)}


def epsim_layer(tp: int, b: int, keys: int) -> dict[str, float]:
    """One layer's stages as epsim prices the row's decode step (µs; first MoE layer)."""
    row = next(r for r in read_rows(default_csv_path()) if ROW_OF_TP[tp] in r.id
               and r.model.startswith("Qwen3-235B"))
    sim = Simulation(scenario_from_dict(copy.deepcopy(plan_row(row).instances[0].data),
                                        where="silicon row"))
    cm, m = sim.cost_model, sim.cost_model.model
    rng = np.random.default_rng(0)
    loads = np.zeros((m.num_moe_layers, m.num_experts))                 # [layers, experts]
    for layer in range(m.num_moe_layers):
        for _ in range(b):
            loads[layer, rng.choice(m.num_experts, m.top_k, replace=False)] += 1
    s = cm.step(BatchCounts.uniform_decode(1, b, keys), loads, sim.placement.tables)
    return {"attention (kernel, projections, block ops, its all-reduce)": float(s.attention_us[0]),
            "experts": float(s.experts_us.mean()), "MoE all-reduce (combine)": float(s.combine_us[0]),
            "block ops": float(s.block_ops_us[0]),
            "step (ms)": s.step_us / 1e3, "dense + LM head + overhead (ms)":
                (s.dense_us + s.overhead_us) / 1e3}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/qwen_h200_decode_stages.md"))
    args = parser.parse_args(argv)
    f = _frames()
    lines = ["# A Qwen3-235B-A22B-FP8 decode step's stages on H200: epsim against AIC's op tables",
             "", f"Generated by `python benchmarks/qwen_h200_decode_stages.py` "
             f"({datetime.now(timezone.utc):%Y-%m-%d}, {platform.node()}, Python "
             f"{platform.python_version()}; aiconfigurator-core {package_version()}). Per layer, "
             "µs, device time; AIC: " + ", ".join(f"`{t}`" for t in TABLES.values()) + ".", ""]
    for tp, b, keys in SHAPES:
        ours, theirs = epsim_layer(tp, b, keys), aic_layer(f, tp, b, keys)
        block = (theirs["attention kernel (fa3)"] + theirs["qkv GEMM"] + theirs["o_proj GEMM"]
                 + theirs["all-reduce (one)"])
        rest = theirs["router GEMM (bf16)"] + theirs["all-reduce (one)"]
        lines += [f"## TP{tp}, {b} requests x {keys} keys", "",
                  "| epsim stage | µs | AIC stage | µs |", "|---|---:|---|---:|"]
        lines += [f"| {k} | {v:.1f} | {a} | {w:.1f} |" for (k, v), (a, w) in
                  zip(list(ours.items())[:4], list(theirs.items())[:4])]
        lines += [f"| | | {a} | {w:.1f} |" for a, w in list(theirs.items())[4:]]
        layers = 94
        lines += ["", f"epsim step {ours['step (ms)']:.2f} ms (dense + LM head + overhead "
                  f"{ours['dense + LM head + overhead (ms)']:.2f}); AIC's layer sum x {layers} "
                  f"(attention block {block:.1f} + router and MoE all-reduce {rest:.1f} + MoE): "
                  f"{(block + rest + theirs['MoE 0.5.14']) * layers / 1e3:.2f} ms with MoE 0.5.14, "
                  f"{(block + rest + theirs['MoE 0.5.10']) * layers / 1e3:.2f} ms with 0.5.10 "
                  "(no LM head, norms or host).", ""]
    write_text(Path(args.out), "\n".join(lines) + "\n")   # atomically
    print("\n".join(lines))


if __name__ == "__main__":
    main()
