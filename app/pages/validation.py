"""Predicted vs measured page: a calibration profile's predictions against measured records
(`epsim.validate`), from the shipped profile and records, the last local calibration, or
uploads: the scatter, curves per kind over tokens per rank with p10-p90 bands, the error
tables; filters by backend, kind, skew, model and split."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app import charts, data, ui
from epsim.errors import EpsimError

SHIPPED = "shipped profile and records (epsim/data)"
LOCAL = "last local calibration (runs/calibrate)"
UPLOAD = "upload records and a profile"


def _files(paths: list[Path]) -> tuple[tuple[str, Path], ...]:
    return tuple((p.name, p) for p in paths)


def inputs() -> tuple[tuple, tuple] | None:
    """(record files, profile file), each (name, bytes or Path), from the source the user picks."""
    shipped_records, shipped_profile = data.shipped_validation_files()
    local_records, local_profile = data.local_calibration_files()
    options = ([SHIPPED] if shipped_records and shipped_profile else []) + \
              ([LOCAL] if local_records and local_profile else []) + [UPLOAD]
    origin = st.radio("Records and profile", options, horizontal=True, key="val_origin")
    if origin == SHIPPED:
        return _files(shipped_records), _files([shipped_profile])[0]
    if origin == LOCAL:
        return _files(local_records), _files([local_profile])[0]
    if SHIPPED not in options:
        st.info("No measured profile and records ship in this install yet. Measure your own "
                "(`epsim calibrate --live --quick --cpu` runs on CPU ranks without a GPU; the "
                "files land in runs/calibrate/, which this page then offers) or upload them.")
    left, right = st.columns(2)
    records = left.file_uploader("Measurement records (JSON Lines)", type=["jsonl", "json"],
                                 accept_multiple_files=True, key="val_records")
    profile = right.file_uploader("Calibration profile (JSON)", type=["json"], key="val_profile")
    if not records or profile is None:
        st.info("Upload one or more record files (`epsim calibrate --records-out`) and the profile "
                "fitted on them (`epsim calibrate --out`).")
        return None
    return tuple((r.name, r.getvalue()) for r in records), (profile.name, profile.getvalue())


def frame_of(rows: list) -> pd.DataFrame:
    return pd.DataFrame({
        "where": [r.where for r in rows], "split": [r.split for r in rows],
        "backend": [r.backend for r in rows], "kind": [r.kind for r in rows],
        "model": [r.model for r in rows], "dtype": [r.dispatch_dtype for r in rows],
        "skew": [r.skew for r in rows], "tokens per rank": [r.tokens for r in rows],
        "measured µs": [r.measured_us for r in rows], "predicted µs": [r.predicted_us for r in rows],
        "error %": [r.error_pct for r in rows], "p10 µs": [r.p10_us for r in rows],
        "p90 µs": [r.p90_us for r in rows], "outside fitted range": [r.outside for r in rows],
        "series": [f"{r.model} {r.dispatch_dtype} {r.skew}" for r in rows]})


def filters(rows: list) -> list:
    """Multiselects over backend, kind, skew, model and split; the rows that pass."""
    fields = [("backend", "backend"), ("kind", "kind"), ("skew", "skew"), ("model", "model"),
              ("split", "fit set / held out")]
    cols = st.columns(len(fields))
    chosen = {}
    for col, (field, label) in zip(cols, fields):
        values = sorted({getattr(r, field) for r in rows}, key=lambda v: (
            charts.KIND_ORDER.index(v) if field == "kind" and v in charts.KIND_ORDER else 99, str(v)))
        chosen[field] = set(col.multiselect(label, values, default=values, key=f"val_f_{field}"))
    return [r for r in rows if all(getattr(r, f) in chosen[f] for f, _ in fields)]


def error_table(rows: list) -> pd.DataFrame:
    from epsim.validate import group
    return pd.DataFrame([{"split": split, "backend": backend, "kind": kind, "records": s.num,
                          "MAPE %": round(s.mape, 1), "worst %": round(s.worst, 1), "worst at": s.worst_at,
                          "bias %": round(s.bias, 1)}
                         for (split, backend, kind), s in group(rows, "split", "backend", "kind").items()])


def page() -> None:
    st.title("Predicted vs measured")
    st.caption("Every record the cost models predict, predicted with the simulator's own formulas from "
               "the record's counts. Held-out records were not used to fit the profile.")
    chosen = inputs()
    if chosen is None:
        return
    try:
        records, profile = chosen
        view = data.validation(data.files_key([*records, profile]), records, profile)
    except EpsimError as exc:
        st.error(str(exc))
        return
    if view.warnings:
        with st.expander(f"{len(view.warnings)} warning(s): records skipped or extrapolated"):
            for warning in view.warnings:
                st.text(warning)
    rows = filters(view.rows)
    if not rows:
        st.warning("No record matches the filters.")
        return
    held = [r for r in rows if r.split == "holdout"]
    fit = [r for r in rows if r.split == "fit"]
    cols = st.columns(4)
    cols[0].metric("records shown", f"{len(rows)}")
    cols[1].metric("held-out MAPE", ui.fmt(sum(r.ape for r in held) / len(held) if held else None, ".1f", " %"))
    cols[2].metric("fit-set MAPE", ui.fmt(sum(r.ape for r in fit) / len(fit) if fit else None, ".1f", " %"))
    cols[3].metric("worst error", ui.fmt(max(r.ape for r in rows), ".1f", " %"))
    frame = frame_of(rows)
    left, right = st.columns([2, 3])
    left.markdown("**Predicted against measured** (filled: held out; dotted: ±10%)")
    left.altair_chart(charts.predicted_vs_measured(frame), width="stretch")
    right.markdown("**Error by split, backend and kind**")
    right.dataframe(error_table(rows), hide_index=True, width="stretch")
    st.markdown("**Curves per kind over tokens per rank**: measured median with p10-p90 bars (points), "
                "predicted (lines), one color per shape, dtype and skew")
    for backend in sorted({r.backend for r in rows}):
        st.markdown(f"*{backend}*")
        st.altair_chart(charts.curves_by_kind(frame[frame["backend"] == backend]), width="content")
    with st.expander("Every comparison"):
        shown = frame.drop(columns=["series"])
        st.dataframe(shown, hide_index=True, width="stretch")
        st.download_button("comparisons.csv", shown.to_csv(index=False), file_name="comparisons.csv",
                           mime="text/csv", on_click="ignore")
    with st.expander("The error tables as `epsim validate` prints them (all records, no filters)"):
        st.markdown(view.markdown)


with ui.guarded():
    page()
