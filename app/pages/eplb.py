"""EPLB page: what rebalances and GPU failures cost per hour (the plan's resilience columns,
`epsim.plan.resilience`), a run with EPLB over time — load per rank or per expert as a heatmap,
balancedness and step time with the rebalances and their stalls marked, the rebalance events —
and the rebalance-interval sweep (`epsim.plan.eplb_sweep`)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app import charts, data, ui
from epsim.errors import EpsimError, SpecError
from epsim.text import number

FROM_SCENARIO_PAGE = "the Scenario page's last run"
RUN = "eplb_run"
SWEEP = "eplb_sweep"


def _source() -> ui.ScenarioSource | None:
    extra = {}
    last = st.session_state.get("scenario_run")
    if last:
        extra[FROM_SCENARIO_PAGE] = ui.ScenarioSource(last["text"], last["where"], last["base_dir"],
                                                      last["overrides"])
    choices = data.eplb_scenarios()
    return ui.scenario_source("eplb", default="eplb_redundancy_32gpu", choices=choices, extra=extra)


def run_form(scenario, key: str) -> dict | None:
    """EPLB settings of the run; on submit, overrides (merged over the source's own)."""
    d, w = scenario.deployment, scenario.workload
    with st.form(f"{key}_form"):
        cols = st.columns(6)
        every = ui.number_input(cols[0], "rebalance every N forward passes",
                                int(d.eplb_rebalance_num_iterations), min_value=1, step=1,
                                key=f"{key}_every")
        window = ui.number_input(cols[1], "statistics window (passes)",
                                 int(d.expert_distribution_recorder_buffer_size), min_value=1, step=1,
                                 key=f"{key}_window")
        duration = ui.number_input(cols[2], "simulated seconds", float(w.duration_s), min_value=0.001,
                                   key=f"{key}_dur")
        warmup = ui.number_input(cols[3], "warm-up seconds", float(w.warmup_s), min_value=0.0,
                                 key=f"{key}_warm")
        stop = cols[4].checkbox("stop the world", d.eplb_stop_the_world, key=f"{key}_stw",
                                help="off: one chunk of layers moves per later forward pass")
        enable = cols[5].checkbox("enable EPLB", True, key=f"{key}_on",
                                  help="off: the static placement, for comparison")
        submitted = st.form_submit_button("Run with EPLB", type="primary")
    if not submitted:
        return None
    return {"deployment.enable_eplb": bool(enable),
            "deployment.eplb_rebalance_num_iterations": int(every),
            "deployment.expert_distribution_recorder_buffer_size": int(window),
            "deployment.eplb_stop_the_world": bool(stop), "workload.duration_s": float(duration),
            "workload.warmup_s": float(warmup)}


def _events(view) -> list[dict]:
    out = [{"at_s": e["at_s"], "event": "rebalance", "reason": e["reason"],
            "balancedness after": round(e["balancedness_after"], 3)} for e in view.rebalances]
    out += [{"at_s": e["at_s"], "event": e["kind"], "reason": f"rank {e.get('rank', '?')}",
             "balancedness after": float("nan")} for e in view.elastic_events]
    return out


def over_time(view) -> None:
    s = view.summary
    eplb = s.get("eplb", {})
    cols = st.columns(5)
    cols[0].metric("rebalances", f"{eplb.get('num_rebalances', 0)}")
    cols[1].metric("stalled", ui.fmt(eplb.get("stall_us_total", 0.0) * 1e-6, ".3f", " s"))
    cols[2].metric("weights moved", ui.fmt(eplb.get("moved_bytes_total", 0.0) / 1e9, ".0f", " GB"))
    cols[3].metric("balancedness per step", ui.fmt(s["balancedness"], ".3f"))
    before, after = eplb.get("balancedness_before_mean"), eplb.get("balancedness_after_mean")
    cols[4].metric("window balancedness after", ui.fmt(after, ".3f"),
                   delta=None if before is None else f"{after - before:+.3f} vs before",
                   help="the statistics window's loads on the new placement against the old one, "
                        "mean over rebalances")
    events = _events(view)
    st.markdown("**Balancedness per step** (mean/max GPU load; rebalances dashed, stop-the-world stalls shaded)")
    st.altair_chart(charts.over_time(view.steps["t_s"], view.steps["balancedness"],
                                     "balancedness (mean/max)", events, view.stalls), width="stretch")
    st.markdown("**Step time**")
    st.altair_chart(charts.over_time(view.steps["t_s"], view.steps["step_ms"], "step time (ms)", events,
                                     view.stalls, y_zero=True), width="stretch")
    left, right = st.columns(2)
    per = left.radio("Heatmap of load", ["per EP rank", "per expert"], horizontal=True, key="eplb_per")
    num_layers = view.rank_pairs.shape[1]
    layer = right.selectbox("MoE layer", ["all layers summed"] + list(range(num_layers)), key="eplb_layer")
    layer = None if layer == "all layers summed" else int(layer)
    share = data.rank_share(view, layer) if per == "per EP rank" else data.expert_share(view, layer)
    column = "EP rank" if per == "per EP rank" else "expert"
    window_s = view.window_t_s[1] - view.window_t_s[0] if len(view.window_t_s) > 1 else 0.0
    st.markdown(f"**Load {per} over time** (tokens routed / the mean {column}, in "
                f"{number(float(window_s), 2)} s windows; red = busier than average)")
    st.altair_chart(charts.heatmap(view.window_t_s, share, column), width="stretch")
    if view.rebalances:
        st.markdown("**Rebalances**")
        st.dataframe(ui.human_columns(pd.DataFrame([{
            "at (s)": e["at_s"], "reason": e["reason"], "window (passes)": e["window_steps"],
            "balancedness before": e["balancedness_before"], "after": e["balancedness_after"],
            "changed slots": e["changed_slots"], "moved (GB)": e["moved_bytes"] / 1e9,
            "stall (ms)": e["stall_us"] * 1e-3, "spread (ms)": e["spread_us"] * 1e-3,
            "chunks": e["num_chunks"], "done (s)": e["done_s"]} for e in view.rebalances])),
            hide_index=True, width="stretch")
    if view.stalls:
        st.markdown("**Stalls** (serving paused)")
        st.dataframe(ui.human_columns(pd.DataFrame([{"start (s)": a * 1e-6, "length (ms)": b * 1e-3,
                                                     "cause": c} for a, b, c in view.stalls])),
                     hide_index=True, width="stretch")


@st.cache_data(show_spinner="pricing rebalances and failures...", max_entries=16)
def _resilience(text: str, where: str, base_dir: str, overrides: str) -> dict:
    from epsim.plan.resilience import resilience_columns
    return resilience_columns(data.parse_scenario(text, where, base_dir, overrides))


def resilience_section(source: ui.ScenarioSource, scenario) -> None:
    """Rebalance stall seconds per hour, interruption per GPU failure and goodput at a stated
    failure rate, from the scenario alone (no run)."""
    st.subheader("Rebalances and GPU failures per hour")
    st.caption("From the scenario's steady decode step and its skew model's drift, without a run: one "
               "rebalance priced term by term as SGLang runs it (gather, algorithm, dispatch map, "
               "per-layer plans and weight moves), and one GPU failure as SGLang with Mooncake EP "
               "recovers (dispatch timeout, reloads, rebalance over the survivors; without elastic EP "
               "the instance restarts). Goodput counts the stalls, the interruptions, the capacity "
               "missing while a rank is away and the work of lost requests done again.")
    d = scenario.deployment
    with st.form("eplb_resilience_form"):
        cols = st.columns(3)
        rate = cols[0].number_input("GPU failures per GPU-hour", min_value=0.0,
                                    value=float(d.failures_per_gpu_hour or 1e-4), format="%g",
                                    key="eplb_failure_rate")
        repair = cols[1].number_input("repair time (s)", min_value=1.0, value=float(d.failure_repair_s),
                                      key="eplb_repair_s",
                                      help="until a failed rank rejoins (elastic EP) or the instance restarts")
        every = cols[2].number_input("rebalance every N forward passes", min_value=1,
                                     value=int(d.eplb_rebalance_num_iterations), step=1,
                                     key="eplb_res_interval")
        st.form_submit_button("Price")
    overrides = json.dumps({**json.loads(source.overrides), "deployment.enable_eplb": True,
                            "deployment.failures_per_gpu_hour": float(rate),
                            "deployment.failure_repair_s": float(repair),
                            "deployment.eplb_rebalance_num_iterations": int(every)}, sort_keys=True)
    try:
        row = _resilience(source.text, source.where, source.base_dir, overrides)
    except EpsimError as exc:
        st.error(str(exc))
        return
    cols = st.columns(4)
    cols[0].metric("rebalance stall", ui.fmt(row["rebalance_stall_s"], ".2f", " s"))
    cols[1].metric("rebalance stalls per hour", ui.fmt(row["rebalance_stall_s_per_hour"], ".1f", " s"))
    cols[2].metric("interruption per GPU failure", ui.fmt(row["failure_interruption_s"], ".1f", " s"))
    cols[3].metric("goodput", ui.fmt(row["goodput_frac"] * 100, ".2f", " %"))
    st.caption(f"{ui.fmt(row['rebalances_per_hour'], '.1f')} rebalances per hour; balancedness "
               f"{ui.fmt(row['balancedness_fresh'], '.3f')} fresh, {ui.fmt(row['balancedness_stale'], '.3f')} "
               f"after an interval of drift; {ui.fmt(row['failures_per_hour'], '.3g')} failures per hour, "
               f"each costing {ui.fmt(row['failure_lost_s'], '.1f')} instance-seconds (interruption, "
               f"capacity while the rank is away, lost work done again)")


def _intervals(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise SpecError(f"intervals ({text!r}) must be positive integers separated by commas, e.g. 25,50,100")
    return values


def sweep_section(source: ui.ScenarioSource, overrides: dict, scenario) -> None:
    st.subheader("Rebalance interval sweep")
    st.caption("The same scenario at several `eplb_rebalance_num_iterations`, and once without EPLB: "
               "rebalancing often pays the weight moves often; rarely, the placement goes stale.")
    with st.form("eplb_sweep_form"):
        cols = st.columns(4)
        text = cols[0].text_input("intervals (forward passes)", "25,50,100,200,400", key="eplb_intervals")
        duration = ui.number_input(cols[1], "simulated seconds per run",
                                   float(scenario.workload.duration_s), min_value=0.001,
                                   key="eplb_sweep_dur")
        warmup = ui.number_input(cols[2], "warm-up seconds", float(scenario.workload.warmup_s),
                                 min_value=0.0, key="eplb_sweep_warm")
        workers = cols[3].number_input("processes", min_value=1, max_value=64,
                                       value=min(2, _cpus()), step=1, key="eplb_workers")
        if st.form_submit_button("Run interval sweep"):
            merged = {**overrides, "deployment.enable_eplb": True, "workload.duration_s": float(duration),
                      "workload.warmup_s": float(warmup)}
            try:
                params = {"source": source, "overrides": json.dumps(merged, sort_keys=True),
                          "intervals": _intervals(text), "workers": int(workers)}
                data.parse_scenario(source.text, source.where, source.base_dir, params["overrides"])
            except EpsimError as exc:
                st.error(str(exc))
            else:
                st.session_state[SWEEP] = params
    params = st.session_state.get(SWEEP)
    if params is None:
        return
    src = params["source"]
    rows, baseline, best = data.interval_sweep(src.text, src.where, src.base_dir, params["overrides"],
                                               params["intervals"], params["workers"])
    gain = (best["output_tokens_per_s_per_gpu"] / baseline["output_tokens_per_s_per_gpu"] - 1
            if baseline and baseline["output_tokens_per_s_per_gpu"] > 0 else None)
    if gain is not None and gain <= 0:
        # as scenarios/eplb_interval_drift.py answers: no interval beats serving without EPLB
        st.warning(f"turn EPLB off: no interval swept beats serving without it (the best, every "
                   f"{best['interval']} forward passes, gives {best['output_tokens_per_s_per_gpu']:.0f} "
                   f"output tokens/s/GPU, {gain:+.1%} against no EPLB)")
    else:
        st.success(f"best: rebalance every {best['interval']} forward passes, "
                   f"{best['output_tokens_per_s_per_gpu']:.0f} output tokens/s/GPU"
                   + (f" ({gain:+.1%} over no EPLB)" if gain is not None else ""))
    overloaded = [r for r in rows + ([baseline] if baseline else []) if not r.get("keeps_up", True)]
    if overloaded:
        st.warning(f"{len(overloaded)} run(s) do not keep up with the offered load: "
                   + "; ".join(f"{'every ' + str(r['interval']) if r['enable_eplb'] else 'no EPLB'}: "
                               f"{r['keep_up']}" for r in overloaded))
    for row in rows:
        row["weight-move time (s)"] = row["stall_s"] + row["spread_s"]
    cols = st.columns(3)
    for col, (metric, label) in zip(cols, (("output_tokens_per_s_per_gpu", "output tokens/s/GPU"),
                                           ("balancedness", "balancedness per step"),
                                           ("weight-move time (s)", "weight-move time (s)"))):
        col.altair_chart(charts.interval_sweep(rows, baseline if metric in baseline else None, metric, label),
                         width="stretch")
    every = rows + ([baseline] if baseline else [])
    table = pd.DataFrame(every).drop(columns=["enable_eplb", "keep_up"], errors="ignore")
    table["interval"] = [f"every {r['interval']}" if r["enable_eplb"] else "no EPLB" for r in every]
    st.dataframe(ui.human_columns(table.rename(columns={"interval": "rebalance"})), hide_index=True,
                 width="stretch")


def _cpus() -> int:
    from epsim.plan.executors import default_workers
    return default_workers()


def page() -> None:
    st.title("EPLB over time")
    st.caption("Expert-parallel load balancing in the simulator: the load each rank and expert sees over "
               "time, the rebalances (SGLang's EPLB manager) and what they cost.")
    source = _source()
    if source is None:
        return
    run = st.session_state.get(RUN)
    if run is not None and run["source"].digest != source.digest:
        # another scenario (or its text edited): the last run and sweep answer another question
        st.session_state.pop(RUN)
        st.session_state.pop(SWEEP, None)
        st.info("The scenario changed: the previous run and interval sweep were cleared.")
    try:
        scenario = data.parse_scenario(source.text, source.where, source.base_dir, source.overrides)
    except EpsimError as exc:
        st.error(str(exc))
        return
    if not scenario.deployment.enable_eplb:
        st.info(f"{scenario.name} has EPLB off; the run below turns it on (untick 'enable EPLB' to compare).")
    resilience_section(source, scenario)
    changed = run_form(scenario, f"eplb_{source.digest}")
    if changed is not None:
        merged = {**json.loads(source.overrides), **changed}
        if not merged["deployment.enable_eplb"]:
            merged["deployment.ep_num_redundant_experts"] = 0     # redundant slots need EPLB
        overrides = json.dumps(merged, sort_keys=True)
        try:
            data.parse_scenario(source.text, source.where, source.base_dir, overrides)  # fail here, not mid-run
        except EpsimError as exc:
            st.error(str(exc))
        else:
            st.session_state[RUN] = {"source": source, "overrides": overrides}
            st.session_state.pop(SWEEP, None)        # a sweep of the previous settings is stale
    run = st.session_state.get(RUN)
    if run is None:
        st.info("Set the EPLB options and press 'Run with EPLB'.")
        return
    src = run["source"]
    view = data.run_scenario(src.text, src.where, src.base_dir, run["overrides"])
    st.subheader(f"{view.summary['scenario']['name']}: {view.summary['sim_seconds']:g} simulated s, "
                 f"{view.summary['num_steps']} steps")
    for warning in view.warnings:
        st.warning(warning)
    keep = view.summary["keep_up"]
    (st.caption if keep["ok"] and keep.get("settled", True) else st.warning)(
        f"keep-up: {keep['verdict']}")
    note = view.summary.get("eplb", {}).get("note")
    if note:
        st.info(note)
    over_time(view)
    sweep_section(src, json.loads(run["overrides"]), data.parse_scenario(src.text, src.where, src.base_dir,
                                                                         run["overrides"]))


with ui.guarded():
    page()
