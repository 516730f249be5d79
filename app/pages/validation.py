"""Predicted vs measured page: a calibration profile's predictions against measured records
(`epsim.validate`), from the shipped profile and records, the last local calibration, or
uploads: the scatter, curves per kind over tokens per rank with p10-p90 bands, the error
tables; filters by backend, kind, skew, model and split; the extrapolation hold-outs (refits)
when asked."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app import charts, ui
from app import validation_data
from epsim.errors import EpsimError

SHIPPED = "shipped profile and records (epsim/data)"
LOCAL = "last local calibration (runs/calibrate)"
UPLOAD = "upload records and a profile"


def _files(paths: list[Path]) -> tuple[tuple[str, Path], ...]:
    return tuple((p.name, p) for p in paths)


def inputs() -> tuple[tuple, tuple] | None:
    """(record files, profile file), each (name, bytes or Path), from the source the user picks."""
    shipped_records, shipped_profile = validation_data.shipped_validation_files()
    local_records, local_profile = validation_data.local_calibration_files()
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
    records = left.file_uploader("Measurement records (JSON Lines, or gzipped: .jsonl.gz)",
                                 type=["jsonl", "json", "gz"],
                                 accept_multiple_files=True, key="val_records")
    profile = right.file_uploader("Calibration profile (JSON)", type=["json"], key="val_profile")
    if not records or profile is None:
        st.info("Upload one or more record files (`epsim calibrate --records-out`) and the profile "
                "fitted on them (`epsim calibrate --out`).")
        return None
    return tuple((r.name, r.getvalue()) for r in records), (profile.name, profile.getvalue())


def short_models(models) -> dict[str, str]:
    """A short label per model name: its size (`Qwen3-235B-A22B` -> `235B`) where that is
    unique among `models`, else the name itself."""
    import re
    short = {}
    for name in sorted(set(models)):
        match = re.search(r"(\d+(?:\.\d+)?[BMT])\b", name)
        short[name] = match.group(1) if match else name
    labels = list(short.values())
    return {name: label if labels.count(label) == 1 else name for name, label in short.items()}


def frame_of(rows: list) -> pd.DataFrame:
    short = short_models(r.model for r in rows)
    shape = [f"{short[r.model]} {r.dispatch_dtype or '-'}" for r in rows]
    return pd.DataFrame({
        "where": [r.where for r in rows],
        "split": ["held out" if r.split == "holdout" else "fit set" for r in rows],
        "backend": [r.backend for r in rows], "kind": [r.kind for r in rows],
        "model": [r.model for r in rows], "dtype": [r.dispatch_dtype for r in rows],
        "skew": [r.skew for r in rows], "tokens per rank": [r.tokens for r in rows],
        "measured µs": [r.measured_us for r in rows], "predicted µs": [r.predicted_us for r in rows],
        "error %": [r.error_pct for r in rows], "p10 µs": [r.p10_us for r in rows],
        "p90 µs": [r.p90_us for r in rows], "outside fitted range": [r.outside for r in rows],
        "shape": shape, "skew kind": [r.skew.split(":")[0] for r in rows],
        "series": [f"{s} {r.skew}" for s, r in zip(shape, rows)]})


def key_table(rows: list) -> pd.DataFrame:
    """What the curves' short labels stand for."""
    short = short_models(r.model for r in rows)
    hidden: dict[str, int] = {}
    for r in rows:          # records that carry no hidden size (0) do not hide the ones that do
        hidden[r.model] = max(hidden.get(r.model, 0), r.hidden_size or 0)
    return pd.DataFrame([{"label": label, "model": name, "hidden size": hidden[name] or "-",
                          "dispatch dtypes": ", ".join(sorted({r.dispatch_dtype or "-" for r in rows
                                                              if r.model == name}))}
                         for name, label in short.items()])


def filters(rows: list) -> list:
    """Pills (every label whole) over split, backend, kind, skew and model; the rows that pass."""
    fields = [("split", "held out / fit set"), ("backend", "backend"), ("kind", "kind"),
              ("skew", "skew"), ("model", "model")]
    names = {"holdout": "held out", "fit": "fit set"}
    chosen = {}
    box = st.expander("Filters (every record shown until you narrow them)", expanded=True)
    for field, label in fields:
        values = sorted({getattr(r, field) for r in rows}, key=lambda v: (
            charts.KIND_ORDER.index(v) if field == "kind" and v in charts.KIND_ORDER else
            (0 if v == "holdout" else 1) if field == "split" else 99, str(v)))
        chosen[field] = set(box.pills(label, values, selection_mode="multi", default=values,
                                      format_func=lambda v: names.get(v, v), key=f"val_f_{field}"))
    return [r for r in rows if all(getattr(r, f) in chosen[f] for f, _ in fields)]


def error_table(rows: list) -> pd.DataFrame:
    from epsim.validate import group
    return pd.DataFrame([{"backend": backend, "kind": kind, "records": s.num,
                          "MAPE %": round(s.mape, 1), "worst %": round(s.worst, 1), "worst at": s.worst_at,
                          "bias %": round(s.bias, 1)}
                         for (backend, kind), s in group(rows, "backend", "kind").items()])


ASKED = "val_extrapolation_asked"        # the record files whose hold-outs were asked for


def extrapolation_section(records: tuple) -> str:
    """The extrapolation hold-outs, judged when asked (each axis refits the profile: a minute
    or more the first time, cached after; the rest of the page does not wait for them).
    Returns their markdown table once judged, else ''."""
    st.markdown("**Extrapolation hold-outs against two baselines** (constant: the fit-set median "
                "of the same configuration; log-log: the fit-set points joined along the axis; "
                "skill = 1 - model / best baseline)")
    key = validation_data.files_key(list(records))
    asked = st.session_state.setdefault(ASKED, set())
    if key not in asked:
        st.caption("Each axis refits the profile on one side of a split (tokens per rank up to "
                   "1024; the shapes other than DeepSeek-V3's) and judges the other side, all records "
                   "whatever the filters: a minute or more the first time, kept after.")
        if not st.button("Judge the extrapolation hold-outs", key="val_extrapolate"):
            return ""
        asked.add(key)            # later reruns (a filter) keep the section, from the cache
    try:
        view = validation_data.extrapolation_holdouts(key, records)
    except EpsimError as exc:
        st.error(str(exc))
        return ""
    extrapolation_table(view.rows)
    return view.markdown


def extrapolation_table(rows: list[dict]) -> None:
    """The extrapolation hold-outs (tokens above the fit, an unseen shape, another run): the
    model's MAPE next to a constant and log-log, a component that does not beat both flagged."""
    if not rows:
        st.caption("no extrapolation hold-out in these records (tokens above 1024, a "
                   "DeepSeek-V3 shape); the run axis is in docs/validation.md")
        return
    flagged = [f"{r['axis']}: {r['component']}" for r in rows if not r["beats_both"]]
    if flagged:
        st.warning("Does not beat both baselines: " + ", ".join(flagged))
    st.dataframe(pd.DataFrame([{
        "axis": r["axis"], "component": r["component"], "records": r["num"],
        "model MAPE %": round(r["model_mape"], 1), "constant MAPE %": round(r["constant_mape"], 1),
        "log-log MAPE %": round(r["loglog_mape"], 1), "skill": round(r["skill"], 2),
        "beats both": "yes" if r["beats_both"] else "NO"} for r in rows]),
        hide_index=True, width="stretch")


def page() -> None:
    st.title("Predicted vs measured")
    st.caption("Every record the cost models predict, predicted with the simulator's own formulas from "
               "the record's counts. Held-out records were not used to fit the profile: they are the "
               "judgement; fit-set errors are in-sample.")
    chosen = inputs()
    if chosen is None:
        return
    try:
        records, profile = chosen
        view = validation_data.validation(validation_data.files_key([*records, profile]), records, profile)
    except EpsimError as exc:
        st.error(str(exc))
        return
    st.info(f"**Measured on** {view.measured_on}")
    if view.warnings:
        with st.expander(f"{len(view.warnings)} note(s): records skipped or extrapolated"):
            for warning in view.warnings:
                st.text(warning)
    rows = filters(view.rows)
    if not rows:
        st.warning("No record matches the filters.")
        return
    held = [r for r in rows if r.split == "holdout"]
    fit = [r for r in rows if r.split == "fit"]
    cols = st.columns(4)
    cols[0].metric("held-out MAPE", ui.fmt(sum(r.ape for r in held) / len(held) if held else None, ".1f", " %"),
                   help="mean absolute error of the records the fit never saw")
    cols[1].metric("worst held-out error", ui.fmt(max(r.ape for r in held) if held else None, ".1f", " %"))
    cols[2].metric("fit-set MAPE (in-sample)",
                   ui.fmt(sum(r.ape for r in fit) / len(fit) if fit else None, ".1f", " %"))
    cols[3].metric("records: held out + fit set", f"{len(held)} + {len(fit)}")
    frame = frame_of(rows)
    # the scatter on its own row: beside the tables its plot was under 200 px wide at 1400 px
    st.markdown("**Predicted against measured** (filled: held out; hollow: fit set; dotted: ±10%)")
    st.altair_chart(charts.predicted_vs_measured(frame), width="stretch")
    left, right = st.columns(2)
    for column, subset, what in ((left, held, "Held out"), (right, fit, "Fit set (in-sample)")):
        column.markdown(f"**{what}: error by backend and kind** ({len(subset)} records)")
        if subset:
            column.dataframe(error_table(subset), hide_index=True, width="stretch")
        else:
            column.caption(f"no {what.split(' (')[0].lower()} record passes the filters")
    st.markdown("**Curves per kind over tokens per rank**: measured median with p10-p90 bars (points), "
                "predicted (lines); colour = model and dispatch dtype (one hue per model, dark bf16, "
                "light fp8, between them native), point shape and line dash = skew")
    st.dataframe(key_table(rows), hide_index=True)
    colors = charts.series_scale(frame)         # one colour per model and dtype on every panel
    for backend in sorted({r.backend for r in rows}):
        st.markdown(f"*{backend}*")
        st.altair_chart(charts.curves_by_kind(frame[frame["backend"] == backend], colors),
                        width="content")
    extrapolation = extrapolation_section(records)
    with st.expander("Every comparison"):
        shown = frame.drop(columns=["series", "shape", "skew kind"])
        st.dataframe(shown, hide_index=True, width="stretch")
        st.download_button("comparisons.csv", shown.to_csv(index=False), file_name="comparisons.csv",
                           mime="text/csv", on_click="ignore")
    with st.expander("The error tables as `epsim validate` writes them (all records, no filters)"):
        st.markdown(extrapolation + "\n" + view.markdown if extrapolation else view.markdown)


with ui.guarded():
    page()
