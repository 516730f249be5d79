"""Compare page: two runs side by side (`epsim compare`, `epsim.report.compare`) -- a shipped or
uploaded scenario with changes, the Scenario page's last run, or an uploaded summary.json each:
what differs, TPOT/TTFT/throughput/serving numbers with B - A, and where the MoE layer's time
moved. "Mooncake or DeepEP, and why" is the default question."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app import charts, data, ui
from epsim.errors import EpsimError

SCENARIO = "shipped scenario with changes"
LAST_RUN = "the Scenario page's last run"
UPLOAD = "upload a summary.json"
COMPARED = "compare_runs"
DEFAULT_CHANGES = {"a": "deployment.moe_a2a_backend=mooncake", "b": "deployment.moe_a2a_backend=deepep"}


def side(key: str, column) -> dict | None:
    """One run's inputs from its column of widgets: a scenario and changes (run on compare), the
    Scenario page's last run, or an uploaded summary (None until the upload arrives)."""
    options = [SCENARIO] + ([LAST_RUN] if "scenario_run" in st.session_state else []) + [UPLOAD]
    with column:
        st.markdown(f"**Run {key.upper()}**")
        origin = st.radio("source", options, key=f"cmp_{key}_origin", label_visibility="collapsed")
        if origin == UPLOAD:
            upload = st.file_uploader("summary.json of `epsim simulate --out`", type=["json"],
                                      key=f"cmp_{key}_upload")
            return None if upload is None else {"summary": data.read_summary(upload.name, upload.getvalue()),
                                                "where": upload.name}
        if origin == LAST_RUN:
            return dict(st.session_state["scenario_run"])
        shipped = data.shipped_scenarios()
        name = st.selectbox("scenario", list(shipped), key=f"cmp_{key}_name")
        changes = st.text_area("changes, one `KEY=VALUE` per line (as `--set`)", DEFAULT_CHANGES[key],
                               height=90, key=f"cmp_{key}_changes")
        path = shipped[name]
        lines = tuple(x.strip() for x in changes.splitlines() if x.strip() and not x.strip().startswith("#"))
        return {"text": path.read_text(), "where": f"scenarios/{path.name}", "base_dir": str(data.SCENARIOS_DIR),
                "overrides": data.overrides_json(lines)}


def summary_of(run: dict) -> dict:
    if "summary" in run:
        return run["summary"]
    return data.run_scenario(run["text"], run["where"], run["base_dir"], run["overrides"]).summary


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """The rows as `epsim compare` prints them (each number to its own four digits)."""
    from epsim.report.compare import Row, cell, delta_cell
    return pd.DataFrame([{"": r["label"], "unit": r["unit"], "A": cell(r["a"]), "B": cell(r["b"]),
                          "B - A": delta_cell(Row(r["label"], r["unit"], r["a"], r["b"]))} for r in rows])


def _table(column, rows: list[dict]) -> None:
    column.dataframe(rows_frame(rows), hide_index=True, width="stretch", height=35 * (len(rows) + 1) + 3)


def show(a: dict, b: dict) -> None:
    from epsim.report.compare import comparison
    result = comparison(a, b)
    st.subheader("A against B")
    st.markdown(f"**A** {result['a']}  \n**B** {result['b']}")
    differs = result["differs"]
    st.caption("Differs: " + ("; ".join(f"`{d['field']}` {d['a']} → {d['b']}" for d in differs[:10])
                              if differs else "nothing in the scenarios (the same run twice?)"))
    st.success(f"Why: {result['why']}")
    for name, summary in (("A", a), ("B", b)):
        keep = summary["keep_up"]
        (st.caption if keep["ok"] or keep.get("saturated_by_design") else st.warning)(
            f"keep-up {name}: {keep['verdict']}")
    left, right = st.columns([3, 2])
    left.markdown("**Latency, throughput and serving numbers**")
    _table(left, result["metrics"])
    right.markdown("**MoE layer, mean µs per layer and step**")
    _table(right, result["layer_us"])
    st.markdown("**Where a MoE layer's time goes in A and B** (mean µs per layer and step)")
    st.altair_chart(charts.layer_compare(result["layer_us"]), width="stretch")
    st.download_button("comparison.json", json.dumps(result, indent=1), file_name="comparison.json",
                       mime="application/json", on_click="ignore")


def page() -> None:
    st.title("Compare")
    st.caption("Two runs side by side, as `epsim compare RUN_A RUN_B`: by default the default scenario "
               "over Mooncake EP against DeepEP -- which is faster, and where the time moves.")
    left, right = st.columns(2)
    a, b = side("a", left), side("b", right)
    if st.button("Compare", type="primary"):
        if a is None or b is None:
            st.info("Upload both summaries first.")
        else:
            st.session_state[COMPARED] = (a, b)
    chosen = st.session_state.get(COMPARED)
    if chosen is None:
        st.info("Choose the two runs and press 'Compare'.")
        return
    try:
        summaries = [summary_of(run) for run in chosen]
    except EpsimError as exc:
        st.error(str(exc))
        return
    show(*summaries)


with ui.guarded():
    page()
