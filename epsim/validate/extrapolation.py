"""Validation on hold-outs that are extrapolation, against two baselines.

Each axis splits the records, refits a profile on one side (`epsim.calibrate.fit_records`, no
further hold-out) and judges the other side:
  tokens  fit tokens per rank <= 1024, judge 2048-16384 (larger batches than any fit saw)
  size    (all-reduces; `benchmarks/aic_holdout.py` splits it) messages larger than any fitted
  shape   fit the Qwen3 shapes (and the other shapes measured), judge DeepSeek-V3 (and the
          layer bench's DeepSeek-like layer) and Qwen3-Coder-480B-A35B's attention (model
          shapes no fit saw)
  run     fit one run's record files, judge another run's (another machine or VM instance);
          several `RunPair`s are judged each on its own refit, their rows labelled
          `run (<pair name>)`

Records given as judged only (`default_judged_only`: the attention hold-out grid measured on
one H200, kept in benchmarks/) join the judged side of the tokens and shape axes and are never
fitted.

Next to the model's MAPE, two baselines built from the same fit-set points:
  constant  the median of the fit-set points of the same configuration (all but the axis)
  log-log   those points joined in log-log along the axis variable (tokens per rank; for the
            shape axis the shape's size), interpolated, or extrapolated from the two nearest
and a skill score `1 - MAPE_model / min(MAPE_constant, MAPE_loglog)`: > 0 beats both. A
component that does not beat both is flagged.
"""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from epsim.calibrate.build import evaluation_profile, fit_records
from epsim.calibrate.holdout import Holdout
from epsim.calibrate.inputs import SourcedRecord, load_records, merge_passes
from epsim.cost.allreduce import algorithm, is_sm100, record_generation
from epsim.cost.record import predict_record, record_kind
from epsim.errors import EpsimError
from epsim.cost.record_kernels import KERNEL_KINDS
from epsim.profile import is_graph, kv_kind
from epsim.zoo import get_hardware

FIT_MAX_TOKENS = 1024
JUDGED_TOKENS = (2048, 16384)
# the layer bench's DeepSeek-like layer has DeepSeek-V3's MoE shapes: judged with it, never fitted
JUDGED_MODELS = ("DeepSeek-V3", "DeepSeek-like", "Qwen3-Coder-480B-A35B")
AXES = ("tokens", "size", "shape", "ep", "tp", "system", "run")
JUDGED = ("dispatch", "combine", "experts", "moe_layer", "attention_prefill", "attention_decode",
          "dense_mlp", "block_ops", "allreduce", "attention_block", *KERNEL_KINDS)


def _judged(record) -> bool:
    """A record of a `JUDGED` kind (`record_kind`: the layer bench's attention-block part)."""
    return record_kind(record) in JUDGED


# fields that are not a configuration's identity: timings, measured counts, provenance
_NOT_CONFIG = {"median_us", "p10_us", "p90_us", "per_rank_median_us", "num_iters", "extra",
               "provenance", "recv_tokens_per_rank", "send_tokens_per_rank",
               "expert_tokens_per_rank", "local_expert_tokens", "seed", "value", "loads",
               "forward_pass_id"}
_SHAPE = {"model", "hidden_size", "moe_intermediate_size", "num_experts", "num_physical_experts",
          "top_k", "intermediate_size", "num_attention_heads", "num_kv_heads", "head_dim",
          "ep_size"}


@dataclass(frozen=True)
class Judged:
    """One judged record: measured, the model's prediction and the two baselines (µs)."""

    axis: str
    component: str            # "<backend>[+graph]/<kind>"
    where: str
    tokens: int
    model: str
    measured_us: float
    predicted_us: float
    constant_us: float
    loglog_us: float
    pair: str = ""            # the run axis's RunPair name ("" for the unnamed pair)

    def ape(self, value: float) -> float:
        return abs(value - self.measured_us) / self.measured_us * 100.0


@dataclass(frozen=True)
class AxisStats:
    """MAPEs of one component on one axis."""

    axis: str
    component: str
    num: int
    model_mape: float
    constant_mape: float
    loglog_mape: float
    pair: str = ""

    @property
    def label(self) -> str:
        """The axis as tables print it: `run (<pair>)` for a named run pair."""
        return axis_label(self.axis, self.pair)

    @property
    def skill(self) -> float:
        """1 - model / best baseline (> 0: the model beats both)."""
        best = min(self.constant_mape, self.loglog_mape)
        return 1.0 - self.model_mape / best if best > 0 else float("-inf")

    @property
    def beats_both(self) -> bool:
        return self.model_mape < self.constant_mape and self.model_mape < self.loglog_mape


@dataclass(frozen=True)
class RunPair:
    """One run hold-out: refit on the `fit` record files, judge the `judged` ones (the same grid
    measured on another machine or VM instance). `name` labels the rows of a pair judged next
    to others ("" for the unnamed one)."""

    fit: tuple[Path, ...]
    judged: tuple[Path, ...]
    name: str = ""


def axis_label(axis: str, pair: str = "") -> str:
    return f"{axis} ({pair})" if pair else axis


def component_label(record) -> str:
    """`<backend>[+graph]/<kind>` (`record_kind`: the layer bench's attention-block part), with
    the weight format (and an MLA kernel's cache dtype) for the kinds fitted per format
    (`epsim.cost.record_kernels`)."""
    label = f"{record.backend}{'+graph' if is_graph(record) else ''}/{record_kind(record)}"
    if record.kind == "allreduce":            # by the algorithm that ran it
        label += f" {allreduce_algorithm(record)}"
    if record.kind in KERNEL_KINDS:
        fmt = kv_kind(record.kv_cache_dtype) + " KV" if record.kind.startswith("mla_") \
            and record.kind != "mla_bmm" else record.weight_dtype
        label += f" {fmt}"
    return label


def allreduce_algorithm(record) -> str:
    """The algorithm an `allreduce` record timed: "nccl" for an nccl-tests row, else the one
    SGLang runs at its size and GPU count on its GPU's hosts, by the custom kernel its version
    runs (`epsim.cost.allreduce`)."""
    if record.extra.get("kernel") == "NCCL":
        return "nccl"
    hw = get_hardware(record.provenance.hardware) if record.provenance.hardware else None
    per_host = (hw.gpus_per_host or hw.gpus_per_node) if hw else record.ep_size
    return algorithm(record.bytes, record.ep_size, -(-record.ep_size // per_host),
                     record_generation(record), is_sm100(hw))


def _x(record, axis: str) -> float:
    """The axis variable: tokens per rank, for the size axis an all-reduce's bytes, for the
    shape axis the shape's size, for the EP and MoE-TP axes the EP and MoE-TP size (an
    all-reduce's GPUs on the TP axis: SGLang's TP group)."""
    if axis == "ep":
        return float(record.ep_size)
    if axis == "size":
        return float(record.bytes)
    if axis == "tp":
        return float(record.ep_size if record.kind == "allreduce" else record.moe_tp_size)
    if axis != "shape":
        return float(record.num_tokens_per_rank)
    if record.kind in ("experts", "quant_experts"):
        return float(record.hidden_size * record.moe_intermediate_size)
    if record.kind == "gemm":
        return float(record.hidden_size * record.intermediate_size)
    if record.kind in ("mla_bmm", "mla_decode", "mla_prefill"):     # the heads a GPU holds
        return float(record.num_attention_heads)
    if record.kind == "dense_mlp":
        return float(record.hidden_size * record.intermediate_size)
    if record.kind == "block_ops":          # bytes per token grow with H, the router with E x H
        return float(record.hidden_size * record.num_experts)
    if record.kind.startswith("attention"):
        return float(record.num_attention_heads * record.head_dim)
    return float(record.hidden_size)


def _key(record, axis: str) -> str:
    """A configuration without the axis variable (what baselines pool over)."""
    if axis in ("ep", "tp"):              # the group's batch and the unsplit shape stay
        drop = set(_NOT_CONFIG) | {"num_tokens_per_rank", "ep_size", "num_local_experts",
                                   "moe_intermediate_size", "moe_tp_size"}
        return json.dumps([record.model_dump(exclude=drop), record.extra.get("num_tokens"),
                           record.extra.get("inter_size")], sort_keys=True, default=str)
    if axis == "size":                    # an all-reduce's message: bytes, as [tokens, hidden]
        return json.dumps(record.model_dump(exclude=set(_NOT_CONFIG) | {
            "bytes", "num_tokens_per_rank", "hidden_size"}), sort_keys=True, default=str)
    drop = set(_NOT_CONFIG) | ({"num_tokens_per_rank"} if axis != "shape" else _SHAPE)
    if axis != "shape" and record.kind == "attention_prefill":
        drop.add("context_len")          # prefill tokens = sequences x context
    if axis != "shape" and record.kind == "attention_decode":
        drop.add("num_seqs")             # decode tokens = sequences
    return json.dumps(record.model_dump(exclude=drop), sort_keys=True, default=str)


def loglog(points: list[tuple[float, float]], x: float) -> float:
    """Piecewise linear in log-log through `points` (x, y) (duplicate x averaged), evaluated at
    x: interpolated inside, extrapolated from the two nearest points outside; one point: its y."""
    by_x: dict[float, list[float]] = defaultdict(list)
    for px, py in points:
        by_x[px].append(py)
    xs = np.array(sorted(by_x))
    ys = np.array([np.mean(by_x[v]) for v in xs])
    if len(xs) == 1:
        return float(ys[0])
    lx, ly, t = np.log(xs), np.log(ys), np.log(x)
    i = int(np.clip(np.searchsorted(lx, t), 1, len(lx) - 1))
    slope = (ly[i] - ly[i - 1]) / (lx[i] - lx[i - 1])
    return float(np.exp(ly[i - 1] + slope * (t - lx[i - 1])))


def judge(axis: str, fit_raw: list[SourcedRecord], judged_raw: list[SourcedRecord],
          files, pair: str = "") -> list[Judged]:
    """Refit on `fit_raw`, then predict every judged record of the `JUDGED` kinds the models
    can evaluate (others are left out), with both baselines from the fit set; rows carry
    `pair` (the run pair's name)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = fit_records(fit_raw, files, Holdout(), name=f"validate-{axis}")
    profile = evaluation_profile(cal.profile)
    fit = [s for s in merge_passes(fit_raw) if _judged(s.record)]
    pools: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_component: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in fit:
        pools[_key(s.record, axis)].append((_x(s.record, axis), s.measured_us))
        by_component[component_label(s.record)].append((_x(s.record, axis), s.measured_us))
    out = []
    for s in merge_passes(judged_raw):
        r = s.record
        if not _judged(r) or getattr(r, "timing", "") in ("host", "eager"):
            continue
        points = pools.get(_key(r, axis)) or by_component.get(component_label(r))
        if not points:
            continue                      # nothing like it was fitted: no baseline, not judged
        try:
            predicted = predict_record(r, profile)
        except EpsimError:
            continue
        x = _x(r, axis)
        out.append(Judged(axis, component_label(r), s.where, r.num_tokens_per_rank,
                          r.model or f"H{r.hidden_size}", s.measured_us, float(predicted),
                          float(np.median([y for _, y in points])), loglog(points, x), pair))
    return out


def split_tokens(raw: list[SourcedRecord]) -> tuple[list[SourcedRecord], list[SourcedRecord]]:
    fit = [s for s in raw if s.record.num_tokens_per_rank <= FIT_MAX_TOKENS]
    lo, hi = JUDGED_TOKENS
    return fit, [s for s in raw if lo <= s.record.num_tokens_per_rank <= hi]


def split_shape(raw: list[SourcedRecord]) -> tuple[list[SourcedRecord], list[SourcedRecord]]:
    """Judged: records of a `JUDGED_MODELS` shape (or one of its parts, `DeepSeek-V3/dense`);
    fit: every other shape (the Qwen3 models, the bench's plain `h2048-i6144` MLP)."""
    judged = [s for s in raw if s.record.model.split("/")[0] in JUDGED_MODELS]
    return [s for s in raw if s.record.model.split("/")[0] not in JUDGED_MODELS], judged


def stats(rows: list[Judged]) -> list[AxisStats]:
    """AxisStats per (axis, run pair, component), in axis, pair then component order."""
    groups: dict[tuple[str, str, str], list[Judged]] = defaultdict(list)
    for r in rows:
        groups[(r.axis, r.pair, r.component)].append(r)
    out = []
    for (axis, pair, comp) in sorted(groups, key=lambda k: (AXES.index(k[0]), k[1], k[2])):
        g = groups[(axis, pair, comp)]
        out.append(AxisStats(axis, comp, len(g),
                             float(np.mean([r.ape(r.predicted_us) for r in g])),
                             float(np.mean([r.ape(r.constant_us) for r in g])),
                             float(np.mean([r.ape(r.loglog_us) for r in g])), pair))
    return out


# the run hold-outs when none is named, each (name, [(fit file, judged file)]): a fit file is
# matched among the judged paths (the shipped records) by its ending, else taken under the
# working directory, as every judged file is; a pair is judged when every file of at least one
# of its (fit, judged) couples is found.
#   ""                    the shipped two-H200 eager records (run 2) fit and the same grid on
#                         another VM instance (run 1, kept in benchmarks/) judged; the
#                         single-H200 records of one machine fit, the other machine's judged
#   "#18: machine 1 -> 2" issue 18's two separately leased two-H200 machines (torch, DeepEP
#                         normal mode, none; eager): machine 1 fit, machine 2 judged. Kept in
#                         benchmarks/ and only judged: they are not in the shipped profile's fit
_ISSUE18 = Path("benchmarks") / "results" / "h200x2_issue18"
_HOLDOUT = Path("benchmarks") / "results" / "h200_attention_holdout"
DEFAULT_RUN_PAIRS = (
    ("", (("h200x2/bench.jsonl.gz", Path("benchmarks") / "results" / "h200x2_run1" / "bench.jsonl.gz"),
          ("h200_single/run1.jsonl.gz", "h200_single/run2.jsonl.gz"),
          ("h200_single/block_ops_run1.jsonl.gz", "h200_single/block_ops_run2.jsonl.gz"),
          (_HOLDOUT / "run1" / "components.jsonl.gz", _HOLDOUT / "run2" / "components.jsonl.gz"))),
    ("#18: machine 1 -> 2", ((_ISSUE18 / "bench" / "bench.jsonl.gz",
                              _ISSUE18 / "machine2" / "bench" / "bench.jsonl.gz"),)),
)


# judged only, never fitted (`extrapolation(judged_only=...)`): the attention hold-out grid of
# one H200 (`live.bench.components --grid holdout`: Qwen3-Coder-480B-A35B's GQA shape, decode
# batches of 1024-4096 sequences); its second machine's file is the run axis's judged side
DEFAULT_JUDGED_ONLY = (_HOLDOUT / "run1" / "components.jsonl.gz",)


def _find(name: str | Path, paths: list[Path]) -> list[Path]:
    """`name` among `paths` (by its ending), else under the working directory; [] if neither."""
    found = [p for p in paths if p.as_posix().endswith(Path(name).as_posix())]
    return found or ([Path(name)] if Path(name).is_file() else [])


def default_run_pairs(paths: Iterable[str | Path]) -> list[RunPair]:
    """The default run hold-outs (`DEFAULT_RUN_PAIRS`) whose files are found, given `paths`
    (the shipped records); [] when none."""
    paths = [Path(p) for p in paths]
    out = []
    for name, couples in DEFAULT_RUN_PAIRS:
        fit, judged = [], []
        for fit_name, judged_name in couples:
            mine, other = _find(fit_name, paths), _find(judged_name, paths)
            if mine and other:
                fit += mine
                judged += other
        if fit:
            out.append(RunPair(tuple(fit), tuple(judged), name))
    return out


def default_judged_only() -> list[Path]:
    """`DEFAULT_JUDGED_ONLY` files found under the working directory (none in an install)."""
    return [p for p in DEFAULT_JUDGED_ONLY if p.is_file()]


def extrapolation(paths: Iterable[str | Path], run_pairs: Sequence[RunPair] = (),
                  judged_only: Sequence[str | Path] = (),
                  stage: Callable[[str], None] | None = None) -> tuple[list[Judged], dict[str, str]]:
    """Judge the three axes: tokens and shape on `paths` (and the judged side of `judged_only`,
    never fitted), run on each of `run_pairs` (its own refit on the pair's fit files, judged on
    its judged files). `stage` hears what starts next (each axis refits: tens of seconds).

    Returns:
        (every judged row, axis label -> what it fitted and judged, or why it was not judged).
    """
    raw, files = load_records(paths)
    extra = load_records(judged_only)[0] if judged_only else []
    rows: list[Judged] = []
    notes = {}
    for axis, split in (("tokens", split_tokens), ("shape", split_shape)):
        fit, judged = split(raw)
        judged = judged + split(extra)[1]
        if not fit or not judged:
            notes[axis] = "not judged: no records on one side of the split"
            continue
        if stage:
            stage(f"extrapolation hold-out, {axis} axis: refitting on {len(fit)} records, judging "
                  f"{len(judged)}")
        got = judge(axis, fit, judged, files)
        rows += got
        notes[axis] = f"fit {len(merge_passes(fit))} records, judged {len(got)}" + (
            f" (with the judged-only {', '.join(str(p) for p in judged_only)})" if extra else "")
    for pair in run_pairs:
        if stage:
            stage(f"extrapolation hold-out, run axis: refitting on {pair.name}")
        fit_raw, fit_files = load_records(pair.fit)
        judged_raw, judged_files = load_records(pair.judged)
        got = judge("run", fit_raw, judged_raw, fit_files, pair.name)
        rows += got
        notes[axis_label("run", pair.name)] = (
            f"fit {', '.join(f.path for f in fit_files)}; judged "
            f"{', '.join(f.path for f in judged_files)} ({len(got)} records)")
    if not run_pairs:
        notes["run"] = "not judged: no second run's records given"
    return rows, notes


def markdown(rows: list[Judged], notes: dict[str, str], max_mape: float = 10.0) -> str:
    """The extrapolation table: per axis and component, model MAPE, both baselines, skill."""
    lines = ["**Extrapolation hold-outs: the model against two baselines** (constant: fit-set "
             "median of the same configuration; log-log: fit-set points joined in log-log along "
             "the axis; skill = 1 - model / best baseline; flagged **no** where the model does "
             "not beat both)", ""]
    lines += [f"- {label}: {note}" for label, note in notes.items()]
    cols = ["axis", "component", "records", "model MAPE %", "constant MAPE %", "log-log MAPE %",
            "skill", "beats both", f"model <= {max_mape:g}%"]
    lines += ["", "| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for s in stats(rows):
        lines.append("| " + " | ".join([
            s.label, s.component, str(s.num), f"{s.model_mape:.1f}", f"{s.constant_mape:.1f}",
            f"{s.loglog_mape:.1f}", f"{s.skill:+.2f}", "yes" if s.beats_both else "**no**",
            "yes" if s.model_mape <= max_mape else "**no**"]) + " |")
    return "\n".join(lines) + "\n"
