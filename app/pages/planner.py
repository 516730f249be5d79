"""Planner page: a sweep's results (`epsim plan`), run here or loaded from a results.csv; the
Pareto frontier of GPUs against TPOT, TTFT and throughput with the SLO targets drawn, and the
cheapest configuration that meets the SLO and keeps up with its load, one answer per workload
point (`epsim.plan`: constraints, keep-up, objectives, frontier, answers)."""

from __future__ import annotations

import streamlit as st

from app import charts, data, ui
from epsim.plan.choice import row_status
from epsim.plan.select import DEFAULT_OBJECTIVES

RUN = "run a small sweep here"
LOAD = "load a results table (results.csv of `epsim plan --out`)"
TABLE = "plan_table"
CHEAPEST_BY = {"num_gpus": "fewest GPUs", "cost_per_hour": "lowest cost per hour",
               "cost_per_million_output_tokens": "lowest cost per million output tokens"}
SHOWN = ["num_gpus", "tpot_ms.p99", "ttft_ms.p99", "slo_margin", "keep_up.served_frac", "keep_up.backlog_growth_rps",
         "keep_up.settled", "initial_running_per_rank", "throughput_tokens_per_s_per_gpu",
         "output_tokens_per_s_per_gpu", "cost_per_million_output_tokens", "hbm_headroom_gib",
         "provenance.measured_share", "provenance.datasheet_share", "error"]
RATE_KEY = "workload.arrivals.rate_per_s"


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
        left, right = st.columns(2)
        workers = left.number_input("processes", min_value=1, max_value=64, value=min(2, _cpus()),
                                    step=1, key="plan_workers")
        warm = right.checkbox("start decode points at the screen's steady batch (`--warm-start`: "
                              "a short run then measures the steady state, not its fill)", False,
                              key="plan_warm")
        if st.form_submit_button("Run sweep", type="primary"):
            st.session_state[TABLE] = {"source": source, "sweeps": _lines(sweeps),
                                       "overrides": _lines(overrides), "workers": int(workers),
                                       "warm_start": bool(warm)}
    params = st.session_state.get(TABLE)
    if params is not None and params["source"].digest != source.digest:
        # another scenario (or its text edited): the last sweep answers a different question
        st.session_state.pop(TABLE)
        params = None
        st.info("The scenario changed: the previous sweep's results were cleared.")
    if params is None:
        st.info("Set the sweep and press 'Run sweep'.")
        return None
    src = params["source"]
    view = data.run_sweep(src.text, src.where, src.base_dir, params["sweeps"], params["overrides"],
                          params["workers"], params.get("warm_start", False))
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
    # the plan's rule (`epsim.plan.select.DEFAULT_OBJECTIVES`) with the cheapness chosen here
    return constraints, [f"min:{cheapest}", *DEFAULT_OBJECTIVES[1:]]


def point_label(row: dict, keys: list[str]) -> str:
    """What a chart point is, shortly: `EP 16 deepep` (its swept deployment values, EP size
    first) and `@ 200 req/s` when the rate is swept (one rate: the workload, said once above)."""
    ep = row.get("deployment.ep_size")
    parts = [f"EP {ep}" if ep is not None else f"{row['num_gpus']:g} GPUs"]
    parts += [str(row[k]) for k in keys if k != "deployment.ep_size" and k != RATE_KEY
              and not k.startswith("workload.")]
    rate = row.get(RATE_KEY)
    return " ".join(parts) + ("" if rate is None or rate != rate else f" @ {rate:.3g} req/s")


def _target(constraints, metric: str) -> float | None:
    bounds = [c.bound for c in constraints if c.metric == metric and c.op in ("<", "<=")]
    return min(bounds) if bounds else None


def answers(result) -> None:
    """The answer per workload point, with its keep-up margin and measured share."""
    from epsim.plan.answers import answer_line
    from epsim.plan.choice import rejected
    from epsim.plan.select import keep_up_statement, rule_text
    if len(result.answers) > 1:
        st.markdown("**One answer per workload point** (the workload is given, not chosen):")
        for answer in result.answers:
            (st.success if answer.best is not None else st.warning)(answer_line(result, answer))
    elif result.best is not None:
        row = result.best_row
        st.success(f"Cheapest configuration meeting the SLO: **{result.describe(result.best)}** — "
                   f"{row['num_gpus']:g} GPUs, TPOT p99 {ui.fmt(row['tpot_ms.p99'], '.1f')} ms, TTFT p99 "
                   f"{ui.fmt(row['ttft_ms.p99'], '.0f')} ms, {ui.fmt(row['throughput_tokens_per_s_per_gpu'], '.0f')} "
                   f"tokens/s/GPU")
        st.caption(answer_line(result, result.answers[0]))
        cols = st.columns(5)
        cols[0].metric("GPUs", ui.fmt(row["num_gpus"], ".0f"))
        cols[1].metric("TPOT p99", ui.fmt(row["tpot_ms.p99"], ".1f", " ms"))
        cols[2].metric("TTFT p99", ui.fmt(row["ttft_ms.p99"], ".0f", " ms"))
        cols[3].metric("throughput / GPU", ui.fmt(row["throughput_tokens_per_s_per_gpu"], ".0f", " tok/s"))
        served = row.get("keep_up.served_frac")
        cols[4].metric("keep-up: served", ui.fmt(None if served is None else served * 100, ".1f", " %"),
                       help="share of the offered requests served in the window (>= 97 % to keep up)")
    elif result.infeasible:
        st.warning(result.infeasible)         # an answer, not an input error
    st.caption(f"Chosen {rule_text(result.objectives, result.constraints, result.keep_up)}.")
    if result.keep_up:
        st.caption(keep_up_statement(result.constraints))
    rejects = rejected(result)
    if rejects:
        with st.expander(f"Rejected points ({len(rejects)}) and why"):
            for i, why in rejects:
                st.text(f"{result.describe(i)}: {why}")


def show(result) -> None:
    from epsim.plan.uncertainty import band_columns
    frame = result.to_pandas()
    frame["configuration"] = [result.describe(i) for i in range(len(result.rows))]
    frame["label"] = [point_label(row, result.keys) for row in result.rows]
    frame["status"] = [row_status(row) for row in result.rows]
    answers(result)
    st.markdown(f"**Pareto frontier** of {', '.join(o.text for o in result.pareto)}"
                + (" within each workload point" if len(result.answers) > 1 else "")
                + f": {len(result.frontier)} of {len(result.rows)} point(s); the frontier keeps "
                  f"points that miss the SLO too (their shape says so). Bars: the p10-p90 band of "
                  f"the step time carried to the metric.")
    gpus = "GPUs (fewer is better)"
    # one chart per row, the page's full width: GPUs on a log axis, labels beside their points
    for metric, title, target, label in (
            ("tpot_ms.p99", "TPOT p99, ms (lower is better)", _target(result.constraints, "tpot_ms.p99"),
             "TPOT p99 target"),
            ("ttft_ms.p99", "TTFT p99, ms (lower is better)", _target(result.constraints, "ttft_ms.p99"),
             "TTFT p99 target"),
            ("throughput_tokens_per_s_per_gpu", "tokens/s per GPU (more is better)", None, "")):
        band = band_columns(result.rows, metric)
        st.altair_chart(charts.pareto(frame, "num_gpus", metric, gpus, title, target, label, band),
                        width="stretch")
    shown = [c for c in result.keys + SHOWN + ["status", "pareto", "best"] if c in frame.columns]
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
