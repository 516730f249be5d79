"""PNG figures of a run: latency CDFs, time per MoE layer by part, load per rank; with EPLB or
failures, balancedness and step time over time with the rebalances and failures marked."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from epsim.io.write import write_figure
from epsim.report.summary import latency_windows, request_latencies_ms
from epsim.sim.metrics import SimResult

_PART_COLORS = {"attention": "#4c72b0", "dispatch": "#dd8452", "experts": "#55a868",
                "combine": "#c44e52", "shared experts": "#8172b3", "block ops": "#937860",
                "sync (fitted)": "#999999"}
STACK_PARTS = (("attention", "attention_us"), ("dispatch", "dispatch_us"), ("experts", "experts_us"),
               ("combine", "combine_us"), ("shared experts", "shared_experts_us"),
               ("block ops", "block_ops_us"))


def layer_stack(layer_mean_us: dict, two_batch_overlap: bool) -> tuple[dict[str, np.ndarray], str | None]:
    """What a MoE layer's mean time is made of, as parts that stack to the layer's time.

    The layer's time (`layer_us`) is its parts plus the profile's fitted `sync_us` (time the
    whole layer adds beyond them), minus what two-batch overlap hides. A positive remainder is
    its own part, "sync (fitted)", so the stack reaches the layer's time; a negative one (overlap)
    cannot stack and is returned as the label of the layer-time marks drawn inside the bars.

    Args:
        layer_mean_us: `SimResult.layer_mean_us` / summary keys, `[moe_layers]` each (µs).
    Returns:
        ({part name: [moe_layers] µs} of the non-zero parts in stacking order, label of the
        layer-time marks or None when the stack is the layer's time).
    """
    parts = {name: np.asarray(layer_mean_us[key], dtype=np.float64) for name, key in STACK_PARTS
             if key in layer_mean_us and np.any(np.asarray(layer_mean_us[key]) > 0)}
    layer = np.asarray(layer_mean_us["layer_us"], dtype=np.float64)
    rest = layer - np.sum(list(parts.values()), axis=0)                  # [moe_layers]
    tolerance = 1e-6 * np.maximum(layer, 1.0)
    if np.all(rest >= -tolerance):
        if np.any(rest > tolerance):
            parts["sync (fitted)"] = np.maximum(rest, 0.0)
        return parts, None
    why = "two-batch overlap hides part of the stack" if two_batch_overlap else \
        "the fitted sync term is negative: the parts overlap"
    return parts, f"MoE layer time ({why})"


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: str | Path) -> Path:
    """Write `fig` as a PNG atomically (`epsim.io.write`) and close it; returns `path`."""
    try:
        fig.tight_layout()
        return write_figure(fig, path)
    finally:
        _pyplot().close(fig)


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def latency_cdf(result: SimResult, path: str | Path) -> None:
    """Empirical CDFs of TTFT and TPOT (ms) of the measured requests."""
    plt = _pyplot()
    lat = request_latencies_ms(result)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, name, label in zip(axes, ("ttft_ms", "tpot_ms"), ("TTFT (ms)", "TPOT (ms)")):
        values = np.sort(lat[name][np.isfinite(lat[name])])
        if values.size:
            ax.plot(values, np.arange(1, values.size + 1) / values.size, lw=1.5)
            for q in (50, 90, 99):
                ax.axvline(np.percentile(values, q), ls=":", color="gray", lw=0.8)
        else:
            _no_data(ax, "no measured requests")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{result.scenario.name}: latency CDF (p50/p90/p99 dotted)")
    _save(fig, path)


def time_breakdown(result: SimResult, path: str | Path) -> None:
    """Stacked mean µs per MoE layer of its parts (`layer_stack`); where overlap makes the
    layer shorter than its parts, the layer's time as a black line inside each bar."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    parts, marks = layer_stack(result.layer_mean_us,
                               result.scenario.deployment.enable_two_batch_overlap)
    layer_us = np.asarray(result.layer_mean_us["layer_us"], dtype=np.float64)
    layers = np.arange(layer_us.shape[0])
    bottom = np.zeros(layers.shape[0])
    if not parts or not np.isfinite(layer_us).any():       # no step in the measurement window
        _no_data(ax, "no step measured")
        parts, marks = {}, None
    for name, values in parts.items():
        ax.bar(layers, values, bottom=bottom, color=_PART_COLORS[name], width=0.9, label=name)
        bottom += values
    if marks is not None:
        ax.hlines(layer_us, layers - 0.45, layers + 0.45, colors="black", lw=1.5, label=marks)
    ax.set_xlabel("MoE layer")
    ax.set_ylabel("mean time per step (µs)")
    if parts:
        ax.legend(ncol=min(len(parts) + (marks is not None), 4), fontsize=8, loc="upper center",
                  bbox_to_anchor=(0.5, -0.15))
    ax.set_title(f"{result.scenario.name}: mean time per MoE layer and step, by part")
    _save(fig, path)


def rank_load(result: SimResult, path: str | Path) -> None:
    """Token-expert pairs per rank relative to the mean: averaged over layers and measured steps
    (left), and per layer in the run's last step (right), where the skew shows."""
    plt = _pyplot()
    load = result.rank_pairs_mean
    rel = load / load.mean() if load.mean() > 0 else np.ones_like(load)
    measured = result.steps["start_us"] >= result.warmup_s * 1e6
    per_step = result.steps["imbalance"][measured].mean() if measured.any() else float("nan")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 2]})
    left.bar(np.arange(load.shape[0]), rel, color="#55a868", width=0.85)
    left.axhline(1.0, color="gray", lw=0.8)
    left.set_xlabel("EP rank")
    left.set_ylabel("pairs / mean")
    left.set_title(f"mean over layers and steps; per-step max/mean {per_step:.2f}", fontsize=10)
    if result.last_step is not None:
        pairs = result.last_step.cost.traffic.pairs                     # [layers, ranks]
        mean = pairs.mean(axis=1, keepdims=True)
        image = right.imshow(np.divide(pairs, mean, out=np.ones_like(pairs), where=mean > 0),
                             aspect="auto", cmap="viridis", interpolation="nearest")
        fig.colorbar(image, ax=right, label="pairs / layer mean")
        right.set_xlabel("EP rank")
        right.set_ylabel("MoE layer")
        right.set_title("last step, per layer", fontsize=10)
    fig.suptitle(f"{result.scenario.name}: load per rank")
    _save(fig, path)


def _mark_events(ax, result: SimResult) -> None:
    """Rebalances as dotted lines (spans where they stall), failures red, recoveries green."""
    for event in result.rebalances:
        ax.axvline(event["at_s"], color="tab:purple", ls=":", lw=0.8)
        if event["stall_us"] > 0:
            ax.axvspan(event["at_s"], event["at_s"] + event["stall_us"] * 1e-6, color="tab:purple", alpha=0.15)
    for event in result.elastic_events:
        color = "tab:red" if event["kind"] == "failure" else "tab:green"
        ax.axvline(event["at_s"], color=color, lw=1.2)
        if event["stall_us"] > 0:
            ax.axvspan(event["at_s"], event["at_s"] + event["stall_us"] * 1e-6, color=color, alpha=0.15)


def eplb_timeline(result: SimResult, path: str | Path) -> None:
    """Per-step balancedness and step time over simulated time; rebalances (purple, stalls
    shaded), failures (red) and recoveries (green) marked."""
    plt = _pyplot()
    steps = result.steps
    t_s = steps["start_us"] * 1e-6
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    top.plot(t_s, steps["balancedness"], lw=0.8, color="#4c72b0")
    for event in result.rebalances:
        top.plot([event["at_s"]], [event["balancedness_after"]], "v", color="tab:purple", ms=5)
    top.set_ylabel("balancedness (mean/max)")
    top.set_ylim(0, 1.02)
    bottom.plot(t_s, steps["step_us"] * 1e-3, lw=0.8, color="#55a868")
    bottom.set_ylabel("step time (ms)")
    bottom.set_xlabel("simulated time (s)")
    for ax in (top, bottom):
        _mark_events(ax, result)
        ax.grid(alpha=0.3)
    num = len(result.rebalances)
    top.set_title(f"per step; {num} rebalance(s) dotted, window balancedness after each as triangles",
                  fontsize=9)
    fig.suptitle(f"{result.scenario.name}: balance and step time over time")
    _save(fig, path)


def failure_latency(result: SimResult, path: str | Path, window_s: float | None = None,
                    baseline: SimResult | None = None) -> None:
    """TTFT (by arrival), inter-token gap (by token) and step time over time across failures, in windows
    of `window_s` (default: 1/40 of the run); `baseline` (the same run without failures) dashed."""
    plt = _pyplot()
    window_s = window_s or result.duration_s / 40
    w = latency_windows(result, window_s)
    base = latency_windows(baseline, window_s) if baseline is not None else None
    fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True)
    for ax, key, label in zip(axes, ("ttft_ms", "tpot_ms", "step_ms"),
                              ("TTFT (ms), by arrival", "time per output token (ms),\nstalls included",
                               "step time (ms)")):
        ax.plot(w["t_s"], w[key], marker=".", lw=1.0, label="with the failure(s)")
        if base is not None:
            ax.plot(base["t_s"], base[key], ls="--", color="0.5", lw=1.0, label="without")
        ax.set_ylabel(label, fontsize=9)
        _mark_events(ax, result)
        ax.grid(alpha=0.3)
    if base is not None:
        axes[0].legend(fontsize=8)
    axes[-1].set_xlabel(f"simulated time (s), {window_s:g}-s windows")
    lost = int(result.lost.sum()) if result.lost is not None else 0
    fig.suptitle(f"{result.scenario.name}: latency across failures (red) and recoveries (green); "
                 f"{lost} requests lost")
    _save(fig, path)


def write_figures(result: SimResult, out_dir: str | Path) -> list[Path]:
    """Write `latency_cdf.png`, `time_breakdown.png`, `rank_load.png`, and with EPLB or failures
    `eplb_timeline.png`, with failures `failure_latency.png`; returns the paths."""
    out_dir = Path(out_dir)
    paths = [out_dir / "latency_cdf.png", out_dir / "time_breakdown.png", out_dir / "rank_load.png"]
    latency_cdf(result, paths[0])
    time_breakdown(result, paths[1])
    rank_load(result, paths[2])
    d = result.scenario.deployment
    if d.enable_eplb or d.failures:
        paths.append(out_dir / "eplb_timeline.png")
        eplb_timeline(result, paths[-1])
    if d.failures:
        paths.append(out_dir / "failure_latency.png")
        failure_latency(result, paths[-1])
    return paths
