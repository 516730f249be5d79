"""Two runs side by side (`epsim compare`, the app's Compare page): what differs between their
scenarios, their latencies, throughput and serving numbers with the deltas, and where a MoE
layer's time moved (attention, dispatch, experts, combine, block ops) -- the "mooncake or
deepep, and why" question. Works on `summary.json`s (`epsim.report.summarize`), so a run made
earlier compares with one made now.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from epsim.text import brief

# (label, path into the summary, unit); a path is a tuple of keys
METRICS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("TPOT p50", ("tpot_ms", "p50"), "ms"), ("TPOT p99", ("tpot_ms", "p99"), "ms"),
    ("TTFT p50", ("ttft_ms", "p50"), "ms"), ("TTFT p99", ("ttft_ms", "p99"), "ms"),
    ("step p50", ("step_ms", "p50"), "ms"),
    ("throughput per GPU", ("throughput_tokens_per_s_per_gpu",), "tok/s"),
    ("output per GPU", ("output_tokens_per_s_per_gpu",), "tok/s"),
    ("offered", ("serving", "offered_rps"), "req/s"), ("served", ("serving", "served_rps"), "req/s"),
    ("balancedness", ("balancedness",), ""),
    ("measured share of step", ("provenance", "measured_share"), "%"),
)
# a MoE layer's parts (summary keys `<part>_us`, [moe_layers] mean per measured step)
PARTS = ("attention", "dispatch", "experts", "combine", "block_ops")


@dataclass(frozen=True)
class Row:
    """One compared quantity: its label, unit, the two values and B - A (None: missing)."""

    label: str
    unit: str
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or not self.a:
            return None
        return 100.0 * self.delta / abs(self.a)


def _get(summary: dict, path: tuple[str, ...]) -> float | None:
    value = summary
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    value = float(value)
    return None if math.isnan(value) else value


def _scale(row_unit: str, value: float | None) -> float | None:
    return None if value is None else value * 100.0 if row_unit == "%" else value


def metric_rows(a: dict, b: dict) -> list[Row]:
    """Latencies, throughput, serving numbers, balance and measured share of both runs."""
    return [Row(label, unit, _scale(unit, _get(a, path)), _scale(unit, _get(b, path)))
            for label, path, unit in METRICS]


def layer_means_us(summary: dict) -> dict[str, float]:
    """Mean µs per MoE layer of each part and of the whole layer (the mean over layers of the
    summary's per-layer means)."""
    out = {}
    for part in PARTS + ("layer",):
        values = summary.get(f"{part}_us") or []
        if values:
            out[part] = sum(values) / len(values)
    return out


def layer_rows(a: dict, b: dict) -> list[Row]:
    """The MoE layer's split in both runs (µs), part by part, then the layer."""
    la, lb = layer_means_us(a), layer_means_us(b)
    return [Row(part.replace("_", " ") if part != "layer" else "MoE layer", "µs", la.get(part), lb.get(part))
            for part in PARTS + ("layer",) if part in la or part in lb]


def scenario_diff(a: dict, b: dict) -> list[tuple[str, object, object]]:
    """(dotted path, A's value, B's value) of every scenario field that differs."""
    out: list[tuple[str, object, object]] = []

    def walk(x, y, path):
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                if key not in ("description", "base_dir"):
                    walk(x.get(key), y.get(key), f"{path}.{key}" if path else key)
        elif x != y:
            out.append((path, x, y))
    walk(a.get("scenario", {}), b.get("scenario", {}), "")
    return out


def why_line(a: dict, b: dict) -> str:
    """Where the MoE layer's time moved: `MoE layer -150 µs (-27 %): dispatch -80 µs, combine
    -70 µs, ...`, parts by the size of their change (a part that moved < 1 % of the layer left
    out)."""
    rows = {r.label: r for r in layer_rows(a, b)}
    layer = rows.get("MoE layer")
    if layer is None or layer.delta is None:
        return "no per-layer times to compare"
    parts = sorted((r for name, r in rows.items() if name != "MoE layer" and r.delta is not None),
                   key=lambda r: -abs(r.delta))
    big = [r for r in parts if abs(r.delta) >= 0.01 * (layer.a or 1.0)]
    moved = ", ".join(f"{r.label} {r.delta:+.1f} µs" for r in big) or "no part moved by 1 %"
    pct = "" if layer.delta_pct is None else f" ({layer.delta_pct:+.1f} %)"
    return f"MoE layer {layer.delta:+.1f} µs{pct} from A to B: {moved}"


def describe(summary: dict) -> str:
    """`default: Qwen3-30B-A3B on 8 x H200, EP 8, mooncake` of a run."""
    sc = summary.get("scenario", {})
    d = sc.get("deployment", {})
    return (f"{sc.get('name', '?')}: {sc.get('model', {}).get('name', '?')} on {d.get('ep_size', '?')} x "
            f"{sc.get('cluster', {}).get('gpu', '?')}, EP {d.get('ep_size', '?')}, "
            f"{d.get('moe_a2a_backend', '?')}")


def cell(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else brief(value, digits)


def delta_cell(row: Row) -> str:
    if row.delta is None:
        return "-"
    pct = "" if row.delta_pct is None else f" ({row.delta_pct:+.1f} %)"
    return f"{row.delta:+.4g}{pct}"


def comparison(a: dict, b: dict) -> dict:
    """Everything `epsim compare --json` prints: both runs named, the differing fields, the
    metric and layer rows, the why line."""
    def rows(items):
        return [{"label": r.label, "unit": r.unit, "a": r.a, "b": r.b, "delta": r.delta,
                 "delta_pct": r.delta_pct} for r in items]
    return {"a": describe(a), "b": describe(b),
            "differs": [{"field": f, "a": x, "b": y} for f, x, y in scenario_diff(a, b)],
            "metrics": rows(metric_rows(a, b)), "layer_us": rows(layer_rows(a, b)),
            "why": why_line(a, b)}
