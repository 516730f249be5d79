"""A plan's figures: the Pareto frontier (`pareto.png`) and metrics along the sweep (`sweep.png`);
axes named for people with their units (`epsim.plan.columns.column_label`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from epsim.io.write import write_figure
from epsim.plan.columns import column_label

_MAX_LINES = 8


def _label(metric: str) -> str:
    return column_label(metric)


def _raw(result, key: str | None) -> list:
    """A column's values as given in the sweep (ints stay ints in labels)."""
    return [row.get(key) if key else None for row in result.rows]


def _is_numeric(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def pareto_figure(result):
    """Scatter of the first two Pareto objectives, coloured by the third (every point with a
    value: feasible ones filled, the rest as crosses, so the colour bar spans the sweep), the
    frontier ringed, the best point starred, constraint bounds dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.0))
    x_obj, y_obj = result.pareto[0], result.pareto[min(1, len(result.pareto) - 1)]
    x, y = result.column(x_obj.metric), result.column(y_obj.metric)
    feasible = result.column("feasible").astype(bool)
    miss_label = ("misses a constraint or keep-up" if (result.constraints or result.keep_up)
                  and not feasible.all() else None)
    if len(result.pareto) > 2:
        c_metric = result.pareto[2].metric
        color = result.column(c_metric)
        finite = np.isfinite(color)
        norm = None
        if finite.any():
            import matplotlib.colors as mcolors
            norm = mcolors.Normalize(vmin=float(color[finite].min()), vmax=float(color[finite].max()))
        shown = feasible & finite
        ax.scatter(x[shown], y[shown], c=color[shown], cmap="viridis", norm=norm, s=30, zorder=2,
                   label="meets every constraint")
        ax.scatter(x[~feasible & finite], y[~feasible & finite], c=color[~feasible & finite],
                   cmap="viridis", norm=norm, marker="x", s=30, zorder=2, label=miss_label)
        ax.scatter(x[~finite], y[~finite], s=14, color="0.75", zorder=1)
        if norm is not None:
            fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap="viridis"), ax=ax,
                         label=_label(c_metric))
    else:
        ax.scatter(x[feasible], y[feasible], s=30, color="tab:blue", zorder=2,
                   label="meets every constraint")
        ax.scatter(x[~feasible], y[~feasible], s=30, marker="x", color="0.5", zorder=1,
                   label=miss_label)
    front = np.array(result.frontier, dtype=int)
    if front.size:
        ax.scatter(x[front], y[front], s=90, facecolors="none", edgecolors="tab:red", linewidths=1.2,
                   zorder=3, label="Pareto frontier")
    best = result.column("best").astype(bool)         # one per workload point
    if best.any():
        ax.scatter(x[best], y[best], marker="*", s=260, color="gold", edgecolors="black", zorder=4,
                   label="chosen" if best.sum() == 1 else "chosen, one per workload point")
    for c in result.constraints:
        if c.metric == y_obj.metric:
            ax.axhline(c.bound, color="tab:red", linestyle="--", linewidth=1, label=c.text)
        elif c.metric == x_obj.metric:
            ax.axvline(c.bound, color="tab:red", linestyle="--", linewidth=1, label=c.text)
    better = {"min": "lower is better", "max": "higher is better"}
    ax.set_xlabel(f"{_label(x_obj.metric)}, {better[x_obj.sense]}")
    ax.set_ylabel(f"{_label(y_obj.metric)}, {better[y_obj.sense]}")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:     # outside the data, under the axes
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)
    ax.set_title(f"{len(result.rows)} configurations, {len(result.frontier)} on the frontier")
    fig.tight_layout()
    return fig


def _metrics_to_show(result, limit: int = 4) -> list[str]:
    names = [o.metric for o in result.pareto] + [c.metric for c in result.constraints] \
        + [o.metric for o in result.objectives]
    keys = set(result.keys)
    shown: list[str] = []
    for name in names:
        if name not in shown and name not in keys and name != "num_gpus":
            shown.append(name)
    return shown[:limit]


def sweep_figure(result):
    """Metrics against the first swept key, one line per value of the second (the median over
    the other keys), constraint bounds dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = _metrics_to_show(result)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6), squeeze=False)
    keys = result.keys
    x_key = keys[0] if keys else None
    x = [str(v) for v in _raw(result, x_key)]
    numeric = _is_numeric(_raw(result, x_key)) and x_key is not None
    if numeric:
        x = _raw(result, x_key)
    x_levels = sorted(set(x), key=lambda v: v if numeric else x.index(v))
    pos = {v: i for i, v in enumerate(x_levels)}
    group_key = keys[1] if len(keys) > 1 else None
    groups = [str(v) for v in _raw(result, group_key)]
    group_levels = sorted(set(groups), key=groups.index)[:_MAX_LINES]
    for ax, metric in zip(axes[0], metrics):
        y = result.column(metric)
        for level in group_levels:
            in_group = np.array([g == level for g in groups])
            xs, ys = [], []
            for xv in x_levels:
                sel = in_group & np.array([v == xv for v in x]) & np.isfinite(y)
                if sel.any():
                    xs.append(xv if numeric else pos[xv])
                    ys.append(float(np.median(y[sel])))
            label = str(level) if group_key else None
            ax.plot(xs, ys, marker="o", markersize=3, label=label)
        for c in result.constraints:
            if c.metric == metric:
                ax.axhline(c.bound, color="tab:red", linestyle="--", linewidth=1)
        if not numeric:
            ax.set_xticks(range(len(x_levels)), [str(v) for v in x_levels], rotation=30)
        ax.set_xlabel(_label(x_key) if x_key else "")
        ax.set_ylabel(_label(metric))
        ax.set_title(_label(metric), fontsize=10)
        ax.grid(alpha=0.3)
    if group_key:                              # one legend for all panels, outside the data
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=min(len(labels), 6),
                   frameon=False, title=_label(group_key))
    extra = f"; median over {', '.join(_label(k) for k in keys[2:])}" if len(keys) > 2 else ""
    fig.suptitle(f"along the sweep{extra}", fontsize=9)
    fig.tight_layout(rect=(0, 0.12 if group_key else 0, 1, 1))
    return fig


def write_plots(result, out: Path) -> list[Path]:
    """Write `pareto.png` and `sweep.png` to `out`; returns the paths."""
    import matplotlib.pyplot as plt
    paths = []
    for name, make in (("pareto.png", pareto_figure), ("sweep.png", sweep_figure)):
        if name == "sweep.png" and not _metrics_to_show(result):
            continue
        fig = make(result)
        try:                                    # legends sit outside the axes
            paths.append(write_figure(fig, Path(out) / name, bbox_inches="tight"))
        finally:
            plt.close(fig)
    return paths
