"""Altair charts of epsim results (altair ships with streamlit): drawing only, the numbers come
from `app.data`. Every function takes plain arrays or rows and returns an `alt.Chart`."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

PART_COLORS = {"attention": "#4c72b0", "dispatch": "#dd8452", "experts": "#55a868",
               "combine": "#c44e52", "shared experts": "#8172b3", "block ops": "#937860",
               "sync (fitted)": "#999999"}
KIND_ORDER = ["dispatch", "combine", "experts", "moe_layer", "allreduce"]
SPLIT_ORDER = ["held out", "fit set"]
SKEW_SHAPES = {"uniform": "circle", "zipf": "square", "hotset": "triangle-up", "trace": "diamond"}


def finish(chart):
    """What every chart of the app gets: SVG (legend labels are text a test can read) and
    legends that never cut a label."""
    return chart.properties(usermeta={"embedOptions": {"renderer": "svg"}}).configure_legend(
        labelLimit=0, titleLimit=0)


KIND_SCALE = alt.Scale(domain=KIND_ORDER, range=["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"])


def latency_cdf(values_ms: np.ndarray, label: str) -> alt.Chart:
    """Empirical CDF of one latency (ms), p50/p90/p99 as dotted rules."""
    values = np.sort(values_ms[np.isfinite(values_ms)])
    frame = pd.DataFrame({label: values, "fraction of requests": np.arange(1, values.size + 1) / max(values.size, 1)})
    line = alt.Chart(frame).mark_line(interpolate="step-after").encode(
        x=alt.X(f"{label}:Q", scale=alt.Scale(zero=False)), y="fraction of requests:Q",
        tooltip=[alt.Tooltip(f"{label}:Q", format=".2f"), alt.Tooltip("fraction of requests:Q", format=".3f")])
    if not values.size:
        return finish(line)
    marks = pd.DataFrame({"percentile": ["p50", "p90", "p99"], label: np.percentile(values, [50, 90, 99])})
    rules = alt.Chart(marks).mark_rule(strokeDash=[3, 3], color="gray").encode(
        x=f"{label}:Q", tooltip=["percentile", alt.Tooltip(f"{label}:Q", format=".2f")])
    return finish((line + rules).properties(height=260))


def layer_breakdown(layer_mean_us: dict, two_batch_overlap: bool) -> alt.Chart:
    """Stacked mean µs per MoE layer of its parts (`epsim.report.figures.layer_stack`: the
    parts reach the layer's time, a fitted sync term its own part); where overlap makes the layer
    shorter than its parts, the layer's time as black ticks inside the bars."""
    from epsim.report.figures import layer_stack
    parts, marks = layer_stack(layer_mean_us, two_batch_overlap)
    names = list(parts)
    num_layers = len(layer_mean_us["layer_us"])
    frame = pd.DataFrame([{"MoE layer": i, "part": p, "mean µs per step": float(parts[p][i])}
                          for p in names for i in range(num_layers)],
                         columns=["MoE layer", "part", "mean µs per step"])   # none: no step measured
    bars = alt.Chart(frame).mark_bar().encode(
        x=alt.X("MoE layer:O", axis=alt.Axis(labelOverlap=True)),
        y=alt.Y("sum(mean µs per step):Q", title="mean time per step (µs)"),
        color=alt.Color("part:N", sort=names, scale=alt.Scale(domain=names, range=[PART_COLORS[p] for p in names])),
        order=alt.Order("part_order:Q"),
        tooltip=["MoE layer:O", "part:N", alt.Tooltip("mean µs per step:Q", format=".1f")],
    ).transform_calculate(part_order=f"indexof({names!r}, datum.part)")
    if marks is None:
        return finish(bars.properties(height=300))
    ticks = alt.Chart(pd.DataFrame({"MoE layer": np.arange(num_layers), "layer time (µs)":
                                    layer_mean_us["layer_us"], "mark": marks})).mark_tick(
        thickness=2).encode(x="MoE layer:O", y="layer time (µs):Q",
                            color=alt.Color("mark:N", title=None, scale=alt.Scale(range=["black"])),
                            tooltip=["MoE layer", alt.Tooltip("layer time (µs):Q", format=".1f")])
    return finish(alt.layer(bars, ticks).resolve_scale(color="independent").properties(height=300))


def rank_load(rank_pairs_mean: np.ndarray) -> alt.Chart:
    """Mean token-expert pairs per EP rank relative to the mean (1.0 = balanced)."""
    mean = rank_pairs_mean.mean()
    rel = rank_pairs_mean / mean if mean > 0 else np.ones_like(rank_pairs_mean)
    frame = pd.DataFrame({"EP rank": np.arange(rel.size), "pairs / mean": rel,
                          "pairs per layer per step": rank_pairs_mean})
    bars = alt.Chart(frame).mark_bar(color="#55a868").encode(
        x="EP rank:O", y=alt.Y("pairs / mean:Q", title="token-expert pairs / mean (ratio)"),
        tooltip=["EP rank", alt.Tooltip("pairs / mean:Q", format=".3f"),
                 alt.Tooltip("pairs per layer per step:Q", format=".1f")])
    rule = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(color="gray").encode(y="y:Q")
    return finish((bars + rule).properties(height=260))


def over_time(t_s: np.ndarray, values: np.ndarray, label: str, events: list | None = None,
              stalls: list | None = None, y_zero: bool = False) -> alt.Chart:
    """A per-step series over simulated time; rebalances as purple rules (stop-the-world
    stalls shaded) and failures red / recoveries green when given."""
    frame = pd.DataFrame({"simulated time (s)": t_s, label: values})
    layers = [alt.Chart(frame).mark_line(strokeWidth=1).encode(
        x=alt.X("simulated time (s):Q", title="simulated time (s)"),
        y=alt.Y(f"{label}:Q", scale=alt.Scale(zero=y_zero)),
        tooltip=[alt.Tooltip("simulated time (s):Q", format=".3f"), alt.Tooltip(f"{label}:Q", format=".3f")])]
    if stalls:
        spans = pd.DataFrame({"start": [s[0] * 1e-6 for s in stalls],
                              "end": [(s[0] + s[1]) * 1e-6 for s in stalls],
                              "stall (s)": [s[1] * 1e-6 for s in stalls], "cause": [s[2] for s in stalls]})
        layers.insert(0, alt.Chart(spans).mark_rect(opacity=0.18, color="purple").encode(
            x=alt.X("start:Q", title="simulated time (s)"), x2="end:Q",
            tooltip=["cause", alt.Tooltip("stall (s):Q", format=".3f")]))
    if events:
        marks = pd.DataFrame(events)
        layers.append(alt.Chart(marks).mark_rule(strokeDash=[4, 3]).encode(
            x=alt.X("at_s:Q", title="simulated time (s)"), color=alt.Color("event:N", scale=alt.Scale(
                domain=["rebalance", "failure", "recovery"], range=["purple", "red", "green"])),
            tooltip=[c for c in marks.columns]))
    return finish(alt.layer(*layers).properties(height=240))


def heatmap(t_s: np.ndarray, share: np.ndarray, column: str) -> alt.Chart:
    """[windows, columns] share of the mean load as a heatmap: time across, ranks or experts
    down; 1.0 = an average rank (diverging colors around it)."""
    num_windows, num_columns = share.shape
    half = (t_s[1] - t_s[0]) / 2 if num_windows > 1 else t_s[0]
    frame = pd.DataFrame({
        "from (s)": np.repeat(t_s - half, num_columns), "to (s)": np.repeat(t_s + half, num_columns),
        column: np.tile(np.arange(num_columns), num_windows),
        "load / mean": share.reshape(-1)}).dropna()
    top = float(np.nanmax(share)) if np.isfinite(share).any() else 2.0
    chart = alt.Chart(frame).mark_rect().encode(
        x=alt.X("from (s):Q", title="simulated time (s)",
                scale=alt.Scale(domain=[float(t_s[0] - half), float(t_s[-1] + half)], nice=False)),
        x2="to (s):Q",
        y=alt.Y(f"{column}:O", axis=alt.Axis(labelOverlap=True)),
        color=alt.Color("load / mean:Q", title="load / mean (ratio)",
                        scale=alt.Scale(scheme="redblue", reverse=True, domainMid=1.0,
                                        domain=[0.0, max(top, 1.01)])),
        tooltip=[alt.Tooltip("from (s):Q", format=".2f"), alt.Tooltip("to (s):Q", format=".2f"), column,
                 alt.Tooltip("load / mean:Q", format=".3f")],
    )
    return finish(chart.properties(height=min(24 * num_columns + 40, 520)))


def interval_sweep(rows: list[dict], baseline: dict | None, metric: str, label: str) -> alt.Chart:
    """A metric against the rebalance interval (log x), the run without EPLB dashed."""
    frame = pd.DataFrame({"rebalance interval (forward passes)": [r["interval"] for r in rows],
                          label: [r[metric] for r in rows]})
    line = alt.Chart(frame).mark_line(point=True).encode(
        x=alt.X("rebalance interval (forward passes):Q", scale=alt.Scale(type="log", base=2)),
        y=alt.Y(f"{label}:Q", scale=alt.Scale(zero=False)),
        tooltip=list(frame.columns))
    if baseline is None:
        return finish(line.properties(height=260))
    rule = alt.Chart(pd.DataFrame({label: [baseline[metric]], "run": ["without EPLB"]})).mark_rule(
        strokeDash=[5, 4], color="gray").encode(y=f"{label}:Q", tooltip=["run", f"{label}:Q"])
    return finish((line + rule).properties(height=260))


def predicted_vs_measured(frame: pd.DataFrame) -> alt.Chart:
    """Predicted against measured µs, log-log, one colour per kind, filled = held out, hollow =
    fit set; the diagonal and ±10% dotted."""
    lo = float(min(frame["measured µs"].min(), frame["predicted µs"].min())) * 0.8
    hi = float(max(frame["measured µs"].max(), frame["predicted µs"].max())) * 1.25
    scale = alt.Scale(type="log", domain=[lo, hi])
    points = alt.Chart(frame).mark_point(size=40).encode(
        x=alt.X("measured µs:Q", scale=scale, title="measured (µs)"),
        y=alt.Y("predicted µs:Q", scale=scale, title="predicted (µs)"),
        color=alt.Color("kind:N", sort=KIND_ORDER, scale=KIND_SCALE),
        shape=alt.Shape("split:N", sort=SPLIT_ORDER, title="record"),
        fill=alt.condition("datum.split == 'held out'", alt.Color("kind:N", sort=KIND_ORDER, scale=KIND_SCALE),
                           alt.value("transparent")),
        tooltip=["where", "backend", "kind", "model", "skew", "tokens per rank", "split",
                 alt.Tooltip("measured µs:Q", format=".1f"), alt.Tooltip("predicted µs:Q", format=".1f"),
                 alt.Tooltip("error %:Q", format="+.1f")])
    guide = pd.DataFrame([{"measured µs": x, "predicted µs": x * f, "line": name}
                          for f, name in ((1.0, "exact"), (0.9, "-10%"), (1.1, "+10%")) for x in (lo, hi)])
    lines = alt.Chart(guide).mark_line(color="black", strokeWidth=0.8).encode(
        x=alt.X("measured µs:Q", scale=scale), y=alt.Y("predicted µs:Q", scale=scale), detail="line:N",
        strokeDash=alt.condition("datum.line == 'exact'", alt.value([1, 0]), alt.value([2, 3])))
    return finish((lines + points).properties(height=480))


def curves_by_kind(frame: pd.DataFrame) -> alt.Chart:
    """Per kind: measured medians over tokens per rank with p10-p90 bars, the prediction at
    each point joined as a line. Colour = shape and dtype (`shape` column: short labels, one
    hue per model, `epsim.validate.plots.series_colors`), point shape and line dash = skew."""
    from epsim.validate.plots import series_colors
    pairs = frame[["shape", "model", "dtype"]].drop_duplicates().sort_values("shape")
    colors = series_colors(list(zip(pairs["model"], pairs["dtype"])))
    keys = list(pairs["shape"])
    skews = sorted(set(frame["skew kind"]))
    color = alt.Color("shape:N", title="shape, dtype", sort=keys, scale=alt.Scale(
        domain=keys, range=[colors[(m, d)] for m, d in zip(pairs["model"], pairs["dtype"])]))
    base = alt.Chart(frame).encode(
        x=alt.X("tokens per rank:Q", scale=alt.Scale(type="log", base=2)), color=color)
    bands = base.mark_errorbar(ticks=True).encode(
        y=alt.Y("p10 µs:Q", scale=alt.Scale(type="log"), title="time (µs)"), y2="p90 µs:Q",
        detail="series:N")
    measured = base.mark_point(filled=True, size=30).encode(
        y="measured µs:Q",
        shape=alt.Shape("skew kind:N", title="skew", sort=skews,
                        scale=alt.Scale(domain=skews, range=[SKEW_SHAPES.get(k, "cross") for k in skews])),
        tooltip=["where", "model", "dtype", "skew", "tokens per rank",
                 alt.Tooltip("measured µs:Q", format=".1f"),
                 alt.Tooltip("predicted µs:Q", format=".1f"), alt.Tooltip("error %:Q", format="+.1f")])
    predicted = base.mark_line(strokeWidth=1.2).encode(
        y="predicted µs:Q", detail="series:N",
        strokeDash=alt.StrokeDash("skew kind:N", title="skew", sort=skews))
    kinds = [k for k in KIND_ORDER if k in set(frame["kind"])]
    return finish(alt.layer(bands, predicted, measured, data=frame).properties(width=340, height=220).facet(
        facet=alt.Facet("kind:N", sort=kinds, title=None), columns=2).resolve_scale(y="independent"))


def pareto(frame: pd.DataFrame, x: str, y: str, x_title: str, y_title: str,
           target: float | None = None, target_label: str = "SLO target") -> alt.Chart:
    """One metric against another (GPUs): color = the cheapest point meeting the SLO (gold),
    the Pareto frontier (red), the rest (blue); shape = meets the SLO (circle) or not (cross);
    each point labelled with `frame["label"]` (EP size and rate); `target` a dashed rule."""
    role = np.where(frame["best"], "cheapest meeting the SLO",
                    np.where(frame["pareto"], "Pareto frontier", "other"))
    slo = np.where(frame["feasible"].astype(bool), "meets the SLO", "misses the SLO")
    # plain column names: vega-lite reads a dot in a field name as nesting (tpot_ms.p99)
    plot = pd.DataFrame({x_title: frame[x], y_title: frame[y], "point": role, "SLO": slo,
                         "configuration": frame["configuration"],
                         "label": frame["label"] if "label" in frame else frame["configuration"]})
    roles = ["cheapest meeting the SLO", "Pareto frontier", "other"]
    base = alt.Chart(plot).encode(x=alt.X(f"{x_title}:Q", scale=alt.Scale(zero=False)),
                                  y=alt.Y(f"{y_title}:Q", scale=alt.Scale(zero=False)))
    points = base.mark_point(filled=True, size=110, opacity=0.85).encode(
        color=alt.Color("point:N", scale=alt.Scale(domain=roles, range=["#f2b701", "#d62728", "#1f77b4"])),
        shape=alt.Shape("SLO:N", scale=alt.Scale(domain=["meets the SLO", "misses the SLO"],
                                                 range=["circle", "cross"])),
        tooltip=["configuration", alt.Tooltip(f"{x_title}:Q"), alt.Tooltip(f"{y_title}:Q", format=".4g"),
                 "point", "SLO"],
    )
    labels = base.mark_text(align="left", dx=8, dy=-6, fontSize=10, color="#333333").encode(text="label:N")
    chart = points + labels
    if target is not None:
        rule_frame = pd.DataFrame({y_title: [target], "target": [f"{target_label} {target:g}"]})
        rule = alt.Chart(rule_frame).mark_rule(color="#d62728", strokeDash=[6, 4]).encode(
            y=f"{y_title}:Q", tooltip=["target"])
        text = alt.Chart(rule_frame).mark_text(align="left", baseline="bottom", dx=4, color="#d62728",
                                               fontSize=10).encode(y=f"{y_title}:Q", text="target:N",
                                                                   x=alt.value(0))
        chart = chart + rule + text
    return finish(chart.properties(height=320))


TAG_COLORS = alt.Scale(domain=["fitted", "extrapolated", "datasheet"],
                       range=["#2ca02c", "#ff7f0e", "#999999"])


def provenance_bands(frame: pd.DataFrame) -> alt.Chart:
    """Predicted mean time per MoE-layer part with its p10-p90 band (where the component has a
    measured spread), coloured by provenance tag. Columns: part, µs, p10 µs, p90 µs, tag."""
    base = alt.Chart(frame).encode(y=alt.Y("part:N", sort=None, title=None))
    bars = base.mark_bar().encode(
        x=alt.X("µs:Q", title="mean per MoE layer (µs), p10-p90 band"),
        color=alt.Color("tag:N", scale=TAG_COLORS, title="provenance"),
        tooltip=["part", "tag", "component", alt.Tooltip("µs:Q", format=".1f"),
                 alt.Tooltip("p10 µs:Q", format=".1f"), alt.Tooltip("p90 µs:Q", format=".1f")])
    band = base.mark_errorbar(ticks=True, color="black").encode(x="p10 µs:Q", x2="p90 µs:Q")
    return finish((bars + band).properties(height=30 * max(len(frame), 1) + 20))
