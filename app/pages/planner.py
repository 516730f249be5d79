"""Planner page: a sweep's results (`epsim plan`), run here or loaded from a results.csv; the
Pareto frontier of GPUs against TPOT and throughput, and the cheapest configuration that meets
an SLO (`epsim.plan`: constraints, objectives, frontier)."""

from __future__ import annotations

import streamlit as st

from app import charts, data, ui

RUN = "run a small sweep here"
LOAD = "load a results table (results.csv of `epsim plan --out`)"
TABLE = "plan_table"
CHEAPEST_BY = {"num_gpus": "fewest GPUs", "cost_per_hour": "lowest cost per hour",
               "cost_per_million_output_tokens": "lowest cost per million output tokens"}
SHOWN = ["num_gpus", "tpot_ms.p99", "ttft_ms.p99", "throughput_tokens_per_s_per_gpu",
         "output_tokens_per_s_per_gpu", "cost_per_million_output_tokens", "hbm_headroom_gib", "error"]


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def sweep_table():
    """(rows, columns, keys) of the sweep to choose among, from a run here or an upload."""
    mode = st.radio("Results", [RUN, LOAD], horizontal=True, key="plan_mode")
    if mode == LOAD:
        upload = st.file_uploader("results.csv", type=["csv"], key="plan_upload")
        if upload is None:
            st.info("Upload the results.csv that `epsim plan SCENARIO --sweep ... --out DIR` wrote to DIR.")
            return None
        return data.read_results_table(upload.name, upload.getvalue())
    source = ui.scenario_source("plan", default="qwen235b_h200_decode")
    if source is None:
        return None
    with st.form("plan_form"):
        left, right = st.columns(2)
        sweeps = left.text_area("Sweeps, one `KEY=V1,V2,...` per line (ranges: `8:128:x2`, `0:64:+16`)",
                                "deployment.ep_size=8,16,32,64",
                                height=120, key="plan_sweeps")
        overrides = right.text_area("Changes for every point, one `KEY=VALUE` per line (shorter runs "
                                    "sweep faster)", "# workload.duration_s=10",
                                    height=120, key="plan_overrides")
        workers = st.number_input("processes", min_value=1, max_value=64, value=min(2, _cpus()), step=1,
                                  key="plan_workers")
        if st.form_submit_button("Run sweep", type="primary"):
            st.session_state[TABLE] = {"source": source, "sweeps": _lines(sweeps),
                                       "overrides": _lines(overrides), "workers": int(workers)}
    params = st.session_state.get(TABLE)
    if params is None:
        st.info("Set the sweep and press 'Run sweep'.")
        return None
    src = params["source"]
    view = data.run_sweep(src.text, src.where, src.base_dir, params["sweeps"], params["overrides"],
                          params["workers"])
    st.caption(f"{len(view.rows)} point(s) simulated in {view.wall_s:.1f} s"
               + (f"; {len(view.skipped)} skipped as invalid" if view.skipped else ""))
    if view.skipped:
        with st.expander("Skipped points"):
            for line in view.skipped:
                st.text(line)
    from epsim.commands.output import merge_notes, without_category
    for message in merge_notes(without_category(m) for m in view.warnings):   # one line for all EP sizes
        st.warning(message)
    return view.rows, view.columns, view.keys


def slo_inputs(columns: list[str]) -> tuple[list[str], list[str]]:
    """Constraints and objectives from the SLO widgets."""
    st.subheader("Service-level objective")
    cols = st.columns(4)
    tpot = cols[0].number_input("TPOT p99 ≤ (ms; 0 = any)", min_value=0.0, value=50.0, key="plan_tpot")
    ttft = cols[1].number_input("TTFT p99 ≤ (ms; 0 = any)", min_value=0.0, value=2000.0, key="plan_ttft")
    cheapest = cols[2].selectbox("cheapest by", [c for c in CHEAPEST_BY if c in columns],
                                 format_func=CHEAPEST_BY.get, key="plan_cheapest")
    hbm = cols[3].checkbox("must fit in HBM", True, key="plan_hbm") and "hbm_headroom_gib" in columns
    extra = st.text_input("more constraints, comma-separated (e.g. `e2e_ms.p99<=8000, busy_frac<=0.9`)",
                          "", key="plan_extra")
    constraints = ([f"tpot_ms.p99<={tpot:g}"] if tpot > 0 else []) + \
                  ([f"ttft_ms.p99<={ttft:g}"] if ttft > 0 else []) + \
                  (["hbm_headroom_gib>=0"] if hbm else []) + [c.strip() for c in extra.split(",") if c.strip()]
    return constraints, [f"min:{cheapest}", "max:throughput_tokens_per_s_per_gpu"]


def show(result) -> None:
    frame = result.to_pandas()
    frame["configuration"] = [result.describe(i) for i in range(len(result.rows))]
    if result.best is not None:
        row = result.best_row
        st.success(f"Cheapest configuration meeting the SLO: **{result.describe(result.best)}** — "
                   f"{row['num_gpus']:g} GPUs, TPOT p99 {ui.fmt(row['tpot_ms.p99'], '.1f')} ms, TTFT p99 "
                   f"{ui.fmt(row['ttft_ms.p99'], '.0f')} ms, {ui.fmt(row['throughput_tokens_per_s_per_gpu'], '.0f')} "
                   f"tokens/s/GPU")
        cols = st.columns(4)
        cols[0].metric("GPUs", ui.fmt(row["num_gpus"], ".0f"))
        cols[1].metric("TPOT p99", ui.fmt(row["tpot_ms.p99"], ".1f", " ms"))
        cols[2].metric("TTFT p99", ui.fmt(row["ttft_ms.p99"], ".0f", " ms"))
        cols[3].metric("throughput / GPU", ui.fmt(row["throughput_tokens_per_s_per_gpu"], ".0f", " tok/s"))
    elif result.infeasible:
        st.warning(result.infeasible)         # an answer, not an input error
    st.markdown(f"**Pareto frontier** of {', '.join(o.text for o in result.pareto)}: "
                f"{len(result.frontier)} of {len(result.rows)} point(s)")
    left, right = st.columns(2)
    left.altair_chart(charts.pareto(frame, "num_gpus", "tpot_ms.p99", "GPUs", "TPOT p99 (ms)"), width="stretch")
    right.altair_chart(charts.pareto(frame, "num_gpus", "throughput_tokens_per_s_per_gpu", "GPUs",
                                     "throughput per GPU (tokens/s)"), width="stretch")
    shown = [c for c in result.keys + SHOWN + ["feasible", "pareto", "best"] if c in frame.columns]
    st.dataframe(ui.human_columns(frame[shown]), hide_index=True, width="stretch")
    st.download_button("results.csv", data.results_csv(result.rows, result.columns), file_name="results.csv",
                       mime="text/csv", on_click="ignore")


def _cpus() -> int:
    from epsim.plan.executors import default_workers
    return default_workers()


def page() -> None:
    st.title("Planner")
    st.caption("Sweep deployment choices and pick the cheapest configuration that meets your latency "
               "targets (what `epsim plan` does on the command line).")
    table = sweep_table()
    if table is None:
        return
    rows, columns, keys = table
    constraints, objectives = slo_inputs(columns)
    show(data.choose(rows, columns, keys, constraints, objectives))


with ui.guarded():
    page()
