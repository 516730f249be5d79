"""Validation figures (PNG, matplotlib Agg): predicted against measured, and curves over tokens
per rank with the measured points, per backend."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from epsim.io.write import write_figure
from epsim.validate.compare import Comparison
from epsim.validate.table import JUDGED_KINDS

_KIND_COLORS = {"dispatch": "tab:blue", "combine": "tab:orange", "experts": "tab:green",
                "moe_layer": "tab:red", "allreduce": "tab:purple", "attention_prefill": "tab:brown",
                "attention_decode": "tab:pink", "dense_mlp": "tab:olive", "block_ops": "tab:cyan"}
_SKEW_MARKERS = {"uniform": "o", "zipf": "s", "hotset": "^", "trace": "D"}
# grouped colours of (model, dispatch dtype) series: one hue per model, dark for the first dtype
# (bf16), light for the next (fp8) -- shared with the app's curves
# one hue per model (ten apart, so the shipped records' six models never share one), in three
# shades: dark for BF16, middle for a native dtype (or none), light for FP8
MODEL_HUES = (("#1f4e9c", "#4f7fd0", "#8fb3ea"), ("#b3470d", "#e0742e", "#f6b07a"),
              ("#1f6e2e", "#3f9c4f", "#8fd19b"), ("#6a2d8f", "#9a5cc0", "#cda8e6"),
              ("#7a5c12", "#b08a2a", "#e3c877"), ("#0f6f6f", "#2aa3a3", "#8ad8d8"),
              ("#a01f4f", "#d04f7f", "#eca0bd"), ("#4a4a4a", "#7a7a7a", "#b8b8b8"),
              ("#5e6e0f", "#8fa31f", "#cbd97a"), ("#2e3f9c", "#5f6fd0", "#a3adef"))


def series_colors(series: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """A colour per (model, dtype): the model's hue (models in sorted order), dark for bf16,
    light for fp8, between them for anything else (native, none)."""
    models = sorted({model for model, _ in series})
    shade = {"bf16": 0, "fp8": 2}
    return {(model, dtype): MODEL_HUES[models.index(model) % len(MODEL_HUES)][shade.get(dtype, 1)]
            for model, dtype in series}


def _plain_log_axes(ax) -> None:
    """Log axes labelled 100, 1000, not 10^2, 10^3 (times read at a glance)."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    plain = FuncFormatter(lambda v, _: f"{v:g}" if v < 1e5 else f"{v:.0f}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def scatter(rows: list[Comparison], path: Path, title: str = "") -> Path:
    """Predicted against measured, log-log, one color per kind; hollow markers = fit set."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 6))
    order = list(_KIND_COLORS)
    for kind in sorted({r.kind for r in rows}, key=lambda k: (order.index(k) if k in order else len(order), k)):
        for split, face in (("fit", "none"), ("holdout", None)):
            part = [r for r in rows if r.kind == kind and r.split == split]
            if not part:
                continue
            color = _KIND_COLORS.get(kind, "gray")
            ax.scatter([r.measured_us for r in part], [r.predicted_us for r in part], s=16,
                       facecolors=face or color, edgecolors=color, linewidths=0.8,
                       label=f"{kind} ({'held out' if split == 'holdout' else 'fit set'})")
    lo = min(min(r.measured_us, r.predicted_us) for r in rows) * 0.8
    hi = max(max(r.measured_us, r.predicted_us) for r in rows) * 1.25
    line = np.array([lo, hi])
    ax.plot(line, line, "k-", lw=0.8)
    for f in (0.9, 1.1):
        ax.plot(line, line * f, "k:", lw=0.6)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (µs)",
           ylabel="predicted (µs)", title=title or "predicted vs measured (dotted: ±10%)")
    _plain_log_axes(ax)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    try:
        return write_figure(fig, path)
    finally:
        plt.close(fig)


def curves(rows: list[Comparison], backend: str, path: Path) -> Path:
    """One panel per kind: measured points (marker = skew) and the prediction at each measured
    point joined along tokens per rank (line = uniform), one color per shape and dtype."""
    plt = _pyplot()
    kinds = [k for k in JUDGED_KINDS if any(r.kind == k and r.backend == backend for r in rows)]
    fig, axes = plt.subplots(1, max(1, len(kinds)), figsize=(4.2 * max(1, len(kinds)), 3.8),
                             squeeze=False)
    series = sorted({(r.model, r.dispatch_dtype) for r in rows if r.backend == backend})
    colors = series_colors(series)
    for ax, kind in zip(axes[0], kinds):
        part = [r for r in rows if r.backend == backend and r.kind == kind]
        lines: dict[tuple, list[Comparison]] = defaultdict(list)
        for r in part:
            skew_kind = r.skew.split(":")[0]
            ax.scatter(r.tokens, r.measured_us, marker=_SKEW_MARKERS.get(skew_kind, "x"), s=14,
                       color=colors[(r.model, r.dispatch_dtype)],
                       facecolors="none" if r.split == "fit" else None)
            if skew_kind == "uniform":
                lines[(r.model, r.dispatch_dtype)].append(r)
        for key, pts in sorted(lines.items()):
            pts.sort(key=lambda r: r.tokens)
            ax.plot([r.tokens for r in pts], [r.predicted_us for r in pts], color=colors[key],
                    lw=1.0, label=f"{key[0]} {key[1]}")
        ax.set(xscale="log", yscale="log", xlabel="tokens per rank", ylabel="time (µs)",
               title=f"{backend} {kind}")
        _plain_log_axes(ax)
    axes[0][0].legend(fontsize=7, title="line: predicted (uniform)", title_fontsize=7)
    fig.suptitle("markers: measured (o uniform, s zipf, ^ hot set; hollow = fit set)", fontsize=8)
    fig.tight_layout()
    try:
        return write_figure(fig, path)
    finally:
        plt.close(fig)


def write_plots(rows: list[Comparison], out: Path) -> list[Path]:
    """scatter.png and curves_<backend>.png into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    if not rows:
        return []
    paths = [scatter(rows, out / "scatter.png")]
    for backend in sorted({r.backend for r in rows}):
        paths.append(curves(rows, backend, out / f"curves_{backend}.png"))
    return paths
