"""Scenario page: pick or upload a scenario, edit its main fields in a form (the rest in the
YAML editor), run it with a progress bar, and see the KPIs, the latency CDFs, the time per MoE
layer, the load per rank; download summary.json and timeseries.csv."""

from __future__ import annotations

import json
import typing

import numpy as np
import pandas as pd
import streamlit as st

from app import charts, data, ui
from epsim.errors import EpsimError

GOOD_SOURCE = "scenario_good_source"  # session key: the last scenario text that loaded
LAST_RUN = "scenario_run"          # session key: the inputs of the run shown (the EPLB page reuses it)
SKEW_KINDS = ("uniform", "zipf", "hotset")
CHECKPOINT = "checkpoint's own"     # `deployment.quantization: null`


def _choices(model, field: str) -> list[str]:
    """The values a Literal field of a spec allows (read from the pydantic schema)."""
    return list(typing.get_args(model.model_fields[field].annotation))


def _select(label: str, options: list, value, key: str, **kwargs):
    options = list(options) + ([value] if value not in options else [])
    return st.selectbox(label, options, index=options.index(value), key=key, **kwargs)


def _int(label: str, value: int, key: str, min_value: int = 1, **kwargs) -> int:
    return int(ui.number_input(st, label, int(value), min_value=min_value, step=1, key=key, **kwargs))


def _optional_int(label: str, value: int | None, key: str, **kwargs) -> int | None:
    """An optional size: 0 in the box stands for unset (None: the spec's default)."""
    number = _int(label, value or 0, key, min_value=0, **kwargs)
    return number or None


def _float(label: str, value: float, key: str, min_value: float = 0.0, **kwargs) -> float:
    return float(ui.number_input(st, label, float(value), min_value=min_value, key=key, **kwargs))


def _skew_widgets(skew, key: str) -> dict:
    """Skew kind and its parameters; returns the whole `workload.skew` mapping."""
    current = skew.model_dump(mode="json")
    if skew.kind not in SKEW_KINDS:               # a trace: edit it in the YAML
        st.caption(f"skew: {skew.kind} (edit it in the YAML)")
        return current
    kind = st.selectbox("skew kind", SKEW_KINDS, index=SKEW_KINDS.index(skew.kind), key=f"{key}_kind")
    alpha = _float("Zipf alpha (zipf)", current.get("alpha", 1.0), f"{key}_alpha", min_value=0.01)
    num_hot = _int("hot experts (hotset)", current.get("num_hot", 16), f"{key}_hot")
    hot_frac = _float("hot share of tokens (hotset)", current.get("hot_frac", 0.5), f"{key}_frac",
                      min_value=0.01, max_value=0.99)
    drift = _float("drift (swaps/expert/s)", current["drift_rate_per_s"], f"{key}_drift", format="%.4f")
    common = {k: current[k] for k in ("layer_variation", "shuffle_per_layer")}
    params = {"zipf": {"alpha": alpha}, "hotset": {"num_hot": num_hot, "hot_frac": hot_frac}}.get(kind, {})
    return {"kind": kind, **params, **common, "drift_rate_per_s": drift}


def scenario_form(scenario, key: str) -> dict | None:
    """The main fields, prefilled from `scenario`; on submit, the changed ones as
    `{dotted.path: value}` overrides (None before submit)."""
    from epsim.spec import DeploymentSpec
    from epsim.spec.quant import QUANTIZATIONS
    from epsim.zoo import hardware_names, model_names
    m, c, d, w = scenario.model, scenario.cluster, scenario.deployment, scenario.workload
    values: dict = {}
    with st.form(f"{key}_form"):
        left, mid, right, far = st.columns(4)
        with left:
            st.markdown("**Model and cluster**")
            values["model"] = _select("model", model_names(), m.name, f"{key}_model")
            values["cluster.gpu"] = _select("GPU", hardware_names(), c.gpu, f"{key}_gpu")
            values["cluster.num_nodes"] = _int("nodes", c.num_nodes, f"{key}_nodes")
            values["cluster.price_per_gpu_hour"] = _float("price per GPU-hour", c.price_per_gpu_hour, f"{key}_price")
            values["seed"] = _int("seed", scenario.seed, f"{key}_seed", min_value=0)
        with mid:
            st.markdown("**Deployment**")
            values["deployment.ep_size"] = _int("EP size (GPUs)", d.ep_size, f"{key}_ep")
            for field, label in (("moe_a2a_backend", "all-to-all backend"), ("deepep_mode", "DeepEP mode"),
                                 ("dispatch_dtype", "dispatch dtype"), ("disaggregation_mode", "disaggregation")):
                values[f"deployment.{field}"] = _select(label, _choices(DeploymentSpec, field),
                                                        getattr(d, field), f"{key}_{field}")
            values["deployment.enable_dp_attention"] = st.checkbox("DP attention", d.enable_dp_attention,
                                                                   key=f"{key}_dp")
            # the layout beyond EP and the number formats (SGLang's names; epsim.spec.parallel)
            values["deployment.tp_size"] = _optional_int("TP size, GPUs (0: EP size x MoE-TP)",
                                                         d.tp_size, f"{key}_tp")
            values["deployment.dp_size"] = _optional_int("attention DP groups (0: one per GPU)",
                                                         d.dp_size, f"{key}_dpsize")
            values["deployment.moe_tp_size"] = _optional_int("MoE-TP size (0: TP / EP)",
                                                             d.moe_tp_size, f"{key}_moetp")
            quant = _select("weight quantization", [CHECKPOINT, *QUANTIZATIONS],
                            d.quantization or CHECKPOINT, f"{key}_quant")
            values["deployment.quantization"] = None if quant == CHECKPOINT else quant
            values["deployment.kv_cache_dtype"] = _select(
                "KV-cache dtype", _choices(DeploymentSpec, "kv_cache_dtype"), d.kv_cache_dtype,
                f"{key}_kv")
            st.caption(f"layout: {d.parallel.describe()}")
            values["deployment.enable_two_batch_overlap"] = st.checkbox(
                "two-batch overlap", d.enable_two_batch_overlap, key=f"{key}_tbo")
            values["deployment.max_running_requests"] = _int("max running requests / rank",
                                                             d.max_running_requests, f"{key}_mrr")
            values["deployment.chunked_prefill_size"] = _int("chunked prefill size", d.chunked_prefill_size,
                                                             f"{key}_chunk")
        with right:
            st.markdown("**Workload**")
            if hasattr(w.arrivals, "rate_per_s"):
                values["workload.arrivals.rate_per_s"] = _float("arrival rate (req/s)", w.arrivals.rate_per_s,
                                                                f"{key}_rate", min_value=0.001)
            elif w.arrivals.kind == "concurrency":        # a closed loop: clients, not a rate
                values["workload.arrivals.clients"] = _int("concurrent clients", w.arrivals.clients,
                                                           f"{key}_clients", min_value=1)
            values["workload.skew"] = _skew_widgets(w.skew, f"{key}_skew")
            values["workload.duration_s"] = _float("simulated seconds", w.duration_s, f"{key}_dur", min_value=0.001)
            values["workload.warmup_s"] = _float("warm-up seconds", w.warmup_s, f"{key}_warm")
        with far:
            st.markdown("**EPLB**")
            values["deployment.enable_eplb"] = st.checkbox("enable EPLB", d.enable_eplb, key=f"{key}_eplb")
            values["deployment.ep_num_redundant_experts"] = _int("redundant experts", d.ep_num_redundant_experts,
                                                                 f"{key}_red", min_value=0)
            values["deployment.eplb_rebalance_num_iterations"] = _int(
                "rebalance every N forward passes", d.eplb_rebalance_num_iterations, f"{key}_every")
            values["deployment.eplb_algorithm"] = _select("algorithm", _choices(DeploymentSpec, "eplb_algorithm"),
                                                          d.eplb_algorithm, f"{key}_algo")
            values["deployment.eplb_stop_the_world"] = st.checkbox("stop the world", d.eplb_stop_the_world,
                                                                   key=f"{key}_stw")
        submitted = st.form_submit_button("Run simulation", type="primary")
    if not submitted:
        return None
    base = {"model": m.name, "seed": scenario.seed, "workload.skew": w.skew.model_dump(mode="json")}
    changed = {}
    for path, value in values.items():
        old = base[path] if path in base else _get(scenario, path)
        if value != old:
            changed[path] = value
    return changed


def _get(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def kpis(summary: dict) -> None:
    keep = summary["keep_up"]        # first: latencies of an instance that falls behind mislead
    (st.caption if keep["ok"] and keep.get("settled", True) else st.warning)(
        f"keep-up: {keep['verdict']}")
    notes = summary.get("latency_notes", {})
    for name in ("tpot_ms", "ttft_ms"):
        if name in notes:
            st.caption(f"{name[:4].upper()}: - because {notes[name]}")
    from epsim.report.serving import DEFINITIONS
    serving = summary["serving"]
    cols = st.columns(5)
    cols[0].metric("throughput / GPU", ui.fmt(summary["throughput_tokens_per_s_per_gpu"], ".0f", " tok/s"))
    cols[1].metric("output / GPU", ui.fmt(summary["output_tokens_per_s_per_gpu"], ".0f", " tok/s"))
    # offered, served and finished as epsim defines them (`epsim.report.serving`)
    cols[2].metric("served / offered (req/s)", f"{ui.fmt(serving['served_rps'], '.1f')} / "
                   f"{ui.fmt(serving['offered_rps'], '.1f')}",
                   help=f"served: {DEFINITIONS['served_rps']}; offered: {DEFINITIONS['offered_rps']}")
    cols[3].metric("finished in the window", ui.fmt(serving["finished_rps"], ".1f", " req/s"),
                   help=f"finished: {DEFINITIONS['finished_rps']}")
    cols[4].metric("balancedness (mean/max)", ui.fmt(summary["balancedness"], ".3f"))
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        cols = st.columns(4)
        for col, q in zip(cols, ("p50", "p90", "p99")):
            col.metric(f"{label} {q}", ui.fmt(summary[name][q], ".2f", " ms"))
        cols[3].metric(f"{label} mean", ui.fmt(summary[name]["mean"], ".2f", " ms"))
    bench = summary.get("bench_serving")
    if bench:                 # the same run as sglang.bench_serving reports it (docs/model.md)
        st.caption(f"As sglang.bench_serving reports it ({bench['completed']} requests sent in the "
                   f"window and completed; TPOT = (E2E - TTFT) / (output - 1) per request)"
                   + (f"; accept length {bench['accept_length']:.2f}"
                      if bench.get("accept_length") is not None else ""))
        cols = st.columns(4)
        for col, (key, label) in zip(cols, (("mean_tpot_ms", "mean TPOT"), ("median_tpot_ms", "median TPOT"),
                                            ("median_itl_ms", "median ITL"), ("mean_ttft_ms", "mean TTFT"))):
            col.metric(label, ui.fmt(bench[key], ".2f", " ms"))
    kv = summary.get("kv_cache")
    if kv:
        text = (f"KV cache: {kv['max_total_num_tokens']:,} tokens per rank ({kv['kv_pool_gib']:.1f} GiB "
                f"after {kv['weights_gib']:.1f} GiB of weights, mem_fraction_static "
                f"{kv['mem_fraction_static']:g})")
        if kv["can_bind"] and kv["held_frac"] > 0:
            st.warning(f"{text}: it held waiting requests back in {kv['held_frac']:.0%} of the steps")
        else:
            st.caption(f"{text}: " + ("at most " + f"{kv['peak_used_frac']:.0%} full" if kv["can_bind"]
                                      else "it never binds"))


def provenance_frame(summary: dict, layer_mean_us: dict) -> pd.DataFrame:
    """Per MoE-layer part (attention, dispatch, experts, combine, block ops): the mean predicted time, the
    p10-p90 band of the component that gave most of it (NaN where it has no measured spread)
    and its provenance tag (`epsim.cost.provenance.part_bands`)."""
    from epsim.cost.provenance import part_bands
    bands = part_bands(summary.get("provenance", {}), {
        part: float(np.mean(layer_mean_us[f"{part}_us"]))
        for part in ("attention", "dispatch", "experts", "combine", "block_ops")
        if f"{part}_us" in layer_mean_us})
    return pd.DataFrame([{"part": part.replace("_", " "), "µs": b["mean_us"],
                          "p10 µs": np.nan if b["p10_us"] is None else b["p10_us"],
                          "p90 µs": np.nan if b["p90_us"] is None else b["p90_us"],
                          "tag": b["tag"], "component": b["component"]} for part, b in bands.items()])


def provenance(summary: dict, layer_mean_us: dict) -> None:
    """Where the numbers come from: the one line, the bands per part, every component."""
    prov = summary.get("provenance")
    if not prov:
        return
    st.info(f"**Where the numbers come from** ({prov['time_mode']} steps: CUDA-graph decode "
            f"steps are device time, eager steps device time + host overhead): {prov['line']}")
    frame = provenance_frame(summary, layer_mean_us)
    if not frame.empty:
        st.altair_chart(charts.provenance_bands(frame), width="stretch")
    with st.expander("Every component the prediction used (profile, data source, tag, share of "
                     "step time, band)"):
        st.caption(f"Profile: {prov.get('profile', '-')} ({prov.get('profile_rule', '-')}); "
                   f"share of step time by data source: " + ", ".join(
                       f"{k} {100 * v:.0f} %" for k, v in prov.get("data_sources", {}).items()))
        st.dataframe(pd.DataFrame([{
            "part": u["part"], "time": u["time"], "component": u["key"] or "datasheet",
            "profile": u.get("profile") or "-", "data source": u.get("data_source", "-"),
            "tag": u["tag"], "why": "; ".join(u["axes"]), "share %": round(100 * u["share"], 1),
            "p10 / p90": (f"{u['p10_ratio']:.2f} / {u['p90_ratio']:.2f}"
                          if u["p10_ratio"] else "-"), "steps": u["steps"]}
            for u in prov["components"]]), hide_index=True, width="stretch")


def results(run: dict) -> None:
    view = data.run_scenario(run["text"], run["where"], run["base_dir"], run["overrides"])
    s = view.summary
    sc = s["scenario"]
    st.subheader(f"Results: {sc['name']}")
    st.caption(f"{sc['model']['name']} on {s['num_gpus']} x {sc['cluster']['gpu']}, "
               f"{sc['deployment']['moe_a2a_backend']}; simulated {s['sim_seconds']:g} s "
               f"({s['num_steps']} steps) in {s['wall_seconds']:.1f} s; profile "
               f"{s['profile']['name'] or s['profile']['path']}; seed {s['seed']}"
               + (f"; overrides {run['overrides']}" if run["overrides"] != "{}" else ""))
    from epsim.report.cautions import cautions
    for warning in view.warnings + cautions(s):
        st.warning(warning)
    kpis(s)
    provenance(s, view.layer_mean_us)
    left, right = st.columns(2)
    left.markdown("**TTFT, CDF of measured requests**")
    left.altair_chart(charts.latency_cdf(view.latencies_ms["ttft_ms"], "TTFT (ms)"), width="stretch")
    right.markdown("**TPOT, CDF of measured requests**")
    right.altair_chart(charts.latency_cdf(view.latencies_ms["tpot_ms"], "TPOT (ms)"), width="stretch")
    left, right = st.columns([3, 2])
    tbo = sc["deployment"]["enable_two_batch_overlap"]
    left.markdown("**Time per MoE layer, mean per step (µs)**, by part"
                  + ("; black ticks: the layer's time where overlap hides part of the stack" if tbo else ""))
    left.altair_chart(charts.layer_breakdown(view.layer_mean_us, tbo), width="stretch")
    right.markdown("**Load per EP rank (token-expert pairs / mean)**")
    right.altair_chart(charts.rank_load(view.rank_pairs_mean), width="stretch")
    st.markdown("**Step time over the run**")
    st.altair_chart(charts.over_time(view.steps["t_s"], view.steps["step_ms"], "step time (ms)",
                                     stalls=view.stalls, y_zero=True), width="stretch")
    left, right, _ = st.columns([1, 1, 3])
    left.download_button("summary.json", view.summary_json, file_name="summary.json",
                         mime="application/json", on_click="ignore")
    right.download_button("timeseries.csv", view.timeseries_csv, file_name="timeseries.csv",
                          mime="text/csv", on_click="ignore")
    with st.expander("Summary table (as `epsim simulate` prints it)"):
        st.code(view.table, language=None)


def page() -> None:
    st.title("Scenario")
    st.caption("Pick a shipped scenario or upload one, change what you like, run it. Predictions use "
               "the scenario's profile (default: its GPU's default profile: H200 by h200x2 "
               "with aic_h200's quantised and MLA kernels and DeepEP, H100 / B200 / B300 / GB200 / GB300 by their "
               "aic_ profile, other GPUs from the datasheet; `epsim hardware` lists them).")
    try:
        source = ui.scenario_source("sc")
        scenario = None if source is None else data.parse_scenario(source.text, source.where,
                                                                     source.base_dir)
    except EpsimError as exc:
        # the error, and the form stays: on the last scenario that loaded (or the default), so
        # the page keeps its shape while the file is fixed or uploaded again
        st.error(str(exc))
        source = st.session_state.get(GOOD_SOURCE) or ui.default_source()
        scenario = data.parse_scenario(source.text, source.where, source.base_dir)
        st.caption(f"The form below shows {source.where} until the file above loads.")
    else:
        if source is not None:
            st.session_state[GOOD_SOURCE] = source
    if source is not None:
        changed = scenario_form(scenario, f"sc_{source.digest}")
        if changed is not None:
            overrides = json.dumps(changed, sort_keys=True)
            try:
                data.parse_scenario(source.text, source.where, source.base_dir, overrides)  # fail here
            except EpsimError as exc:
                st.error(str(exc))
            else:
                st.session_state[LAST_RUN] = {"text": source.text, "where": source.where,
                                              "base_dir": source.base_dir, "overrides": overrides}
    if LAST_RUN in st.session_state:
        results(st.session_state[LAST_RUN])


with ui.guarded():
    page()
