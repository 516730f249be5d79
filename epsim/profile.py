"""Profile: the cost models' coefficients per (hardware, backend, kind), with provenance.

A profile is JSON (schema `epsim.profile/1`). Each component, keyed `"<backend>/<kind>"`
(`"torch/dispatch"`, `"any/experts"`, `"deepep/dispatch/low_latency"`), holds:
  params       the cost model's coefficients (names carry units: `base_us`, `link_gbps`, ...)
  source       "fit" (least squares on measured records) or "datasheet" (no measurement)
  residuals    fit quality on the records it was fitted on (`mape`, `max_ape`, `num_records`)
  valid_range  the data range it was fitted on, e.g. {"num_tokens_per_rank": [1, 4096]}
  spread       measured / predicted spread (`epsim.cost.spread`): pass-to-pass, run-to-run and
               fit residual log standard deviations, giving each prediction its p10/p90
A key ending in `/host` (`mooncake/dispatch/host`, `any/experts/host`) is the host overhead an
eager step adds to the device time of `<backend>/<kind>/graph` (`epsim.cost.timing`).
and the profile's `provenance` names the record files (with sha256) it came from.

This module owns the profile's vocabulary; nothing else spells a key or a mode path:
  component_key(backend, kind, mode_path)     "deepep/dispatch/graph/low_latency/fp8"
  mode_path(kernel_mode, kind, dtype, graph)  the mode part: `graph` (device-only timings, as a
                                              CUDA graph replays) first, then the DeepEP kernel
                                              mode, then `fp8` for the parts an FP8 dispatch
                                              changes (`FP8_KINDS`)
  record_mode_path(record, kind), component_keys(record)   the same for a measurement record
  Component.outside(**values)                 the one fitted-range check (what lies outside)
  Profile.component(...) looks a key up most specific first, dropping mode parts from the end.
"""

from __future__ import annotations

import json
import os
import warnings
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from epsim import vocab
from epsim.errors import ProfileError, RecordError
from epsim.fused_moe_config import default_tile_path
from epsim.io import load_json
from epsim.io.write import write_text
from epsim.physical import param_problem, range_problem
from epsim.spec.errors import format_error
from epsim.spec.numbers import check_numbers

SCHEMA = "epsim.profile/1"
DEFAULT_PROFILE = "profiles/h200x2.json"   # package data, measured on two H200 over NVLink

GRAPH = "graph"   # mode part of device-only timings: launched ahead, as a CUDA graph replays
FP8 = "fp8"       # mode part of the components an FP8 dispatch changes
# an FP8 dispatch changes the dispatch (a cast per token on send) and the experts stage (it
# takes FP8 rows: the backend's layout dequantizes them); the combine after it, though BF16, is
# its own component too (ablation `no_fp8_combine` in benchmarks/validation_ablations.py)
FP8_KINDS = ("dispatch", "experts", "combine", "layout")
# an NVFP4 dispatch (DeepEP low-latency only) is priced by the FP8 dispatch's fit at its own bytes
# a copy (`epsim.cost.comm.dispatch_bytes_per_copy`): the same kernel family, the payload packed
# to 4 bits; no table times it, so its components are the FP8 ones
QUANTISED_DISPATCH = (FP8, "nvfp4")


def component_key(backend: str, kind: str, mode_path: str = "") -> str:
    """Profile key of a component: `torch/dispatch`, `mooncake/experts/fp8`, ..."""
    return f"{backend}/{kind}" + (f"/{mode_path}" if mode_path else "")


def mode_path(kernel_mode: str = "", kind: str = "", dispatch_dtype: str = "bf16",
              graph: bool = False) -> str:
    """The mode part of a component key: `graph` for device-only timings, the DeepEP kernel
    mode, then `fp8` where a quantised dispatch (`QUANTISED_DISPATCH`) changes `kind`
    (`FP8_KINDS`). E.g. "", "fp8", "low_latency", "graph/low_latency/fp8"."""
    fp8 = dispatch_dtype in QUANTISED_DISPATCH and kind in FP8_KINDS
    return "/".join(p for p in (GRAPH if graph else "", kernel_mode, FP8 if fp8 else "") if p)


def is_graph(record) -> bool:
    """A record (`epsim.records.MeasurementRecord`) times the device alone (`mode` holds
    "graph", or a single-GPU record's `timing` is "device"), not the eager host path."""
    return GRAPH in record.mode.split("/") or getattr(record, "timing", "") == "device"


def kernel_mode(record) -> str:
    """The DeepEP kernel mode of a record ("normal" if unset; "" for other backends).

    Raises:
        RecordError: a mode the record's backend does not have.
    """
    parts = [p for p in record.mode.split("/") if p and p != GRAPH]
    if record.backend != "deepep":
        if parts:
            raise RecordError(f"mode ({record.mode!r}) must be '' or 'graph' for backend "
                              f"{record.backend!r}")
        return ""
    if len(parts) > 1 or (parts and parts[0] not in vocab.DEEPEP_MODES):
        raise RecordError(f"mode ({record.mode!r}) must be one of {list(vocab.DEEPEP_MODES)} "
                          f"(optionally with '/graph') for deepep")
    return parts[0] if parts else "normal"


def record_mode_path(record, kind: str) -> str:
    """The mode path of the component `record` feeds for `kind`, e.g. "graph/fp8". Lookups drop
    parts from the end, so a missing `graph/fp8` component falls back to `graph` (device time)
    before the eager components."""
    return mode_path(kernel_mode(record), kind, record.dispatch_dtype, is_graph(record))


def component_keys(record) -> list[str]:
    """Profile components a record is fitted into, most specific first (none for moe_layer
    parts and non-timings): the `none` backend's dispatch is its all-gather, its combine the
    all-reduce; BF16 experts timings also feed the pooled `any/experts[/graph]`."""
    kind, backend = record.kind, record.backend
    graph = GRAPH if is_graph(record) else ""
    if kind in ("dispatch", "combine"):
        if backend == "none":
            return [component_key("none", "allgather" if kind == "dispatch" else "allreduce", graph)]
        return [component_key(backend, kind, record_mode_path(record, kind))]
    if kind == "allreduce":      # the all-reduce model's (`epsim.calibrate.allreduce` fits it)
        algos = ("nccl",) if record.extra.get("kernel") == "NCCL" else ("oneshot", "twoshot")
        return [component_key("any", "allreduce", f"{GRAPH}/{a}") for a in algos]
    if kind == "experts":
        # the grouped GEMM alone (one GPU, `local`) fits the kernel model; a backend's stage
        # timed device-only fits that backend's own layout work over it (`<backend>/layout`;
        # its eager timings are host overhead, `epsim.calibrate.host`) -- where no record
        # times the kernel alone, the stages fit it (pooled, BF16)
        path = record_mode_path(record, kind)
        pooled = [component_key("any", kind, graph)] if path in ("", GRAPH) else []
        if backend == "local":          # the fused Triton MoE's default tile: its own rates
            return [component_key(backend, kind, default_tile_path(record, path))] + pooled
        own = [component_key(backend, "layout", record_mode_path(record, "layout"))] if graph else []
        return own + pooled           # pooled: the kernel, where nothing times it alone
    if kind == "moe_layer":
        return [component_key(backend, "moe_layer", graph)]
    single = {"attention_prefill": "attention_prefill", "attention_decode": "attention_decode",
              "dense_mlp": "dense"}                  # single-GPU kernels: pooled, `any/...`
    if kind in single:
        return [component_key("any", single[kind], graph)]
    if kind == "block_ops":                          # the block's own ops: pooled, `any/...`
        return [component_key("any", kind, graph)]
    if kind == "layer_part" and record.extra.get("part") == "attention_block":
        # the attention block's own ops (norms, RoPE, KV write, residual): pooled; the layer
        # bench's other parts and its whole layers and stacks are judged, never fitted
        return [component_key("any", "attention_ops", graph)]
    return kernel_keys(record)


# -- the kinds of the field's op tables: quantised GEMMs and experts, MLA ------------------------
FORMAT_KINDS = ("gemm", "mla_bmm", "experts")   # a component per weight format: `experts_fp8_block`


def format_kind(kind: str, weight_format: str) -> str:
    """The component kind of `kind` on weights of `weight_format` (`gemm_fp8_block`,
    `experts_nvfp4`, `mla_bmm_bf16`): one component per format, so a lookup never falls back
    from one format's fit to another's."""
    return f"{kind}_{weight_format or 'bf16'}"


def kv_kind(kv_cache_dtype: str) -> str:
    """The cache part of an MLA kernel's component kind: "fp8" for an FP8 KV cache, "bf16"
    otherwise (`auto`, `bf16`): `mla_decode_fp8`, `mla_prefill_bf16`. A kernel may take another
    path for an FP8 cache (FlashAttention-3's MLA on Hopper does, at a sixth of the rate), so
    each cache dtype is fitted apart."""
    return "fp8" if str(kv_cache_dtype).startswith("fp8") else "bf16"


# zoo GPUs of the Hopper generation, whose MLA decode kernels differ from Blackwell's in how they
# take an FP8 cache (`decode_kv_kind`) and how many heads a CTA holds (`epsim.cost.mla_decode`)
HOPPER = ("H100", "H200", "H800", "H20")


def decode_kv_kind(kv_cache_dtype: str, gpu: str) -> str:
    """The cache part of the MLA decode component that prices `gpu`'s kernel: `kv_kind` on
    Hopper (and where the GPU is not known), whose kernels take another path for an FP8 cache;
    "bf16" on the others (Blackwell), whose kernel (TRT-LLM's) reads FP8 keys in the same loop,
    so both caches' rows are one fit, each at its cache's bytes. aiconfigurator-core's b200_sxm,
    gb200 and gb300 tables: an FP8 cache takes 0.46-0.56x the BF16 time at 16 heads and 8k
    keys (its bytes); h200_sxm's 5.9-7.2x."""
    return kv_kind(kv_cache_dtype) if not gpu or gpu in HOPPER else "bf16"


def experts_mode_path(record) -> str:
    """The mode path of a `quant_experts` record's component: `graph` for device time (a
    single-GPU record's `timing`, or `graph` in `mode`), then DeepEP's kernel mode for its MoE
    runner (`deepep` records: low-latency decode replays a CUDA graph, normal prefill runs
    eagerly)."""
    mode = kernel_mode(record) if record.backend == "deepep" else ""
    graph = GRAPH in record.mode.split("/") or (record.timing == "device"
                                                 and record.backend != "deepep")
    return mode_path(mode, "", "bf16", graph)


def kernel_keys(record) -> list[str]:
    """Components a record of the field's op tables is fitted into (`epsim.cost.record_kernels`):
    `any/gemm_<format>/graph`, `any/mla_bmm_<format>/graph`, `any/mla_decode|prefill_<cache>/graph`
    (the kernel alone, per cache dtype `kv_kind`, a decode's by GPU `decode_kv_kind`: a
    whole-module record feeds none),
    `any/experts_<format>/graph` and DeepEP's
    MoE runner `deepep/experts_<format>/<graph/low_latency | normal>`."""
    kind, fmt = record.kind, record.weight_dtype or "bf16"
    if kind in ("gemm", "mla_bmm"):
        return [component_key("any", format_kind(kind, fmt), GRAPH)]
    if kind in ("mla_decode", "mla_prefill"):
        cache = (decode_kv_kind(record.kv_cache_dtype, record.provenance.hardware)
                 if kind == "mla_decode" else kv_kind(record.kv_cache_dtype))
        return [component_key("any", format_kind(kind, cache), GRAPH)] \
            if record.extra.get("scope", "kernel") == "kernel" else []
    if kind == "quant_experts":
        backend = "deepep" if record.backend == "deepep" else "any"
        return [component_key(backend, format_kind("experts", fmt), experts_mode_path(record))]
    return []


class ExtrapolationWarning(UserWarning):
    """A prediction was asked outside the data range a fitted component was fitted on."""


class Component(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, float]
    source: str = Field(default="fit", pattern="^(fit|datasheet|derived)$")
    residuals: dict[str, float] = Field(default_factory=dict)
    valid_range: dict[str, list[float]] = Field(default_factory=dict)
    spread: dict[str, float] = Field(default_factory=dict)
    note: str = ""
    # where its data came from (profile format addition; absent in older profiles): the data
    # source ("aiconfigurator", "epsim records"), the op tables or record files it was fitted on,
    # and the shipped profile it was taken from where a default profile fills a part it has no
    # measurement of (`epsim.default_profile`; "" for the profile's own)
    data_source: str = ""
    tables: list[str] = Field(default_factory=list)
    profile: str = ""

    def outside(self, **values: float) -> list[str]:
        """The fitted-range check: one "name (value) outside fitted [lo, hi]" per value outside
        the range this component was fitted on; none for a datasheet component or a quantity
        it has no range for."""
        if self.source != "fit":
            return []
        out = []
        for name, value in values.items():
            lo_hi = self.valid_range.get(name)
            if lo_hi and value is not None and not lo_hi[0] <= value <= lo_hi[1]:
                out.append(f"{name} ({value:g}) outside fitted [{lo_hi[0]:g}, {lo_hi[1]:g}]")
        return out


class RecordSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    num_records: int


class ProfileProvenance(BaseModel):
    model_config = ConfigDict(extra="allow")

    records: list[RecordSource] = Field(default_factory=list)
    records_sha256: str = ""
    device: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    commit: str = ""
    created: str = ""
    method: str = ""
    holdout: dict[str, Any] = Field(default_factory=dict)


class Profile(BaseModel):
    """Fitted cost-model coefficients for one hardware type."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=SCHEMA, alias="schema")
    name: str = ""
    hardware: str = Field(min_length=1, description="zoo GPU name, e.g. 'H200'")
    components: dict[str, Component] = Field(default_factory=dict)
    provenance: ProfileProvenance = Field(default_factory=ProfileProvenance)
    path: str = Field(default="", exclude=True, description="where it was loaded from")

    # -- lookup ----------------------------------------------------------------------------
    def component(self, backend: str, kind: str, mode: str = "") -> Component | None:
        """The most specific component (`resolve`'s, without its key)."""
        found = self.resolve(backend, kind, mode)
        return found[1] if found else None

    def resolve(self, backend: str, kind: str, mode: str = "") -> tuple[str, Component] | None:
        """(key, component) of the most specific component: `backend/kind/mode`, `backend/kind`, `any/kind/mode`,
        `any/kind`.

        A mode of several parts (`low_latency/fp8`) falls back part by part:
        `deepep/dispatch/low_latency/fp8`, `deepep/dispatch/low_latency`, `deepep/dispatch`, ...
        A backend's own eager component comes before a pooled one of the same mode (`torch`
        measured no `graph` experts because it cannot be captured: its eager fit applies).
        """
        parts = [p for p in mode.split("/") if p]
        keys = []
        for owner in (backend, "any"):
            keys += [f"{owner}/{kind}/" + "/".join(parts[:i]) for i in range(len(parts), 0, -1)]
            keys.append(f"{owner}/{kind}")
        for key in keys:
            if key in self.components:
                return key, self.components[key]
        return None

    def params(self, backend: str, kind: str, mode: str = "",
               defaults: dict[str, float] | None = None) -> dict[str, float]:
        """Coefficients of a component over `defaults` (datasheet values for what is unfitted)."""
        comp = self.component(backend, kind, mode)
        return {**(defaults or {}), **(comp.params if comp else {})}

    def warn_outside(self, backend: str, kind: str, mode: str = "", **values: float) -> bool:
        """Warn (ExtrapolationWarning) if any value lies outside the component's fitted range."""
        comp = self.component(backend, kind, mode)
        outside = [] if comp is None else comp.outside(**values)
        if outside:
            warnings.warn(f"profile {self.name or self.path}: {backend}/{kind}: "
                          + "; ".join(outside) + " -- extrapolating", ExtrapolationWarning,
                          stacklevel=3)
        return bool(outside)

    def data_source(self, key: str) -> str:
        """Where component `key`'s data came from: its `data_source` ("aiconfigurator",
        "epsim records"), or in a profile older than that field "aiconfigurator" where its
        provenance names imported op tables, else "epsim records"; "datasheet" for a key the
        profile lacks (or a datasheet component)."""
        comp = self.components.get(key)
        if comp is None or comp.source == "datasheet":
            return "datasheet"
        if comp.data_source:
            return comp.data_source
        imported = (self.provenance.model_extra or {}).get("aic")
        if imported:            # an older imported profile: the package its provenance names
            package = str(imported[0].get("package", "")).split(" ")[0]
            return package.removesuffix("-core") or "op tables"
        return "epsim records"

    # -- io --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(self.model_dump(by_alias=True), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read a profile JSON. Raises ProfileError naming the file and field."""
        path = Path(path)
        return cls.from_dict(load_json(path, "profile", ProfileError), where=str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> "Profile":
        if isinstance(data, dict) and data.get("schema", SCHEMA) != SCHEMA:
            raise ProfileError(f"{where}: schema ({data.get('schema')!r}) must be {SCHEMA!r}")
        bad = check_numbers(data, cls)
        if bad is not None:
            raise ProfileError(f"{where}: {bad[0]} {bad[1]}")
        try:
            profile = cls.model_validate(data)
        except ValidationError as exc:
            raise ProfileError(format_error(exc.errors()[0], cls, where)) from None
        _check_physical(profile, where)
        profile.path = where
        return profile


def _check_physical(profile: Profile, where: str) -> None:
    """Every parameter within its physical bounds, every fitted range `[low, high]`."""
    for key, comp in profile.components.items():
        for name, value in comp.params.items():
            problem = param_problem(name, value)
            if problem:
                raise ProfileError(f"{where}: components.{key}.params.{name} ({value:g}) {problem}")
        for name, bounds in comp.valid_range.items():
            problem = range_problem(bounds)
            if problem:
                raise ProfileError(f"{where}: components.{key}.valid_range.{name} ({bounds}) {problem}")


def default_profile_path() -> Path:
    """The shipped default profile (measured on two H200; see its provenance)."""
    return Path(str(resources.files("epsim") / "data" / DEFAULT_PROFILE))


def shipped_profiles() -> dict[str, Path]:
    """The profiles epsim ships, by name (`h200x2`, `aic_b200`, ...): `--profile NAME`."""
    folder = default_profile_path().parent
    return {p.stem: p for p in sorted(folder.glob("*.json"))}


def profile_path(text: str | Path, base_dir: str | Path | None = None) -> Path:
    """The file a `--profile` value (or a scenario's `profile`, relative to `base_dir`) names:
    a profile JSON path, or a shipped profile's name (`aic_b200`).

    Raises:
        ProfileError: neither (one line naming the shipped profiles).
    """
    path = Path(text)
    if path.suffix or len(path.parts) > 1:                   # a file: `Profile.load` reads it
        return Path(base_dir) / path if base_dir is not None else path
    if path.is_file():
        return path
    shipped = shipped_profiles()
    if str(text) in shipped:
        return shipped[str(text)]
    raise ProfileError(f"profile ({str(text)[:120]!r}) must be a profile JSON file or one of the "
                       f"shipped profiles {list(shipped)}")


def _load_cached(path: str) -> Profile:
    """The profile at `path`, read again when the file changes (a long-lived process, the app,
    must not keep a profile that was rewritten)."""
    try:
        st = os.stat(path)
        signature = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        signature = None                  # Profile.load reports the missing file
    return _load_signed(path, signature)


@lru_cache(maxsize=8)
def _load_signed(path: str, signature) -> Profile:
    return Profile.load(path)


def load_profile(path: str | Path | None = None, shared: bool = False) -> Profile:
    """A profile from `path` (a file, or a shipped profile's name: `aic_b200`), or the shipped
    default; falls back to datasheet-only for the
    default when no measured profile ships (then every component is `datasheet`).

    A copy of the one read from disk, which the caller may change (calibration does);
    `shared=True` gives that one itself, for readers that never change it (the simulator and
    the cost model: a deep copy costs a millisecond or more per run, on every sweep point)."""
    if path is not None:
        found = _load_cached(str(profile_path(path).resolve()))
    elif default_profile_path().is_file():
        found = _load_cached(str(default_profile_path()))
    else:
        return Profile(name="datasheet-H200", hardware="H200")
    return found if shared else found.model_copy(deep=True)
