"""Why epsim's TPOT is low on GB200 wide-EP FP8 decode rows at more than 256 clients (issue 39): the
error split by campaign and SGLang version, the decode batch the measurements imply, and one
SGLang mechanism epsim's decode instance leaves out (the prebuilt batch's lost step), bounded.

    python benchmarks/gb200_wide_decode_tpot.py [--write]          # the record's tables (seconds)
    python benchmarks/gb200_wide_decode_tpot.py --run [--write]    # + the stall, re-simulated

Reads the whole-set record `benchmarks/results/silicon_rows.json.gz` (epsim's predictions,
measured TTFT/TPOT, each row's stated assumptions). The silicon sample is validation data: this
is a diagnosis of errors; nothing here sets or chooses a constant of the simulator, and no
mechanism below is adopted from these numbers.

**The prebuilt-batch stall.** SGLang's disaggregated decode loop
(`sglang/srt/disaggregation/decode.py`, 0.5.8.post1 lines 907-945,
`get_next_disagg_decode_batch_to_run`) runs, on a DP rank whose waiting queue holds transferred
requests, a *prebuilt* batch in place of its running batch: under DP attention that rank runs an
idle forward in lock-step with the other ranks' decode step, so its running requests get no
token that step (the same in the September 2025 loop, `_prepare_idle_batch_and_run`). epsim's
decode instance (`epsim.sim.batching` / `decode_path`) lets a rank's running requests decode in
the step that admits new ones. If a rank runs a prebuilt batch in a share p of steps, its
requests' TPOT is the step over (1 - p). p is bounded two ways:

- *per-request arrivals* (upper bound): transfers reach a rank one by one at the rate its
  requests finish, lambda = B / OSL a step (B decoding requests a rank), p = 1 - exp(-lambda);
- *prefill-forward bursts*: a prefill instance's DP ranks forward in lock-step and the KV of a
  forward's n requests lands at once, spread over the decode's D ranks; a rank is hit by a
  forward with q = 1 - exp(-n / D), by N_P instances forwarding f_P times a second, so
  p = 1 - exp(-N_P f_P q step); f_P and n from epsim's own prefill instance (`--run`).

**The step against the op tables.** One decode step of the DEP32 max-tpt decode priced stage by
stage (`stage_table`) beside aiconfigurator-core's GB200 wide-EP tables (calibration data): at
uniform routing no stage is cheaper in epsim than in the tables; the tables' own power-law MoE
rows (AIC prices DeepSeek at `power_law_1.01`, `sdk/models/deepseek.py`) less their uniform row,
over 58 layers, is what the rows' measured TPOT leaves over. DeepSeek-R1's expert loads on the
harness's random prompts are recorded nowhere we hold, so no skew is chosen here (docs/silicon.md,
the GB200 prefill's same finding).

Error = predicted / measured - 1; MAPE its mean magnitude; percent.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

from recorded import recorded_main

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RECORD = ROOT / "benchmarks" / "results" / "silicon_rows.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "gb200_wide_decode_tpot.md"
OSL_MEAN = 0.9              # InferenceX's OSL uniform in [0.8 L, L] (each row's assumptions)
# rows re-simulated by --run: the 0.5.8.post1 DP-attention decodes of GB200 and GB300 FP8 at
# 2048+ clients, one per layout and client count (GB300: the rows the per-request bound breaks)
RUN_IDS = (
    "dsr1_gb200_sglang_fp8_disagg_1024x1024_c4096_cfg508",
    "dsr1_gb200_sglang_fp8_disagg_1024x1024_c2048_cfg523",
    "dsr1_gb200_sglang_fp8_disagg_1024x1024_c4096_cfg523",
    "2026_03_25_deepseek_r1_gb200_sglang_fp8_disagg_1024x1024_c6144_tp8_0_ep8_0_827",
    "2026_03_25_deepseek_r1_gb200_sglang_fp8_disagg_1024x1024_c4096_tp8_0_ep8_0_808",
    "2026_03_25_deepseek_r1_gb200_sglang_fp8_disagg_8192x1024_c2048_tp8_0_ep8_0_830",
    "2026_03_25_deepseek_r1_gb300_sglang_fp8_disagg_1024x1024_c7168_tp8_0_ep8_0_820",
    "2026_03_25_deepseek_r1_gb300_sglang_fp8_disagg_1024x1024_c4096_tp8_0_ep8_0_810",
    "2026_03_25_deepseek_r1_gb300_sglang_fp8_disagg_1024x1024_c6144_tp8_0_ep8_0_813",
)


def _rows() -> list[dict]:
    with gzip.open(RECORD, "rt") as fh:
        return json.load(fh)["rows"]


def _scored(row: dict) -> bool:
    e, m = row["epsim"], row["measured"]
    return e.get("status") == "predicted" and bool(e.get("tpot_ms")) and bool(m.get("tpot_ms"))


def _err(pred: float, meas: float) -> float:
    return pred / meas - 1.0


def _decode_ranks(row: dict) -> int:
    """DP ranks of the decode side as run (1: no DP attention)."""
    found = re.search(r"D tp\d+ dp(\d+)", row["layout_as_run"])
    return int(found.group(1)) if found else 1


def _batch_per_rank(row: dict, source: str = "measured") -> float:
    """Requests decoding on a decode rank by Little's law over the closed loop's cycle, from
    `source`'s TTFT and TPOT (`measured` or `epsim`): clients x OSL x TPOT / (TTFT + OSL x TPOT)
    / ranks."""
    got = row[source]
    osl_s = OSL_MEAN * row["osl"] * got["tpot_ms"] * 1e-3
    return row["concurrency"] * osl_s / (got["ttft_ms"] * 1e-3 + osl_s) / _decode_ranks(row)


def _campaign(row: dict) -> str:
    found = re.search(r"InferenceX \S+ at [0-9a-f]+ \((\d{4}-\d\d-\d\d)\)", " ".join(row["epsim"]["assumptions"]))
    return found.group(1) if found else "?"


def _target(row: dict) -> bool:
    """The issue's rows: GB200, FP8-block MoE, more than 256 clients."""
    return (row["system"] == "gb200" and row.get("moe_quant_mode", "").startswith("fp8")
            and row["concurrency"] > 256 and _scored(row))


def _stats(errors: list[float]) -> str:
    n = len(errors)
    return f"{n} | {100 * sum(map(abs, errors)) / n:.1f} | {100 * sum(errors) / n:+.1f}"


def campaigns(rows: list[dict]) -> str:
    """The issue's rows by mode, InferenceX campaign and SGLang version."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in filter(_target, rows):
        key = (r["mode"], _campaign(r), r["version"] or "not stated")
        groups[key].append(_err(r["epsim"]["tpot_ms"], r["measured"]["tpot_ms"]))
    total = sum(abs(x) for v in groups.values() for x in v)
    out = ["| mode | campaign | SGLang | rows | TPOT MAPE | bias | share of the |error| |",
           "|---|---|---|---|---|---|---|"]
    for key, errs in sorted(groups.items()):
        out.append(f"| {' | '.join(key)} | {_stats(errs)} | {100 * sum(map(abs, errs)) / total:.0f} % |")
    return "\n".join(out)


def little_batch(rows: list[dict]) -> str:
    """Each disaggregated row's decode batch a rank as measured (Little's law over the measured
    cycle: clients x OSL x TPOT / (TTFT + OSL x TPOT) / ranks) beside its clients a rank."""
    out = ["| campaign | SGLang | ISL | clients | decode | clients/rank | measured batch/rank | "
           "TTFT pred / meas (s) | TPOT pred / meas (ms) | error |", "|---|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in sorted(filter(_target, rows), key=lambda r: (_campaign(r), r["isl"], _decode_ranks(r),
                                                        r["concurrency"])):
        if r["mode"] != "disagg":
            continue
        ranks = _decode_ranks(r)
        key = (_campaign(r), r["version"], r["isl"], ranks, r["concurrency"])
        if key in seen:
            continue
        seen.add(key)
        e, m = r["epsim"], r["measured"]
        batch = _batch_per_rank(r)
        out.append(f"| {key[0]} | {r['version'] or '-'} | {r['isl']} | {r['concurrency']} | DEP{ranks} | "
                   f"{r['concurrency'] / ranks:.0f} | {batch:.0f} | {e['ttft_ms'] / 1e3:.1f} / "
                   f"{m['ttft_ms'] / 1e3:.1f} | {e['tpot_ms']:.1f} / {m['tpot_ms']:.1f} | "
                   f"{100 * _err(e['tpot_ms'], m['tpot_ms']):+.0f} % |")
    return "\n".join(out)


def poisson_stall(rows: list[dict]) -> str:
    """The per-request bound applied to every disaggregated DP-attention decode row of the
    record, by system: epsim's own batch (its predicted cycle) sets lambda."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        ranks = _decode_ranks(r)
        if r["mode"] != "disagg" or ranks <= 1 or not _scored(r):
            continue
        e, m = r["epsim"], r["measured"]
        stall = 1.0 - math.exp(-_batch_per_rank(r, "epsim") / (OSL_MEAN * r["osl"]))
        groups[r["system"]].append((_err(e["tpot_ms"], m["tpot_ms"]),
                                    _err(e["tpot_ms"] / (1.0 - stall), m["tpot_ms"])))
    out = ["| system | DP-attention P/D rows | TPOT MAPE as recorded | bias | with the per-request "
           "stall | bias |", "|---|---|---|---|---|---|"]
    for system, pairs in sorted(groups.items()):
        before, after = [p[0] for p in pairs], [p[1] for p in pairs]
        n = len(pairs)
        out.append(f"| {system} | {n} | {100 * sum(map(abs, before)) / n:.1f} | {100 * sum(before) / n:+.1f} | "
                   f"{100 * sum(map(abs, after)) / n:.1f} | {100 * sum(after) / n:+.1f} |")
    return "\n".join(out)


def _simulated(row_id: str) -> dict:
    """The last round's prefill and decode summaries of one row as `epsim validate --silicon`
    predicts it (`epsim.validate.silicon.run.couple`), and its prediction."""
    from epsim.validate.silicon import run as silicon_run
    from epsim.validate.silicon.mapping import plan_row
    from epsim.validate.silicon.rows import default_csv_path, read_rows

    row = next(r for r in read_rows(default_csv_path()) if r.id == row_id)
    plan = plan_row(row)
    last: dict[str, dict] = {}
    simulate_round = silicon_run._simulate_round      # every round of either side goes through it

    def keep(make, instance, *args, **kwargs):
        summary = simulate_round(make, instance, *args, **kwargs)
        last[instance.role] = {"summary": summary, "deployment": instance.data["deployment"]}
        return summary

    silicon_run._simulate_round = keep
    try:
        out = silicon_run.couple(plan.instances, row.osl)
    finally:
        silicon_run._simulate_round = simulate_round
    return {"row": row, "out": out, **last}


def burst_stall(rows: list[dict]) -> str:
    """Both bounds on the rows of `RUN_IDS`, re-simulated on this tree."""
    by_id = {r["id"]: r for r in rows}
    out = ["| row | decode | batch/rank | step (ms) | P inst. x forwards/s | req./forward | "
           "p per-request | p bursts | TPOT pred / meas (ms) | error | per-request | bursts |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row_id in RUN_IDS:
        got = _simulated(row_id)
        dec, pre = got["decode"]["summary"], got["prefill"]["summary"]
        ranks = int(got["decode"]["deployment"]["dp_size"])
        p_inst = int(got["prefill"]["deployment"].get("num_instances") or 1)
        p_inst = max(p_inst, int(re.search(r"x(\d+) /", by_id[row_id]["layout_as_run"]).group(1))
                     if re.search(r"x(\d+) /", by_id[row_id]["layout_as_run"]) else p_inst)
        step_s = dec["step_ms"]["mean"] * 1e-3
        batch = dec["output_tokens_per_s_per_gpu"] * step_s
        lam = batch / (OSL_MEAN * got["row"].osl)
        p_req = 1.0 - math.exp(-lam)
        forwards = pre["busy_frac"] / (pre["step_ms"]["mean"] * 1e-3)
        per_forward = pre["requests_per_s"] / forwards
        hit = 1.0 - math.exp(-per_forward / ranks)
        p_burst = 1.0 - math.exp(-p_inst * forwards * hit * step_s)
        tpot, meas = got["out"]["tpot_ms"], by_id[row_id]["measured"]["tpot_ms"]
        out.append(f"| {row_id[-34:]} | DEP{ranks} | {batch:.0f} | {step_s * 1e3:.1f} | {p_inst} x "
                   f"{forwards:.2f} | {per_forward:.0f} | {p_req:.3f} | {p_burst:.3f} | {tpot:.1f} / "
                   f"{meas:.1f} | {100 * _err(tpot, meas):+.0f} % | {100 * _err(tpot / (1 - p_req), meas):+.0f} % | "
                   f"{100 * _err(tpot / (1 - p_burst), meas):+.0f} % |")
    return "\n".join(out)


def versions(rows: list[dict]) -> str:
    """The same decode layout and batch across campaigns: measured TPOT at about the same decode
    batch a rank (the software-version gap AIC's GB200 tables, 0.5.9 and later, cannot see)."""
    out = ["| campaign | SGLang | ISL | decode | clients | measured batch/rank | TPOT measured | epsim |",
           "|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in sorted(filter(_target, rows), key=lambda r: (r["isl"], _decode_ranks(r), _campaign(r))):
        ranks = _decode_ranks(r)
        m = r["measured"]
        batch = _batch_per_rank(r)
        if r["mode"] != "disagg" or not 10 <= batch <= 40:
            continue
        key = (_campaign(r), r["version"], r["isl"], ranks, r["concurrency"])
        if key in seen:
            continue
        seen.add(key)
        out.append(f"| {key[0]} | {r['version'] or '-'} | {r['isl']} | DEP{ranks} | {r['concurrency']} | "
                   f"{batch:.0f} | {m['tpot_ms']:.1f} | {r['epsim']['tpot_ms']:.1f} |")
    return "\n".join(out)


def aic_versions() -> str:
    """The SGLang versions of aiconfigurator-core's GB200 op tables."""
    try:
        import aiconfigurator_core
    except ImportError:
        return "(aiconfigurator-core not installed)"
    base = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / "gb200"
    found = {op.name: sorted(p.name for p in (op / "sglang").iterdir())
             for op in sorted(base.iterdir()) if (op / "sglang").is_dir()}
    return ", ".join(f"{op} {'/'.join(v)}" for op, v in found.items() if op in ("moe", "mla", "comm", "gemm"))


STAGE_ROW = "dsr1_gb200_sglang_fp8_disagg_1024x1024_c4096_cfg523"   # DEP32, the recipe max-tpt
STAGE_POINTS = ((64, 1024), (128, 1024), (128, 2048))              # (requests a rank, keys)
AIC_TABLES = {"mla": "mla/sglang/0.5.10/wideep_generation_mla_perf.parquet",
              "moe": "moe/sglang/0.5.10/wideep_generation_moe_perf.parquet",
              "ll": "comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet"}


def stage_table() -> str:
    """One decode step of `STAGE_ROW`'s decode instance (DEP32) as epsim prices it, per MoE
    layer, beside aiconfigurator-core's GB200 wide-EP tables at the same requests a rank: the
    MLA module, the DeepEP MoE at uniform routing and at its power-law rows, DeepEP low-latency
    dispatch and combine (the table's one node; EP 32 spans eight trays). Op tables are
    calibration data; the row is read for its deployment only."""
    import copy
    import warnings

    from aic_stages import frames, uniform_loads
    from lmsys_decode_stages import measured
    from epsim.cost.attention import BatchCounts
    from epsim.sim.engine import Simulation
    from epsim.spec.scenario import scenario_from_dict
    from epsim.validate.silicon.mapping import plan_row
    from epsim.validate.silicon.rows import default_csv_path, read_rows

    warnings.simplefilter("ignore")
    row = next(r for r in read_rows(default_csv_path()) if r.id == STAGE_ROW)
    decode = next(i for i in plan_row(row).instances if i.role == "decode")
    sim = Simulation(scenario_from_dict(copy.deepcopy(decode.data), where="silicon row"))
    cm, m = sim.cost_model, sim.cost_model.model
    ranks = decode.data["deployment"]["dp_size"]
    f = frames("gb200", AIC_TABLES)
    out = ["| requests a rank x keys | stage | epsim µs | AIC µs |", "|---|---|---|---|"]
    for b, keys in STAGE_POINTS:
        loads = uniform_loads(m.num_moe_layers, m.num_experts, m.top_k, ranks * b)
        s = cm.step(BatchCounts.uniform_decode(ranks, b, keys), loads, sim.placement.tables)
        moe = dict(moe_ep_size=ranks, num_tokens=ranks * b)
        where = f"{b} x {keys}"
        rows = [("attention (AIC: the wide-EP MLA module, trtllm_mla)", s.attention_us.mean(),
                 measured(f["mla"], num_heads=128, batch_size=b, isl=keys)),
                ("routed experts (AIC: deepepmoe, uniform)", s.experts_us.mean(),
                 measured(f["moe"], distribution="uniform", **moe)),
                ("routed experts (AIC: deepepmoe, power_law_1.01)", float("nan"),
                 measured(f["moe"], distribution="power_law_1.01", **moe)),
                ("DeepEP LL dispatch (AIC: one node)", s.dispatch_us.mean(),
                 measured(f["ll"], "dispatch_avg_t_us", num_experts=256, hidden_size=7168,
                          num_topk=8, num_token=b)),
                ("DeepEP LL combine (AIC: one node)", s.combine_us.mean(),
                 measured(f["ll"], "combine_avg_t_us", num_experts=256, hidden_size=7168,
                          num_topk=8, num_token=b))]
        out += [f"| {where} | {name} | {ours:.1f} | {theirs:.1f} |" for name, ours, theirs in rows]
        skew = (rows[2][2] - rows[1][2]) * m.num_moe_layers / 1e3
        out.append(f"| {where} | step (epsim) / AIC's power-law MoE less its uniform, x "
                   f"{m.num_moe_layers} layers | {s.step_us / 1e3:.2f} ms | +{skew:.2f} ms |")
    return "\n".join(out)


def table(run: bool = False) -> str:
    rows = _rows()
    parts = ["## The rows by campaign\n", campaigns(rows),
             "\n## The decode batch the measurements imply\n", little_batch(rows),
             "\n## Same layout, same batch, older SGLang\n", versions(rows),
             f"\naiconfigurator-core's GB200 SGLang tables: {aic_versions()}.",
             "\n## One decode step of the DEP32 max-tpt decode against AIC's wide-EP tables\n",
             stage_table(),
             "\n## The prebuilt-batch stall, per-request bound, every DP-attention P/D row\n",
             poisson_stall(rows)]
    if run:
        parts += ["\n## Both bounds, re-simulated\n", burst_stall(rows)]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run = "--run" in argv
    if run:
        argv.remove("--run")
    command = "python benchmarks/gb200_wide_decode_tpot.py" + (" --run" if run else "") + " --write"
    return recorded_main(argv, __doc__, RESULTS, "GB200 wide-EP FP8 decode TPOT at >256 clients",
                         command, lambda: table(run))


if __name__ == "__main__":
    sys.exit(main())
