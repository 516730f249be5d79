"""Why epsim's TPOT was high on GB200/GB300 FP4 disaggregated decodes (issue 39): the decode step
stage by stage, the layout the launch scripts ran, and the decode batch the measurements imply.

    python benchmarks/gb200_fp4_decode_stages.py [--write]        # ~1 min, one CPU

Reads the whole-set record `benchmarks/results/silicon_rows.json.gz` (measured and predicted
TTFT/TPOT, each row's assumptions) and prices steps with epsim's cost model on the rows'
mapped deployments; aiconfigurator-core's GB200 DeepEP low-latency table is calibration data
beside them. The silicon rows are validation data: nothing here sets a constant or chooses a
mechanism from them.

**Low latency (4-64 clients, December 2025).** InferenceX's `dsr1-fp4-gb200-dynamo-sglang`
groups state `tp: 1, dp-attn: true` (DEP4); their `SCRIPT_MODE` scripts
(`gb200-fp4/disagg/{1k1k,8k1k}-low-latency.sh`, `epsim.validate.silicon.dynamo_scripts`) run
TP4, EP 1, FlashInfer TRT-LLM MoE. Read as DEP4, a rank decodes 1-2 requests and pays the whole
MLA module's weights (attention TP 1), DeepEP's dispatch and combine and its share of the
experts, every layer; TP4 splits the attention and MoE weights four ways. The table prices one
step both ways at the rows' batch.

**Wide EP (DEP32/48, 512-8192 clients, February 2026).** The FP4 decode recipes set
`SGLANG_MOE_NVFP4_DISPATCH=1` (DeepEP LL `use_nvfp4`, 0.55 x FP8's bytes); epsim dispatched
FP8. The step at uniform and at the recorded routing (SGLang's DeepSeek-V3 loads, trivially
placed redundant slots, as the rows run), FP8 and NVFP4 dispatch, beside AIC's LL table (one
NVLink node: fewer destination ranks than EP 32, a lower bound on the wide dispatch). Then the
decode batch Little's law gives (clients x OSL x TPOT / (TTFT + OSL x TPOT) / ranks): from 4096
to 8192 clients the measured batch a rank stays (~115 at DEP32, ~55 at DEP48) while TTFT grows
ten-fold -- the runs are prefill-bound (4 x DEP4 prefills), so the decode never holds the
clients epsim's faster prefill hands it.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import sys
import warnings
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "gb200_fp4_decode_stages.md"
OSL_MEAN = 0.9          # InferenceX's OSL uniform in [0.8 L, L]
LOW_ROW = "dsr1_gb200_sglang_fp4_disagg_1024x1024_c8_cfg252"       # 8 clients, 2 decode workers
WIDE_ROW = "dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483"   # DEP32, mid-curve recipe
WIDE_POINTS = (64, 128, 235)       # requests a rank: the rows' measured 59 / 115, epsim's 235
KEYS = 1380                        # mean context of a 1k/1k decode (ISL 922 + OSL 922 / 2)
LL_TABLE = "comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet"


def _decode(row_id: str, **override):
    """(Simulation, DP ranks) of the row's mapped decode instance, `override` on its deployment."""
    from epsim.sim.engine import Simulation
    from epsim.spec.scenario import scenario_from_dict
    from epsim.validate.silicon.mapping import plan_row
    from epsim.validate.silicon.rows import default_csv_path, read_rows
    row = next(r for r in read_rows(default_csv_path()) if r.id == row_id)
    data = copy.deepcopy(next(i for i in plan_row(row).instances if i.role == "decode").data)
    data["deployment"].update(override)
    return (Simulation(scenario_from_dict(data, where="silicon row")),
            data["deployment"].get("dp_size") or 1)


def _step(sim, ranks: int, per_rank: int, keys: int, loads):
    from epsim.cost.attention import BatchCounts
    return sim.cost_model.step(BatchCounts.uniform_decode(ranks, per_rank, keys), loads,
                               sim.placement.tables)


def _stage_row(label: str, s) -> str:
    return (f"| {label} | {s.attention_us.mean():.1f} | {s.dispatch_us.mean():.1f} | "
            f"{s.experts_us.mean():.1f} | {s.combine_us.mean():.1f} | "
            f"{s.shared_experts_us.mean():.1f} | {s.layer_us.mean():.1f} | {s.step_us / 1e3:.2f} |")


HEAD = ["| layout, requests a rank | attention | dispatch | experts | combine | shared | layer | "
        "step (ms) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]


def low_latency() -> str:
    """One step of the 8-client row's decode worker (4 requests, 1024 keys): as the TP4 script
    runs it, and as InferenceX's DEP4 placeholder read it (1 request a rank)."""
    from aic_stages import uniform_loads
    tp, _ = _decode(LOW_ROW)
    dep, ranks = _decode(LOW_ROW, tp_size=4, dp_size=4, ep_size=4, moe_tp_size=1,
                         enable_dp_attention=True, moe_a2a_backend="deepep",
                         deepep_mode="low_latency", max_running_requests=1)
    m = tp.cost_model.model
    loads = uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, 4)
    out = list(HEAD)
    out.append(_stage_row("TP4 (the script), 4 on one attention group", _step(tp, 1, 4, 1024, loads)))
    out.append(_stage_row(f"DEP4 (the placeholder), 1 on each of {ranks}",
                          _step(dep, ranks, 1, 1024, loads)))
    return "\n".join(out)


def wide_ep() -> str:
    """Steps of the DEP32 decode at `WIDE_POINTS` requests a rank: uniform and recorded routing,
    FP8 and NVFP4 dispatch, AIC's one-node LL dispatch and combine beside them."""
    import numpy as np

    from aic_stages import frames, uniform_loads
    from lmsys_decode_stages import measured
    sims = {d: _decode(WIDE_ROW, dispatch_dtype=d) for d in ("fp8", "nvfp4")}
    sim, ranks = sims["nvfp4"]
    m = sim.cost_model.model
    ll = frames("gb200", {"ll": LL_TABLE})["ll"]
    out = list(HEAD)
    aic = ["| requests a rank (AIC's) | AIC LL dispatch (one node, FP8) | AIC LL combine |",
           "|---|---:|---:|"]
    for b in WIDE_POINTS:
        uniform = uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, ranks * b)
        recorded = sim.skew.loads(ranks * b, np.random.default_rng(0))
        for d, (s, _) in sims.items():
            for name, loads in (("uniform", uniform), ("recorded", recorded)):
                out.append(_stage_row(f"DEP{ranks} {b}, {name} routing, {d} dispatch",
                                      _step(s, ranks, b, KEYS, loads)))
        # the table's token counts are powers of two: the next one up (235 -> 256)
        at = int(2 ** np.ceil(np.log2(b)))
        shape = dict(num_experts=256, hidden_size=7168, num_topk=8, num_token=at)
        aic.append(f"| {b} ({at}) | {measured(ll, 'dispatch_avg_t_us', **shape):.1f} | "
                   f"{measured(ll, 'combine_avg_t_us', **shape):.1f} |")
    return "\n".join(out) + "\n\n" + "\n".join(aic)


def little_batch() -> str:
    """The FP4 wide-EP decode rows of the record: measured and predicted batch a rank."""
    with gzip.open(RECORD, "rt") as fh:
        rows = json.load(fh)["rows"]
    out = ["| system | ISL | decode | clients | TTFT meas / epsim (s) | TPOT meas / epsim (ms) | "
           "batch a rank meas / epsim |", "|---|---|---|---|---|---|---|"]
    seen = set()
    for r in sorted(rows, key=lambda r: (r["system"], r["isl"], r["layout_as_run"], r["concurrency"])):
        said = " ".join(r["epsim"].get("assumptions", []))
        found = re.search(r"D tp\d+ dp(\d+)", r["layout_as_run"])
        if (r["system"] not in ("gb200", "gb300") or "fp4" not in r["id"] or not found
                or not re.search(r"srt-slurm recipes/gb[23]00-fp4/\S+/(mid|max)", said)
                or not r["epsim"].get("tpot_ms")):
            continue
        ranks = int(found.group(1))
        key = (r["system"], r["isl"], ranks, r["concurrency"])
        if key in seen or ranks < 8:
            continue
        seen.add(key)
        e, meas = r["epsim"], r["measured"]

        def batch(got: dict) -> float:
            osl_ms = OSL_MEAN * r["osl"] * got["tpot_ms"]
            return r["concurrency"] * osl_ms / (got["ttft_ms"] + osl_ms) / ranks
        out.append(f"| {r['system']} | {r['isl']} | DEP{ranks} | {r['concurrency']} | "
                   f"{meas['ttft_ms'] / 1e3:.1f} / {e['ttft_ms'] / 1e3:.1f} | "
                   f"{meas['tpot_ms']:.1f} / {e['tpot_ms']:.1f} | {batch(meas):.0f} / {batch(e):.0f} |")
    return "\n".join(out)


def table() -> str:
    warnings.simplefilter("ignore")
    return "\n".join([
        "Per MoE layer, µs, CUDA-graph device time; step: the whole decode step (ms).",
        "\n## An 8-client decode worker: the TP4 script against the DEP4 placeholder\n", low_latency(),
        f"\n## The DEP32 decode ({WIDE_ROW}), {KEYS} keys\n", wide_ep(),
        "\n## The decode batch the FP4 wide-EP rows imply (the record's predictions: main "
        "before the NVFP4 dispatch)\n",
        little_batch()])


def main(argv: list[str] | None = None) -> int:
    return recorded_main(argv, __doc__, RESULTS, "GB200/GB300 FP4 disaggregated decode stages",
                         "python benchmarks/gb200_fp4_decode_stages.py --write", table)


if __name__ == "__main__":
    sys.exit(main())
