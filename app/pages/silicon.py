"""Silicon page: epsim held to the field's measured deployments (the silicon sample of
aiconfigurator-core, issue 39) beside AIConfigurator, from the recorded whole-set run or an
uploaded `epsim validate --silicon --json`: the headline on the rows both predict, predicted
against measured TPOT and TTFT, the named gaps and the buckets above target, every prediction."""

from __future__ import annotations

import streamlit as st

from app import charts, silicon_data, ui
from epsim.validate.silicon import report

RECORDED = "recorded whole-set run (benchmarks/results/silicon_rows.json.gz)"
UPLOAD = "upload a run"


def inputs() -> tuple[str, bytes | None] | None:
    """(name, bytes) of an upload, (name, None) for the recorded run, None until an upload."""
    options = ([RECORDED] if silicon_data.RECORDED.exists() else []) + [UPLOAD]
    origin = st.radio("Silicon run", options, horizontal=True, key="sil_origin")
    if origin == RECORDED:
        return RECORDED, None
    upload = st.file_uploader("The JSON of `epsim validate --silicon --json` (or the silicon_rows.json.gz "
                              "that `--out` writes)", type=["json", "gz"], key="sil_upload")
    if upload is None:
        st.info("Run `epsim validate --silicon --json > rows.json` (with `aiconfigurator-core` "
                "installed: `pip install 'epsim[peer]'`), then upload rows.json.")
        return None
    return upload.name, upload.getvalue()


def headline(view: silicon_data.SiliconView) -> None:
    """Coverage and the errors on the rows both predict, the issue's targets beside them."""
    entries = view.entries
    ours = [e for e in entries if report.status(e, "epsim") == "predicted"]
    theirs = [e for e in entries if report.status(e, "peer") == "predicted"]
    both = [e for e in ours if report.status(e, "peer") == "predicted"]
    cols = st.columns(4)
    cols[0].metric("epsim predicts", f"{len(ours)} of {len(entries)}",
                   help="rows predicted as they state them (approximated rows are apart)")
    cols[1].metric("the peer predicts", f"{len(theirs)} of {len(entries)}" if view.peer else "not run",
                   help=f"{view.peer}" if view.peer else None)
    for col, metric, label, target in ((cols[2], "tpot_ms", "TPOT", report.TPOT_TARGET_PCT),
                                       (cols[3], "ttft_ms", "TTFT", report.TTFT_TARGET_PCT)):
        ours_mape, peer_mape = report.errors(both, "epsim", metric)[1], report.errors(both, "peer", metric)[1]
        col.metric(f"{label} MAPE, rows both predict", ui.fmt(ours_mape, ".1f", " %"),
                   delta=None if peer_mape is None else f"peer {peer_mape:.1f} %", delta_color="off",
                   help=f"{len(both)} rows; issue 39's target: <= {target:.0f} % and below the peer")


def filters(frame):
    """Pills over system, mode and predictor, and the named gap; the rows that pass."""
    box = st.expander("Filters (every prediction shown until you narrow them)", expanded=True)
    chosen = {}
    for column in ("system", "mode", "who"):
        values = sorted(set(frame[column]), key=lambda v: (
            report.SYSTEM_ORDER.index(v) if v in report.SYSTEM_ORDER else 99, v))
        chosen[column] = box.pills(column, values, selection_mode="multi", default=values,
                                   key=f"sil_f_{column}")
    gaps = sorted({g for cell in frame["gaps"] for g in cell.split("; ")})
    gap = box.selectbox("named gap", ["any"] + gaps, key="sil_f_gap")
    keep = frame[frame["system"].isin(chosen["system"]) & frame["mode"].isin(chosen["mode"])
                 & frame["who"].isin(chosen["who"])]
    return keep if gap == "any" else keep[keep["gaps"].str.split("; ").apply(lambda g: gap in g)]


def page() -> None:
    st.title("Held to silicon")
    st.caption("Each in-scope SGLang row of the silicon sample (aiconfigurator-core, measured "
               "deployments) as epsim and the peer, AIConfigurator, predict it: TPOT and TTFT as the "
               "benchmark defines them (means over requests), host and device time together. The rows "
               "are validation only: nothing is fitted on them.")
    chosen = inputs()
    if chosen is None:
        return
    with st.spinner("Reading the silicon run"):
        view = silicon_data.load(*chosen)
    st.info(f"**Run** `{view.command or 'not stated'}`; peer: {view.peer or 'not run'}")
    headline(view)
    frame = filters(view.frame)
    if frame.empty:
        st.warning("No prediction matches the filters.")
        return
    st.markdown("**Predicted against measured** (filled: predicted as the row states it; hollow: "
                f"approximated, `--approximate`; dotted: the targets, ±{report.TPOT_TARGET_PCT:.0f} % TPOT "
                f"and ±{report.TTFT_TARGET_PCT:.0f} % TTFT)")
    # one per row: side by side at 1400 px each plot area was under 400 px, its points not apart
    st.altair_chart(charts.silicon_scatter(frame, "TPOT", report.TPOT_TARGET_PCT), width="stretch")
    st.altair_chart(charts.silicon_scatter(frame, "TTFT", report.TTFT_TARGET_PCT), width="stretch")
    st.markdown("**What epsim is known to miss** (every row of the run, whatever the filters): each named "
                "gap's rows against the rest, and the buckets above a target with the gaps their rows carry")
    if any("gaps" in e for e in view.entries):
        st.markdown("\n".join(report.gaps_table(view.entries)))
        st.markdown("\n".join(report.targets_table(view.entries)))
    else:
        st.caption("This run's rows carry no named gaps (it was made before epsim named them): run "
                   "`epsim validate --silicon --json` again to see them.")
    with st.expander(f"Every prediction ({len(frame)} shown)"):
        st.dataframe(frame, hide_index=True, width="stretch")
        st.download_button("silicon_predictions.csv", frame.to_csv(index=False),
                           file_name="silicon_predictions.csv", mime="text/csv", on_click="ignore")


with ui.guarded():
    page()
