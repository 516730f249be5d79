"""Error tables of a validation: MAPE and worst case by kind and backend, by skew, by size, by
shape, and the skew effect (hot set against uniform at the same point) measured and predicted.

Everything here is deterministic in its input (sorted, fixed formats, no clock), so the same
records and profile give the same markdown byte for byte — the documented table regenerates.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from epsim.io.write import replacing_file
from epsim.validate.compare import Comparison

KINDS = ("dispatch", "combine", "experts", "moe_layer", "allreduce", "attention_prefill",
         "attention_decode", "dense_mlp", "block_ops", "attention_block")
JUDGED_KINDS = ("dispatch", "combine", "experts", "moe_layer", "attention_prefill",
                "attention_decode", "dense_mlp", "block_ops", "attention_block")
SIZE_BUCKETS = ((1, 16, "1-16"), (17, 256, "32-256"), (257, 1 << 30, "512+"))
SIGNIFICANT_EFFECT_PCT = 5.0     # a skew effect below this is within run-to-run noise


@dataclass(frozen=True)
class ErrorStats:
    """Errors of a group of comparisons."""

    num: int
    mape: float
    worst: float
    worst_at: str
    bias: float           # mean signed error, %

    @classmethod
    def of(cls, rows: list[Comparison]) -> "ErrorStats":
        apes = np.array([r.ape for r in rows])
        worst = rows[int(apes.argmax())]
        return cls(len(rows), float(apes.mean()), float(apes.max()),
                   f"{worst.model} {worst.dispatch_dtype} {worst.skew} T={worst.tokens}",
                   float(np.mean([r.error_pct for r in rows])))


@dataclass(frozen=True)
class SkewEffect:
    """Hot set against uniform at one point (backend, kind, shape, dtype, tokens)."""

    backend: str
    kind: str
    model: str
    dispatch_dtype: str
    tokens: int
    uniform_us: float
    hotset_us: float
    predicted_uniform_us: float
    predicted_hotset_us: float
    hotset_error_pct: float

    @property
    def measured_pct(self) -> float:
        return (self.hotset_us / self.uniform_us - 1.0) * 100.0

    @property
    def predicted_pct(self) -> float:
        return (self.predicted_hotset_us / self.predicted_uniform_us - 1.0) * 100.0

    @property
    def significant(self) -> bool:
        return abs(self.measured_pct) >= SIGNIFICANT_EFFECT_PCT

    @property
    def sign_ok(self) -> bool:
        return np.sign(self.measured_pct) == np.sign(self.predicted_pct)


def _order(key: tuple) -> tuple:
    return tuple(KINDS.index(k) if k in KINDS else k for k in key)


def group(rows: list[Comparison], *fields: str) -> dict[tuple, ErrorStats]:
    """ErrorStats per distinct value of `fields`, sorted (kinds in pipeline order)."""
    groups: dict[tuple, list[Comparison]] = defaultdict(list)
    for r in rows:
        groups[tuple(getattr(r, f) for f in fields)].append(r)
    return {k: ErrorStats.of(groups[k]) for k in sorted(groups, key=_order)}


def size_bucket(tokens: int) -> str:
    return next(label for lo, hi, label in SIZE_BUCKETS if lo <= tokens <= hi)


def skew_effects(rows: list[Comparison]) -> list[SkewEffect]:
    """Pairs of hot-set and uniform records at the same point."""
    by_point: dict[tuple, dict[str, Comparison]] = defaultdict(dict)
    for r in rows:
        kind = r.skew.split(":")[0]
        if kind in ("uniform", "hotset"):
            by_point[(r.backend, r.kind, r.model, r.dispatch_dtype, r.tokens)][kind] = r
    out = []
    for key in sorted(by_point, key=_order):
        pair = by_point[key]
        if len(pair) == 2:
            u, h = pair["uniform"], pair["hotset"]
            out.append(SkewEffect(*key, u.measured_us, h.measured_us, u.predicted_us,
                                  h.predicted_us, h.error_pct))
    return out


def verdict(rows: list[Comparison], max_mape: float) -> dict[tuple[str, str], bool]:
    """(backend, kind) -> held-out MAPE <= max_mape, for the judged kinds."""
    held = [r for r in rows if r.split == "holdout" and r.kind in JUDGED_KINDS]
    return {k: s.mape <= max_mape for k, s in group(held, "backend", "kind").items()}


def summary_rows(rows: list[Comparison]) -> list[dict]:
    """One dict per (backend, kind) with held-out records: `backend`, `kind`, every
    `ErrorStats` field of the held-out records (whatever fields it has, so new ones such as
    baselines flow through to `epsim validate`'s summary), and `fit_mape` (in-sample, None
    without fit-set records)."""
    held = group([r for r in rows if r.split == "holdout"], "backend", "kind")
    fit = group([r for r in rows if r.split == "fit"], "backend", "kind")
    return [{"backend": backend, "kind": kind, **asdict(stats),
             "fit_mape": fit[(backend, kind)].mape if (backend, kind) in fit else None}
            for (backend, kind), stats in held.items()]


def _stats_table(title: str, header: list[str], stats: dict[tuple, ErrorStats],
                 max_mape: float | None = None) -> list[str]:
    cols = header + ["records", "MAPE %", "worst %", "worst at", "bias %"]
    if max_mape is not None:
        cols.append(f"MAPE <= {max_mape:g}%")
    lines = [f"**{title}**", "", "| " + " | ".join(cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for key, s in stats.items():
        cells = [str(k) for k in key] + [str(s.num), f"{s.mape:.1f}", f"{s.worst:.1f}", s.worst_at,
                                         f"{s.bias:+.1f}"]
        if max_mape is not None:
            cells.append("yes" if s.mape <= max_mape else "**no**")
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _effects_table(effects: list[SkewEffect]) -> list[str]:
    agg: dict[tuple, list[SkewEffect]] = defaultdict(list)
    for e in effects:
        agg[(e.backend, e.dispatch_dtype, e.kind)].append(e)
    cols = ["backend", "dtype", "kind", "points", "measured effect > 5%", "right sign",
            "measured effect (median %)", "predicted effect (median %)", "hot-set MAPE %",
            "largest measured effect: measured / predicted %"]
    lines = ["**Hot set on rank 0 against uniform, same point** (effect = hot set / uniform - 1)",
             "", "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for key in sorted(agg, key=_order):
        es = agg[key]
        sig = [e for e in es if e.significant]
        top = max(es, key=lambda e: abs(e.measured_pct))
        lines.append("| " + " | ".join([
            *key, str(len(es)), str(len(sig)), f"{sum(e.sign_ok for e in sig)}/{len(sig)}",
            f"{np.median([e.measured_pct for e in es]):+.1f}",
            f"{np.median([e.predicted_pct for e in es]):+.1f}",
            f"{np.mean([abs(e.hotset_error_pct) for e in es]):.1f}",
            f"{top.measured_pct:+.1f} / {top.predicted_pct:+.1f} ({top.model} T={top.tokens})"]) + " |")
    return lines + [""]


def markdown(rows: list[Comparison], header: dict[str, str], max_mape: float = 10.0) -> str:
    """The validation report as markdown (what `--doc` writes into docs/validation.md)."""
    held = [r for r in rows if r.split == "holdout"]
    fit = [r for r in rows if r.split == "fit"]
    lines = [f"- {k}: {v}" for k, v in header.items()] + [""]
    if held:
        lines += _stats_table(f"Held out ({len(held)} records): error by backend and kind",
                              ["backend", "kind"], group(held, "backend", "kind"), max_mape)
        lines += _stats_table("Held out: by skew", ["backend", "kind", "skew"],
                              group(held, "backend", "kind", "skew"))
        sized = [_with_bucket(r) for r in held]
        lines += _stats_table("Held out: by tokens per rank", ["backend", "kind", "tokens"],
                              group(sized, "backend", "kind", "tokens"))
        lines += _stats_table("Held out: by shape and dispatch dtype",
                              ["backend", "model", "dtype"],
                              group(held, "backend", "model", "dispatch_dtype"))
    if fit:
        lines += _stats_table(f"Fit set ({len(fit)} records, in-sample): error by backend and kind",
                              ["backend", "kind"], group(fit, "backend", "kind"))
    effects = skew_effects(rows)
    if effects:
        lines += _effects_table(effects)
    return "\n".join(lines).rstrip() + "\n"


def _with_bucket(r: Comparison) -> Comparison:
    """A copy whose `tokens` is its size bucket label (for grouping by size)."""
    return replace(r, tokens=size_bucket(r.tokens))


def write_csv(rows: list[Comparison], effects: list[SkewEffect], out: Path) -> list[Path]:
    """comparisons.csv (one row per record), summary.csv (per backend, kind, split),
    skew_effect.csv (per hot-set / uniform pair). Returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "comparisons.csv", out / "summary.csv", out / "skew_effect.csv"]
    with replacing_file(paths[0], newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["where", "split", "backend", "kind", "model", "dispatch_dtype", "skew", "tokens",
                    "measured_us", "predicted_us", "error_pct", "p10_us", "p90_us", "outside_range"])
        for r in rows:
            w.writerow([r.where, r.split, r.backend, r.kind, r.model, r.dispatch_dtype, r.skew,
                        r.tokens, f"{r.measured_us:.2f}", f"{r.predicted_us:.2f}",
                        f"{r.error_pct:.2f}", f"{r.p10_us:.2f}", f"{r.p90_us:.2f}", int(r.outside)])
    with replacing_file(paths[1], newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["split", "backend", "kind", "records", "mape_pct", "worst_pct", "worst_at",
                    "bias_pct"])
        for split in ("holdout", "fit"):
            part = [r for r in rows if r.split == split]
            for (backend, kind), s in group(part, "backend", "kind").items():
                w.writerow([split, backend, kind, s.num, f"{s.mape:.2f}", f"{s.worst:.2f}",
                            s.worst_at, f"{s.bias:.2f}"])
    with replacing_file(paths[2], newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["backend", "kind", "model", "dispatch_dtype", "tokens", "uniform_us",
                    "hotset_us", "measured_effect_pct", "predicted_effect_pct", "sign_ok",
                    "hotset_error_pct"])
        for e in effects:
            w.writerow([e.backend, e.kind, e.model, e.dispatch_dtype, e.tokens,
                        f"{e.uniform_us:.2f}", f"{e.hotset_us:.2f}", f"{e.measured_pct:.2f}",
                        f"{e.predicted_pct:.2f}", int(e.sign_ok), f"{e.hotset_error_pct:.2f}"])
    return paths
