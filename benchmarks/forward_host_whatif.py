"""What if SGLang's eager DeepSeek prefill forward cost a fixed host time a layer, whatever its
launch count? A diagnosis of issue 39's few-client TTFT floor, not a model: nothing here is
adopted or sets a constant (docs/silicon.md, "The eager host: per launch or per layer?").

    python benchmarks/forward_host_whatif.py [--write]

`epsim.cost.forward_host` prices the host of an eager extend forward as counted launches x one
launch's host time (29.3 us, the live bench's, extrapolated): 45 ms a forward on Blackwell NVFP4
(25 launches a MoE layer, FlashInfer's TRT-LLM MoE), 69 ms on Hopper FP8 (39, Triton's MoE). Two
public forward-level figures can be read per layer instead (61 layers):

- 1,354 us a layer: sgl-project/sglang PR #12160 (2025-10), an eager 1-token DeepSeek-V3 extend
  took 82.6 ms a forward against 23.1 ms in a CUDA graph (TP0's `forward cost` log; GPU not
  stated; a cached prefix, so the absorbed MLA, and Triton's MoE assumed). The count reads it as
  ~30 us x ~45 launches.
- 2,016 us a layer: lightseekorg/tokenspeed PR #597 (2026-07), a Kimi-K2.6 (DeepSeek-V3's
  architecture) 2,048-token prefill took 123 ms eager against 55 ms with breakable CUDA graphs
  ("~GPU compute floor"); another engine, GPU and parallelism not stated.

Each variant replaces `launch_us` so that a MoE layer's host is that figure (the dense layers
and the per-forward launches scale with it) and predicts the rows as `epsim validate --silicon
--approximate` does (`epsim.validate.silicon.run.predict`). The rows: 24 DeepSeek-R1 runs at 4-16
clients of the groups the floor was read on (IDS). The sample is validation data.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import epsim.cost.model as cost_model  # noqa: E402
from epsim.cost.forward_host import forward_host  # noqa: E402
from epsim.validate.silicon.mapping import plan_row  # noqa: E402
from epsim.validate.silicon.rows import default_csv_path, read_rows  # noqa: E402
from epsim.validate.silicon.run import predict  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "forward_host_whatif.md"
# (label, a MoE layer's host in us or None for the count as priced)
VARIANTS = (("as priced (count x 29.3 us)", None),
            ("1,354 us a layer (PR #12160 per layer)", 1354.0),
            ("2,016 us a layer (tokenspeed #597 per layer)", 2016.0))
IDS = {
    "B200 FP4 agg 1k (0.5.9)": [f"dsr1_b200_sglang_fp4_agg_1024x1024_c{c}_cfg{g}"
                                for g in (201, 202) for c in (4, 8, 16)],
    "B200 FP4 agg 8k (0.5.9)": [f"dsr1_b200_sglang_fp4_agg_8192x1024_c{c}_cfg{g}"
                                for g in (201, 202) for c in (4, 8, 16)],
    "H200 FP8 agg (0.5.9)": [f"dsr1_h200_sglang_fp8_agg_{s}_c{c}_cfg81"
                             for s in ("1024x1024", "8192x1024") for c in (4, 8)],
    "B300 FP4 agg (0.5.10.post1)": ["dsr1_b300_sglang_fp4_agg_1024x1024_c4_cfg717",
                                    "dsr1_b300_sglang_fp4_agg_1024x1024_c8_cfg718",
                                    "dsr1_b300_sglang_fp4_agg_8192x1024_c4_cfg717",
                                    "dsr1_b300_sglang_fp4_agg_8192x1024_c4_cfg718"],
    "GB200 FP4 P/D (0.5.8)": [f"dsr1_gb200_sglang_fp4_disagg_{s}_c{c}_cfg{g}"
                              for s, g in (("1024x1024", 486), ("8192x1024", 481))
                              for c in (4, 8)],
}


def _per_layer(layer_us: float | None):
    """`forward_host` with a MoE layer's host set to `layer_us` (None: as counted)."""
    def priced(params, engine):
        host = forward_host(params, engine)
        if host is None or layer_us is None:
            return host
        return dataclasses.replace(host, launch_us=layer_us / host.moe_layer_launches)
    return priced


def _predict_all(rows: dict, layer_us: float | None) -> dict[str, dict]:
    cost_model.forward_host = _per_layer(layer_us)      # what the cost model calls
    try:
        return {i: predict(plan_row(rows[i])) for ids in IDS.values() for i in ids}
    finally:
        cost_model.forward_host = forward_host


def table() -> str:
    path = default_csv_path()
    if path is None:
        return "aiconfigurator-core is not installed: no silicon sample, nothing compared."
    rows = {r.id: r for r in read_rows(path)}
    runs = [_predict_all(rows, us) for _, us in VARIANTS]
    head = " | ".join(label for label, _ in VARIANTS)
    lines = [f"TTFT / TPOT MAPE % by group, {head}:", "",
             f"| group | rows | {head} |", "|---|---|" + "---|" * len(VARIANTS)]
    every = [i for ids in IDS.values() for i in ids]
    for name, ids in list(IDS.items()) + [("all", every)]:
        cells = []
        for run in runs:
            ttft = [abs(run[i]["ttft_ms"] / rows[i].ttft_ms - 1) for i in ids]
            tpot = [abs(run[i]["tpot_ms"] / rows[i].tpot_ms - 1) for i in ids]
            cells.append(f"{100 * statistics.mean(ttft):.1f} / {100 * statistics.mean(tpot):.1f}")
        lines.append(f"| {name} | {len(ids)} | " + " | ".join(cells) + " |")
    lines += ["", f"| row | measured TTFT ms | {head} |", "|---|---|" + "---|" * len(VARIANTS)]
    for i in every:
        status = {run[i]["status"] for run in runs}
        lines.append(f"| {i} | {rows[i].ttft_ms:.0f} | "
                     + " | ".join(f"{run[i]['ttft_ms']:.0f}" for run in runs)
                     + ("" if status <= {"predicted"} else f" ({'/'.join(sorted(status))})")
                     + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS,
                         "The eager prefill host read per layer: a what-if",
                         "python benchmarks/forward_host_whatif.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
