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


def finish(chart, legend: str = "right"):
    """What every chart of the app gets: SVG (legend labels are text a test can read) and
    legends that never cut a label, outside the plot area (`legend`: right, or bottom for a
    chart wide enough that a legend beside it would run past the page)."""
    # under the plot, a legend's entries wrap in columns (in one row they ran off the page); three,
    # since the legends of one chart sit side by side there (with four the shape legend's long
    # labels and the skew legend beside it passed the page's 1100 px)
    wrap = {"columns": 3} if legend == "bottom" else {}
    return chart.properties(usermeta={"embedOptions": {"renderer": "svg"}}).configure_legend(
        labelLimit=0, titleLimit=0, orient=legend, **wrap)


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


def series_scale(frame: pd.DataFrame) -> alt.Scale:
    """The colour of every `shape` label (model and dtype) of `frame`: one hue per model, dark
    bf16, light fp8, native between (`epsim.validate.plots.series_colors`), fixed over the whole frame so every
    panel drawn from a part of it colours a model the same."""
    from epsim.validate.plots import series_colors
    pairs = frame[["shape", "model", "dtype"]].drop_duplicates().sort_values("shape")
    colors = series_colors(list(zip(pairs["model"], pairs["dtype"])))
    return alt.Scale(domain=list(pairs["shape"]),
                     range=[colors[(m, d)] for m, d in zip(pairs["model"], pairs["dtype"])])


def curves_by_kind(frame: pd.DataFrame, colors: alt.Scale | None = None) -> alt.Chart:
    """Per kind: measured medians over tokens per rank with p10-p90 bars, the prediction at
    each point joined as a line. Colour = shape and dtype (`shape` column: short labels;
    `colors` from `series_scale` of every panel's frame), point shape and line dash = skew; the
    legends under the panels (beside two panels they ran past the page)."""
    colors = colors or series_scale(frame)
    keys = [k for k in colors.domain if k in set(frame["shape"])]
    skews = sorted(set(frame["skew kind"]))
    color = alt.Color("shape:N", title="shape, dtype", sort=keys, scale=colors)
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
        facet=alt.Facet("kind:N", sort=kinds, title=None), columns=2).resolve_scale(y="independent"),
        legend="bottom")


LABEL_GAP_PX = 15          # a point label's line height: labels at one x keep this far apart


def _declutter(x: np.ndarray, y: np.ndarray, lo: float, hi: float, height_px: float) -> np.ndarray:
    """[points] y of each point's label: at its point, pushed up where labels of points with the
    same x would come closer than `LABEL_GAP_PX` on a `height_px` axis over [lo, hi] (points at
    other x sit a column apart on the log axis)."""
    gap = LABEL_GAP_PX * (hi - lo) / max(height_px, 1.0)
    label_y = y.astype(float).copy()
    for value in np.unique(x[np.isfinite(x)]):
        idx = np.flatnonzero((x == value) & np.isfinite(y))
        last = -np.inf
        for i in idx[np.argsort(y[idx], kind="stable")]:
            label_y[i] = max(y[i], last + gap)
            last = label_y[i]
    return label_y


def pareto(frame: pd.DataFrame, x: str, y: str, x_title: str, y_title: str,
           target: float | None = None, target_label: str = "SLO target",
           band: tuple[np.ndarray, np.ndarray] | None = None, height: int = 300) -> alt.Chart:
    """One metric against GPUs (log2 axis): colour = the chosen point (gold), the Pareto
    frontier (red), the rest (blue); shape = meets the SLO, marginal (its p10-p90 band crosses a
    bound) or misses it; `band` ([points] p10, p90) as bars; each point labelled with
    `frame["label"]`, labels at one GPU count stacked apart (`_declutter`); `target` a dashed
    rule named in the legend (no text over the data); the legends beside the plot."""
    role = np.where(frame["best"], "chosen",
                    np.where(frame["pareto"], "Pareto frontier", "other"))
    marginal = frame["marginal"].astype(bool) if "marginal" in frame else np.zeros(len(frame), bool)
    slo = np.where(frame["feasible"].astype(bool), "meets the SLO",
                   np.where(marginal, "marginal (band crosses a bound)", "misses the SLO"))
    xs, ys = frame[x].to_numpy(dtype=float), frame[y].to_numpy(dtype=float)
    values = [v for v in [*ys[np.isfinite(ys)], target] if v is not None and np.isfinite(v)]
    if band is not None:
        values += [v for v in np.concatenate(band) if np.isfinite(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = 0.08 * (hi - lo or abs(hi) or 1.0)
    lo, hi = lo - pad, hi + 2 * pad               # room above for stacked labels
    # plain column names: vega-lite reads a dot in a field name as nesting (tpot_ms.p99)
    plot = pd.DataFrame({x_title: xs, y_title: ys, "point": role, "SLO": slo,
                         "configuration": frame["configuration"],
                         "label": frame["label"] if "label" in frame else frame["configuration"],
                         "label y": _declutter(xs, ys, lo, hi, height)})
    gpus = sorted({int(v) for v in xs if np.isfinite(v) and v > 0})
    x_enc = alt.X(f"{x_title}:Q", scale=alt.Scale(type="log", base=2, domain=[
        min(gpus) / 1.4, max(gpus) * 2.2] if gpus else None, nice=False),
        axis=alt.Axis(values=gpus, format="d", labelOverlap=True))
    y_scale = alt.Scale(domain=[lo, hi], nice=False, zero=False)
    base = alt.Chart(plot).encode(x=x_enc)
    roles = ["chosen", "Pareto frontier", "other"]
    states = ["meets the SLO", "marginal (band crosses a bound)", "misses the SLO"]
    points = base.mark_point(filled=True, size=110, opacity=0.9).encode(
        y=alt.Y(f"{y_title}:Q", scale=y_scale, title=y_title),
        color=alt.Color("point:N", title=None, scale=alt.Scale(domain=roles, range=["#f2b701", "#d62728", "#1f77b4"])),
        shape=alt.Shape("SLO:N", title=None, scale=alt.Scale(domain=states, range=["circle", "triangle-up", "cross"])),
        tooltip=["configuration", alt.Tooltip(f"{x_title}:Q"), alt.Tooltip(f"{y_title}:Q", format=".4g"),
                 "point", "SLO"],
    )
    labels = base.mark_text(align="left", baseline="middle", dx=9, fontSize=11, color="#333333").encode(
        y=alt.Y("label y:Q", scale=y_scale, title=y_title), text="label:N")
    layers = [points, labels]
    if band is not None:
        plot["p10"], plot["p90"] = band
        layers.insert(0, alt.Chart(plot.dropna(subset=["p10", "p90"])).mark_rule(color="#777777").encode(
            x=x_enc, y=alt.Y("p10:Q", scale=y_scale, title=y_title), y2="p90:Q",
            tooltip=["configuration", alt.Tooltip("p10:Q", format=".4g"), alt.Tooltip("p90:Q", format=".4g")]))
    if target is not None:
        rule_frame = pd.DataFrame({y_title: [target], "target": [f"{target_label} {target:g}"]})
        layers.append(alt.Chart(rule_frame).mark_rule(color="#d62728").encode(
            y=alt.Y(f"{y_title}:Q", scale=y_scale, title=y_title),
            strokeDash=alt.StrokeDash("target:N", title=None, scale=alt.Scale(range=[[6, 4]])),
            tooltip=["target"]))
    return finish(alt.layer(*layers).properties(height=height))


def layer_compare(rows: list[dict]) -> alt.Chart:
    """Mean µs per MoE layer of each part in runs A and B side by side (`epsim.report.compare`
    layer rows: label, a, b), the whole layer last; B - A in the tooltip."""
    frame = pd.DataFrame([{"part": r["label"], "run": run, "µs per layer": r[key], "B - A (µs)": r["delta"]}
                          for r in rows for run, key in (("A", "a"), ("B", "b")) if r[key] is not None])
    order = [r["label"] for r in rows]
    bars = alt.Chart(frame).mark_bar().encode(
        x=alt.X("part:N", sort=order, title=None, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("run:N", sort=["A", "B"]),
        y=alt.Y("µs per layer:Q", title="mean µs per MoE layer and step"),
        color=alt.Color("run:N", sort=["A", "B"], title="run",
                        scale=alt.Scale(domain=["A", "B"], range=["#4c72b0", "#dd8452"])),
        tooltip=["part", "run", alt.Tooltip("µs per layer:Q", format=".1f"),
                 alt.Tooltip("B - A (µs):Q", format="+.1f")])
    return finish(bars.properties(height=300))


TAG_COLORS = alt.Scale(domain=["fitted", "extrapolated", "datasheet"],
                       range=["#2ca02c", "#ff7f0e", "#999999"])


def provenance_bands(frame: pd.DataFrame) -> alt.Chart:
    """Predicted mean time per MoE-layer part with its p10-p90 band (where the component has a
    measured spread), coloured by provenance tag. Columns: part, µs, p10 µs, p90 µs, tag. Every
    part labelled on the y axis; one x title (the band's own field would add its name to it)."""
    title = "mean per MoE layer (µs), p10-p90 band"
    base = alt.Chart(frame).encode(y=alt.Y("part:N", sort=None, title=None,
                                           axis=alt.Axis(labelOverlap=False, labelLimit=0)))
    bars = base.mark_bar().encode(
        x=alt.X("µs:Q", title=title),
        color=alt.Color("tag:N", scale=TAG_COLORS, title="provenance"),
        tooltip=["part", "tag", "component", alt.Tooltip("µs:Q", format=".1f"),
                 alt.Tooltip("p10 µs:Q", format=".1f"), alt.Tooltip("p90 µs:Q", format=".1f")])
    band = base.mark_errorbar(ticks=True, color="black").encode(
        x=alt.X("p10 µs:Q", title=title), x2="p90 µs:Q")
    return finish((bars + band).properties(height=34 * max(len(frame), 1) + 20))


WHO_SCALE = alt.Scale(domain=["epsim", "peer"], range=["#4c72b0", "#dd8452"])


def silicon_scatter(frame: pd.DataFrame, label: str, band_pct: float) -> alt.Chart:
    """Predicted against measured `label` (TPOT or TTFT, ms) of silicon rows, log-log, one colour
    per predictor (epsim, the peer), filled = predicted as the row states it, hollow = approximated;
    the diagonal and the target's ±`band_pct` dotted."""
    measured, predicted = f"measured {label} ms", f"predicted {label} ms"
    lo = float(min(frame[measured].min(), frame[predicted].min())) * 0.8
    hi = float(max(frame[measured].max(), frame[predicted].max())) * 1.25
    scale = alt.Scale(type="log", domain=[lo, hi])
    color = alt.Color("who:N", scale=WHO_SCALE, title="predicted by")
    points = alt.Chart(frame).mark_point(size=30, opacity=0.7).encode(
        x=alt.X(f"{measured}:Q", scale=scale, title=f"measured {label} (ms)"),
        y=alt.Y(f"{predicted}:Q", scale=scale, title=f"predicted {label} (ms)"),
        color=color, shape=alt.Shape("status:N", sort=["predicted", "approximated"], title="row"),
        fill=alt.condition("datum.status == 'predicted'", color, alt.value("transparent")),
        tooltip=["row", "system", "mode", "EP", "clients", "ISL/OSL", "who", "gaps",
                 alt.Tooltip(f"{measured}:Q", format=".1f"), alt.Tooltip(f"{predicted}:Q", format=".1f"),
                 alt.Tooltip(f"{label} error %:Q", format="+.1f")])
    band = band_pct / 100
    guide = pd.DataFrame([{measured: x, predicted: x * f, "line": name}
                          for f, name in ((1.0, "exact"), (1 - band, "low"), (1 + band, "high")) for x in (lo, hi)])
    lines = alt.Chart(guide).mark_line(color="black", strokeWidth=0.8).encode(
        x=alt.X(f"{measured}:Q", scale=scale), y=alt.Y(f"{predicted}:Q", scale=scale), detail="line:N",
        strokeDash=alt.condition("datum.line == 'exact'", alt.value([1, 0]), alt.value([2, 3])))
    return finish((lines + points).properties(height=420))
