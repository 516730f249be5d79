"""Scaling validation: what a profile predicts `live.bench.sweep` will measure at EP sizes it was
not fitted on, written down before the measurement, and the comparison once it is measured.

For the bench's grid (`epsim.calibrate.grid`), `predict_grid` gives the predicted dispatch,
combine, experts and moe_layer times of `epsim.cost.predict_record` on exactly the counts the
bench will record. The bench draws each rank's expert choices as `SkewModel.topk` with
`np.random.default_rng([seed, rank, tokens])` (`live.bench.sweep_worker.measure_point`,
`live.routing.forced_routing`) on the identity placement (experts `[r * E/N, (r+1) * E/N)` on
rank r), so `bench_counts` redraws them in numpy and derives the record's counts: copies crossing
links (torch: one per token and destination rank; mooncake: one per token and expert), pairs per
local expert and per rank. `compare` then matches measured records to the predictions.
`benchmarks/scaling_predict.py` is the command line (files, plot, git provenance).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from epsim.calibrate.grid import CPU_SHAPES, Shape
from epsim.calibrate.inputs import load_records, merge_passes
from epsim.cost.comm import dedup_for
from epsim.cost.record import predict_record
from epsim.errors import RecordError, SpecError
from epsim.profile import Profile, mode_path
from epsim.records import MeasurementRecord, Provenance, read_text
from epsim.routing import skew_from_dict
from epsim.validate.compare import Comparison, skew_label
from epsim.validate.table import ErrorStats, group
from epsim.zoo import get_model

KINDS = ("dispatch", "combine", "experts", "moe_layer")
MAX_MAPE_PCT = 10.0                                                # the goal per kind


@dataclass(frozen=True)
class BenchCounts:
    """The per-rank counts a bench record of one point carries.

    Attributes:
        send_tokens_per_rank, recv_tokens_per_rank: [ranks] copies each rank sent to / received
            from *other* ranks (copies to itself cross no link).
        expert_tokens_per_rank: [ranks] (token, expert) pairs each rank's experts compute.
        local_expert_tokens: [ranks, experts / ranks] pairs per local expert.
    """

    send_tokens_per_rank: list[float]
    recv_tokens_per_rank: list[float]
    expert_tokens_per_rank: list[float]
    local_expert_tokens: list[list[float]]


def zoo_shape(name: str) -> Shape:
    spec = get_model(name)
    return Shape(name, spec.hidden_size, spec.moe_intermediate_size, spec.num_experts, spec.top_k)


def cpu_shapes() -> list[Shape]:
    """The bench's CPU (gloo) shapes."""
    return list(CPU_SHAPES.values())



@lru_cache(maxsize=4096)
def _rank_matrices(skew_json: str, num_experts: int, top_k: int, ep_size: int, tokens: int,
                   seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bench's draws of one point: (pairs [src, dst], tokens [src, dst], pairs per expert).

    Rank r draws `skew.topk(tokens, default_rng([seed, r, tokens]), layer=0)` of a one-layer
    SkewModel seeded with `seed`, as `live.bench.sweep_worker.measure_point` does.
    """
    skew = skew_from_dict(json.loads(skew_json), 1, num_experts, top_k, seed=seed)
    experts_per_rank = num_experts // ep_size
    pairs = np.zeros((ep_size, ep_size))
    token_copies = np.zeros((ep_size, ep_size))
    per_expert = np.zeros(num_experts)
    for rank in range(ep_size):
        ids = skew.topk(tokens, np.random.default_rng([seed, rank, tokens]), layer=0)  # [tokens, top_k]
        dest = ids // experts_per_rank                                                # [tokens, top_k]
        pairs[rank] = np.bincount(dest.ravel(), minlength=ep_size)
        token_copies[rank] = (dest[:, :, None] == np.arange(ep_size)).any(axis=1).sum(axis=0)
        per_expert += np.bincount(ids.ravel(), minlength=num_experts)
    return pairs, token_copies, per_expert


def bench_counts(skew: dict, shape: Shape, ep_size: int, tokens: int, backend: str,
                 seed: int = 0) -> BenchCounts:
    """Counts `live.bench.sweep` records for one point, from the same draws (no torch).

    Raises:
        SpecError: experts not divisible by ep_size, or a backend without dispatch copies.
    """
    if ep_size < 2 or shape.num_experts % ep_size:
        raise SpecError(f"ep_size ({ep_size}) must be >= 2 and divide num_experts "
                        f"({shape.num_experts}) of {shape.name}")
    dedup = dedup_for(backend)
    if dedup not in ("rank", "pair"):
        raise SpecError(f"backend ({backend!r}) must be 'torch' or 'mooncake' for bench counts")
    pairs, token_copies, per_expert = _rank_matrices(
        json.dumps(skew, sort_keys=True), shape.num_experts, shape.top_k, ep_size, tokens, seed)
    copies = (token_copies if dedup == "rank" else pairs) * (1.0 - np.eye(ep_size))   # [src, dst]
    local = per_expert.reshape(ep_size, -1)                                           # [ranks, E/N]
    return BenchCounts(copies.sum(axis=1).tolist(), copies.sum(axis=0).tolist(),
                       local.sum(axis=1).tolist(), local.tolist())


def point_record(shape: Shape, backend: str, dispatch_dtype: str, skew: dict, tokens: int,
                 ep_size: int, kind: str, counts: BenchCounts, hardware: str,
                 seed: int = 0) -> MeasurementRecord:
    """A MeasurementRecord of the configuration with no timing yet (`model_construct`: a record
    the bench will fill in; `predict_record` reads only the configuration and counts)."""
    return MeasurementRecord.model_construct(
        kind=kind, backend=backend, mode="", ep_size=ep_size, num_tokens_per_rank=tokens,
        hidden_size=shape.hidden_size, moe_intermediate_size=shape.moe_intermediate_size,
        num_experts=shape.num_experts, num_physical_experts=shape.num_experts, top_k=shape.top_k,
        model=shape.name, dispatch_dtype=dispatch_dtype, skew=skew, seed=seed, num_layers=1,
        send_tokens_per_rank=counts.send_tokens_per_rank,
        recv_tokens_per_rank=counts.recv_tokens_per_rank,
        expert_tokens_per_rank=counts.expert_tokens_per_rank,
        local_expert_tokens=counts.local_expert_tokens,
        provenance=Provenance(device="prediction", hardware=hardware))


def fitted_ep_range(profile: Profile, backend: str, kind: str, dispatch_dtype: str) -> list[float]:
    """[lo, hi] EP sizes the components a prediction uses were fitted on (all parts for moe_layer)."""
    parts = ("dispatch", "combine", "experts") if kind == "moe_layer" else (kind,)
    ranges = []
    for part in parts:
        comp = profile.component(backend, part, mode_path("", part, dispatch_dtype))
        if comp is not None and comp.source == "fit" and "ep_size" in comp.valid_range:
            ranges.append(comp.valid_range["ep_size"])
    if not ranges:
        return []
    return [max(r[0] for r in ranges), min(r[1] for r in ranges)]



def counts_json(counts: BenchCounts, kind: str) -> dict:
    """The counts of a prediction line; `local_expert_tokens` (the bulk of the file) only on
    the dispatch line of a point: every kind of a point carries the same counts."""
    out = {k: [int(v) for v in getattr(counts, k)]
           for k in ("send_tokens_per_rank", "recv_tokens_per_rank", "expert_tokens_per_rank")}
    if kind == "dispatch":
        out["local_expert_tokens"] = [[int(v) for v in row] for row in counts.local_expert_tokens]
    return out


def profile_provenance(profile_path: Path) -> dict:
    """The profile a prediction came from: name and sha256 of the file."""
    return {"profile": {"name": Profile.load(profile_path).name,
                        "sha256": hashlib.sha256(profile_path.read_bytes()).hexdigest()}}


def predict_grid(profile_path: Path, shapes: list[Shape], cases, skews, tokens, ep_sizes,
                 seed: int = 0, provenance: dict | None = None) -> list[dict]:
    """One prediction dict per (model, backend, dtype, skew, tokens, ep, kind), grid order.

    Args:
        provenance: fields every line carries besides the profile's (e.g. the epsim commit).
    """
    profile = Profile.load(profile_path)
    prov = {**profile_provenance(profile_path), **(provenance or {})}
    out = []
    for shape in shapes:
        for backend, dtype in cases:
            for skew in skews:
                for ep in ep_sizes:
                    for t in tokens:
                        counts = bench_counts(skew, shape, ep, t, backend, seed)
                        for kind in KINDS:
                            rec = point_record(shape, backend, dtype, skew, t, ep, kind, counts,
                                               profile.hardware, seed)
                            fitted = fitted_ep_range(profile, backend, kind, dtype)
                            out.append({
                                "model": shape.name, "backend": backend, "mode": "",
                                "dispatch_dtype": dtype,
                                "skew": skew_label(skew), "num_tokens_per_rank": t,
                                "ep_size": ep, "kind": kind,
                                "predicted_us": round(predict_record(rec, profile), 3),
                                "fitted_ep_size": fitted,
                                "extrapolated_ep": bool(fitted) and not fitted[0] <= ep <= fitted[1],
                                "hidden_size": shape.hidden_size,
                                "moe_intermediate_size": shape.moe_intermediate_size,
                                "num_experts": shape.num_experts, "top_k": shape.top_k,
                                "seed": seed, "counts": counts_json(counts, kind), **prov})
    return out


KEY_FIELDS = ("model", "backend", "mode", "dispatch_dtype", "skew", "num_tokens_per_rank",
              "ep_size", "kind")


def key_of(prediction: dict) -> tuple:
    """What a prediction line and the record measuring it share (mode: "" eager, the bench's
    launched-ahead `graph` records are another configuration)."""
    return tuple(prediction[f] for f in KEY_FIELDS)


def record_key(record: MeasurementRecord) -> tuple:
    return (record.model, record.backend, record.mode, record.dispatch_dtype,
            skew_label(record.skew), record.num_tokens_per_rank, record.ep_size, record.kind)


def read_predictions(path: Path) -> dict[tuple, dict]:
    """Prediction lines keyed by `key_of`."""
    if not path.is_file():
        raise RecordError(f"predictions ({path}) must be a file written by this script")
    out = {}
    for line in read_text(path).splitlines():
        if line.strip():
            p = json.loads(line)
            out[key_of(p)] = p
    return out


@dataclass(frozen=True)
class ScalingComparison:
    """Measured records matched to the predictions made before them."""

    rows: dict[int, list[Comparison]]       # ep -> comparisons
    counts_equal: int
    counts_differ: list[str]                # where the measured counts are not the predicted ones
    unmatched_measured: int
    unmatched_predicted: int


def compare(measured_paths: list[Path], predictions: dict[tuple, dict]) -> ScalingComparison:
    """Match merged measured records (`load_records` + `merge_passes`) to predictions."""
    records = merge_passes(load_records(measured_paths)[0])
    rows: dict[int, list[Comparison]] = defaultdict(list)
    seen, differ, equal, unmatched = set(), [], 0, 0
    for s in records:
        r = s.record
        key = record_key(r)
        p = predictions.get(key)
        if p is None:
            unmatched += 1
            continue
        seen.add(key)
        c = p["counts"]
        same = all(c[name] == getattr(r, name) for name in c)
        equal += same
        if not same:
            differ.append(s.where)
        rows[r.ep_size].append(Comparison(
            where=s.where, kind=r.kind, backend=r.backend, model=r.model,
            hidden_size=r.hidden_size, dispatch_dtype=r.dispatch_dtype or "native",
            skew=skew_label(r.skew), tokens=r.num_tokens_per_rank, measured_us=s.measured_us,
            predicted_us=p["predicted_us"], split="holdout", outside=p["extrapolated_ep"],
            p10_us=r.p10_us, p90_us=r.p90_us))
    if not rows:
        raise RecordError(f"measured records ({', '.join(map(str, measured_paths))}) match none "
                          f"of the predictions; same grid, seed and shapes?")
    at_measured_ep = {k for k, p in predictions.items() if p["ep_size"] in rows}
    return ScalingComparison(dict(sorted(rows.items())), equal, differ, unmatched,
                             len(at_measured_ep - seen))


def comparison_table(result: ScalingComparison, max_mape: float = MAX_MAPE_PCT) -> str:
    """Markdown: MAPE per EP size, backend, dispatch dtype and kind, predicted-before vs measured."""
    cols = ["EP", "backend", "dtype", "kind", "points", "MAPE %", "worst %", "worst at", "bias %",
            f"MAPE <= {max_mape:g}%"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for ep, rows in result.rows.items():
        stats: dict[tuple, ErrorStats] = group(rows, "backend", "dispatch_dtype", "kind")
        for (backend, dtype, kind), s in stats.items():
            lines.append(f"| {ep} | {backend} | {dtype} | {kind} | {s.num} | {s.mape:.1f} | "
                         f"{s.worst:.1f} | {s.worst_at} | {s.bias:+.1f} | "
                         f"{'yes' if s.mape <= max_mape else '**no**'} |")
    total = result.counts_equal + len(result.counts_differ)
    lines += ["", f"- counts equal to the predicted ones: {result.counts_equal}/{total} records"
              + (f" (first differing: {result.counts_differ[0]})" if result.counts_differ else ""),
              f"- measured records with no prediction: {result.unmatched_measured}; predictions "
              f"at the measured EP sizes with no record: {result.unmatched_predicted}"]
    return "\n".join(lines) + "\n"


def summary_markdown(preds: list[dict], tokens_shown=(1, 16, 256, 4096)) -> str:
    """A short table of the predicted moe_layer times (the .md next to the .jsonl)."""
    first = preds[0]
    layer_us = {(p["model"], p["backend"], p["dispatch_dtype"], p["skew"], p["num_tokens_per_rank"],
                 p["ep_size"]): p["predicted_us"] for p in preds if p["kind"] == "moe_layer"}
    eps = sorted({p["ep_size"] for p in preds})
    shown = [t for t in tokens_shown if any(k[4] == t for k in layer_us)]
    cols = ["model", "backend", "dtype", "skew"] + [f"T={t} EP {ep}" for t in shown for ep in eps]
    lines = ["# Scaling predictions: moe_layer µs, predicted before measuring", "",
             f"- profile: {first['profile']['name']} (sha256 {first['profile']['sha256'][:12]}); "
             f"epsim commit {first.get('epsim_commit', 'not recorded')}",
             f"- {len(preds)} predictions in the .jsonl next to this file (dispatch, combine, "
             f"experts, moe_layer per point); EP outside the fitted range "
             f"{first['fitted_ep_size']} is extrapolated (`extrapolated_ep`)", "",
             "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    cases = sorted({(p["model"], p["backend"], p["dispatch_dtype"], p["skew"]) for p in preds},
                   key=lambda c: (c[0], c[1] != "torch", c[2], c[3]))
    for model, backend, dtype, skew in cases:
        cells = [f"{layer_us[(model, backend, dtype, skew, t, ep)]:.0f}"
                 if (model, backend, dtype, skew, t, ep) in layer_us else "-"
                 for t in shown for ep in eps]
        lines.append("| " + " | ".join([model, backend, dtype, skew] + cells) + " |")
    return "\n".join(lines) + "\n"
