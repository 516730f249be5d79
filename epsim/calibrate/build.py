"""A profile from record files: group records by component, fit each on the fit set of the
hold-out protocol, and write down where every number came from.

Components (profile keys, `epsim.profile`):
  `<backend>/dispatch`, `<backend>/combine`  DeepEP-class all-to-all (torch, mooncake, deepep
                                             with `/normal` or `/low_latency`); FP8 dispatches
                                             fit `<backend>/dispatch[/mode]/fp8`
  `none/allgather`, `none/allreduce`         the `none` backend's two collectives
  `any/allreduce/graph/<algorithm>`           SGLang's all-reduce by algorithm (op tables'
                                             `allreduce` records: `epsim.calibrate.allreduce`)
  `any/experts[/graph]`                       the grouped-GEMM kernel model (single-GPU `local`
                                             records where there are any), every backend's
  `<backend>/layout/graph[/fp8]`              a backend's own layout work: its experts stage
                                             timed device-only less the kernel model and the
                                             block ops inside it (`epsim.cost.layout`)
  `<backend>/experts/host`                    what an eager experts stage adds (host overhead)
  `<backend>/moe_layer`                       `sync_us`: what a whole layer adds to its parts
  `any/rebalance`                            EPLB weight moves (`epsim.calibrate.rebalance`)
  `any/rebalance_host`                       a rebalance's host terms (placement algorithms,
                                             move plan, map update: `epsim.calibrate.rebalance_host`)
  `any/block_ops/graph`, `any/block_ops/host`  the block's own ops (router, permute, top-k
                                             weighting) on one GPU: device time, host part
  `any/attention_ops/graph`                   the attention block's own ops (norms, RoPE, KV
                                             write, residual): the layer bench's attention
                                             block less its kernel and projections
The kernels are fitted first (MLA's decode after its prefill, whose tensor rate it takes:
`mla_decode_held`), then what lies over them (layout, attention ops), then host
overheads (the block ops' before the stages that hold some), then a layer's `sync_us` on
`moe_layer` records with the parts fixed.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from epsim.calibrate.aic import expand_sources, tag_profile
from epsim.calibrate.aic_records import EP_FIT_FORMATS
from epsim.calibrate.allreduce import fit_allreduce_records
from epsim.calibrate.fit import ComponentFit, fit_component, fit_layer_sync
from epsim.calibrate.holdout import Holdout
from epsim.calibrate.host import HOST_KINDS, device_twin, fit_host, host_samples
from epsim.calibrate.inputs import (RecordFileInfo, RecordWarning, SourcedRecord, load_records,
                                    merge_passes)
from epsim.calibrate.layer_parts import judged_only, pair_attention_kernels
from epsim.calibrate.rebalance import fit_rebalance
from epsim.calibrate.rebalance_host import fit_rebalance_host
from epsim.calibrate.spread import component_spread, run_deviations
from epsim.cost.experts import num_sms
from epsim.cost.fp4_gemm import fed_tensor_frac
from epsim.cost.fallback_stream import FALLBACK_STREAM_PARAMS
from epsim.cost.mla import sustained_frac
from epsim.cost.mla_decode import FP8_MMA_RATIO
from epsim.cost.mla_ragged import ragged
from epsim.cost.quant import ACTIVATION_BYTES, tensor_peak
from epsim.cost.record import is_nccl_allgather, predict_record
from epsim.errors import EpsimError, ProfileError, RecordError
from epsim.profile import (GRAPH, Profile, ProfileProvenance, RecordSource, component_keys,
                           is_graph)
from epsim.records import records_hash
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, hardware_names

NOMINAL_GPU = "H200"      # cluster whose datasheet fills unfitted values of a CPU (gloo) profile
METHOD = ("bounded least squares per component on the fit set, relative-error weighted; "
          "coefficients >= 0, bandwidths <= datasheet peak; rows from epsim.cost.record_features")
VERSION_FIELDS = ("torch", "nccl", "cuda", "driver", "mooncake", "deep_ep")


class CalibrationWarning(UserWarning):
    """Something the fit could not do as asked (a backend without records, a failed fit)."""


@dataclass
class Calibration:
    """A fitted profile and how it was made."""

    profile: Profile
    fits: dict[str, ComponentFit]
    files: list[RecordFileInfo]
    num_fit: int
    num_held_out: int
    holdout: Holdout
    skipped: list[str] = field(default_factory=list)


def evaluation_profile(profile: Profile) -> Profile:
    """`profile` as the cost models can evaluate it: a CPU profile (hardware not a zoo GPU)
    gets the nominal H200 cluster for the datasheet values it did not fit."""
    if profile.hardware in hardware_names():
        return profile
    return profile.model_copy(update={"hardware": NOMINAL_GPU})


def _hardware(records: list[SourcedRecord]) -> str:
    # a rebalance's host terms are timed on a CPU beside any GPU: they do not name the GPU
    gpu = [s for s in records if not (s.record.kind == "rebalance_term" and s.record.timing == "host")]
    names = {s.record.provenance.hardware for s in gpu or records}
    devices = {s.record.provenance.device for s in gpu or records}
    if len(names) > 1:
        raise ProfileError(f"records come from several GPUs ({sorted(names)}); fit one profile "
                           f"per hardware")
    name = names.pop() if names else ""
    if name:
        return name
    if all("cpu" in d.lower() for d in devices):
        return "cpu"
    raise ProfileError(f"provenance.hardware (empty) must name the zoo GPU of devices "
                       f"{sorted(devices)}")


def peaks_of(hardware: str) -> dict[str, float]:
    """Datasheet peaks bounding fitted bandwidths and throughputs (nominal GPU for 'cpu')."""
    cluster = ClusterSpec(gpu=hardware if hardware != "cpu" else NOMINAL_GPU)
    hw = cluster.hardware
    return {"nvl_gbps": cluster.nvlink_gbps_resolved, "rdma_gbps": cluster.rdma_gbps_resolved,
            "hbm_gbps": hw.hbm_gbps, "tflops": hw.bf16_tflops,
            "spill_gbps": hw.hbm_gbps}


def _provenance(records: list[SourcedRecord], files: list[RecordFileInfo], holdout: Holdout,
                num_fit: int, num_held_out: int) -> ProfileProvenance:
    prov = [s.record.provenance for s in records]
    versions = {}
    for name in VERSION_FIELDS:
        values = sorted({getattr(p, name) for p in prov if getattr(p, name)})
        if values:
            versions[name] = ", ".join(values)
    return ProfileProvenance(
        records=[RecordSource(path=f.path, sha256=f.sha256, num_records=f.num_records) for f in files],
        records_sha256=records_hash(f.path for f in files),
        device=", ".join(sorted({p.device for p in prov})), versions=versions,
        commit=", ".join(sorted({p.commit for p in prov if p.commit})) or "unknown",
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), method=METHOD,
        holdout={"rule": holdout.describe(), "num_fit": num_fit, "num_held_out": num_held_out})


def _predictable(s: SourcedRecord, profile: Profile, skipped: list[str]) -> bool:
    """Whether the cost models can evaluate the record; if not, warn naming file and line."""
    try:
        predict_record(s.record, evaluation_profile(profile))
    except EpsimError as exc:
        message = f"{s.where}: {exc} -- skipped"
        skipped.append(message)
        warnings.warn(message, RecordWarning, stacklevel=3)
        return False
    return True


def calibrate(paths: Iterable[str | Path], holdout: Holdout | None = None, name: str = "",
              strict: bool = False, backends: Iterable[str] | None = None,
              spread_paths: Iterable[str | Path] = (), records_out: str | Path | None = None
              ) -> Calibration:
    """Fit a profile on record files under a hold-out protocol.

    Args:
        paths: record files; an `aic:SYSTEM[/FRAMEWORK[/VERSION]]` item imports an installed
            aiconfigurator-core's op tables (`epsim.calibrate.aic`; `records_out` names the
            file its records are written to) and tags each component with its source.
        holdout: which records the fit may use (default: `Holdout.parse(None)`, the default rule).
        backends: backends the caller expects; one without records is warned about.
        strict: a bad record line raises instead of being skipped with a warning.
        spread_paths: another run's record files, used only for the run-to-run spread of the
            components (never fitted on).
    Raises:
        RecordError: unreadable files, or no record any component can be fitted on.
    """
    holdout = holdout or Holdout.parse(None)
    paths, imports = expand_sources(paths, records_out)
    raw, files = load_records(paths, strict=strict)
    spread_paths = list(spread_paths)
    other, other_files = load_records(spread_paths, strict=strict) if spread_paths else ([], [])
    cal = fit_records(raw, files, holdout, name, backends, other)
    if other_files:
        cal.profile.provenance.spread_records = [
            {"path": f.path, "sha256": f.sha256, "num_records": f.num_records} for f in other_files]
    tag_profile(cal, imports)
    return cal


def _fit_keys(record) -> list[str]:
    """Components a record is fitted into here: none for a single-GPU host or eager timing
    (`timing` host | eager: judged, not fitted; device time and host overhead are fitted
    apart), for the layer bench's wholes (`epsim.calibrate.layer_parts.judged_only`) and for
    the kinds that are not one linear component."""
    if getattr(record, "timing", "") in ("host", "eager") or judged_only(record):
        return []
    if record.kind == "allreduce":        # not one linear component: `fit_allreduce_records`
        return []
    if is_nccl_allgather(record):         # NCCL's ring: the all-reduce model's (`allgather_record_us`)
        return []
    return component_keys(record)


def _is_eager_stage(record) -> bool:
    """A backend's experts stage timed eagerly: device time (kernel model, block ops inside
    the stage, the backend's layout) plus host overhead, which these records fit."""
    return record.kind == "experts" and record.backend != "local" and not is_graph(record)


# fitted after the others, over them: the attention block's own ops less the fitted kernels
# and projections; a backend's layout work less the fitted kernel model and block ops
def _over_kernels(key: str) -> bool:
    return key.split("/")[1] in ("attention_ops", "layout")


def _mla_decode(key: str) -> bool:
    return key.split("/")[1].startswith("mla_decode_")


def mla_decode_held(key: str, fits: dict[str, ComponentFit]) -> dict[str, float]:
    """The MLA decode kernel's tensor rate: its cache kind's prefill kernel's fit
    (`any/mla_decode_<kv>/graph` <- `any/mla_prefill_<kv>/graph`), {} where none was fitted.

    The decode's full-tile MMAs (Hopper's FlashAttention-3 64-head tiles, Blackwell's
    high-throughput kernel) run at the rate the same GPU's MLA prefill kernel sustains on a long
    chunk (`epsim.cost.mla.sustained_frac`); a decode on <= 64 heads is bound by its cache, so
    its records cannot tell its math rate: fitted free, it followed short contexts' fixed costs
    (1.0 on h100_sxm, 0.28 on b200_sxm) and priced 128 heads 20 % low and 80-100 % high (AIC's
    SGLang 0.5.14 tables; the 128-head records say 0.53-0.56 and >= 0.51). On Blackwell, whose
    one decode component prices both caches, also `fp8_mma_ratio`: the FP8 prefill's
    `tensor_frac` over the BF16 prefill's (at most 1), the share of the FP8 peak its FP8 MMAs
    reach relative to BF16's (`epsim.cost.mla_decode`)."""
    prefill = fits.get(key.replace("/mla_decode_", "/mla_prefill_"))
    if prefill is None or "tensor_frac" not in prefill.params or not prefill.records:
        return {}
    gpu = prefill.records[0].record.provenance.hardware
    held = {"tensor_frac": sustained_frac(prefill.params, gpu)}
    fp8 = fits.get(key.replace("/mla_decode_bf16/", "/mla_prefill_fp8/"))
    if ragged(gpu) and key.split("/")[1] == "mla_decode_bf16" and fp8 is not None \
            and fp8.params.get("tensor_frac"):
        ratio = float(fp8.params["tensor_frac"]) / float(prefill.params["tensor_frac"])
        held[FP8_MMA_RATIO] = min(1.0, ratio)
    return held


# quantised experts whose MMA rate is held at the same format's dense GEMM fit (`experts_held`)
HELD_EXPERT_FORMATS = ("nvfp4",)
HELD_EXPERT_PARAMS = ("tensor_frac",)
# ... and fitted on their EP 1 records first, the EP > 1 ones (where imported: NVFP4 on
# Blackwell, `epsim.calibrate.aic_records.EP_FIT_FORMATS`) then fitting these alone
EP_ONLY_PARAMS = ("token_us", "exit_us", *FALLBACK_STREAM_PARAMS)


def _held_experts(key: str) -> bool:
    kind = key.split("/")[1]
    return key.startswith("any/") and kind.startswith("experts_") and \
        kind.split("_", 1)[1] in HELD_EXPERT_FORMATS


def _staged_experts(key: str) -> bool:
    """The fused quantised MoE kernel, fitted EP 1 first where EP > 1 rows are imported
    (`EP_ONLY_PARAMS`): the held formats, and the others of `EP_FIT_FORMATS` (FP8-block)."""
    kind = key.split("/")[1]
    return _held_experts(key) or (key.startswith("any/") and kind.startswith("experts_")
                                  and kind.split("_", 1)[1] in EP_FIT_FORMATS)


def experts_held(key: str, fits: dict[str, ComponentFit], hardware: str) -> dict[str, float]:
    """The fused MoE kernel's FP4 tensor rate: its format's dense GEMM fit
    (`any/experts_nvfp4/graph` <- `any/gemm_nvfp4/graph`), {} where none was fitted. The dense
    NVFP4 GEMM is fed, not MMA-bound (`epsim.cost.fp4_gemm`): its rate is the FP4 share its
    widest tile sustains at the fitted operand feed (`fed_tensor_frac`)."""
    gemm = fits.get(key.replace("/experts_", "/gemm_"))
    if gemm is None:
        return {}
    held = {p: float(gemm.params[p]) for p in HELD_EXPERT_PARAMS if p in gemm.params}
    if "sm_feed_gbps" in gemm.params and "tensor_frac" in held:
        fmt = key.split("/")[1].split("_", 1)[1]
        hw = get_hardware(hardware)
        held["tensor_frac"] = min(held["tensor_frac"], fed_tensor_frac(
            float(gemm.params["sm_feed_gbps"]), num_sms(hw.name), tensor_peak(hw, fmt),
            ACTIVATION_BYTES[fmt]))
        # ... and its SMs' operand feed prices the fused kernel's narrower tiles
        # (`ExpertGemm.sm_fed`), not refitted on the MoE rows
        held["sm_feed_gbps"] = float(gemm.params["sm_feed_gbps"])
    return held


def normal_runner_held(key: str, fits: dict[str, ComponentFit]) -> dict[str, float] | None:
    """DeepEP normal's runner's MMA rate (`deepep/experts_<fmt>/normal`'s `tensor_frac`): the
    low-latency runner's fit of the same format (`deepep/experts_<fmt>/graph/low_latency`,
    fitted before it: keys in sorted order), None where none was fitted. DeepGEMM runs both
    layouts in one kernel, its GEMM type only the scheduler's (`csrc/jit_kernels/impls/
    sm100_fp8_gemm_1d1d.hpp`: `sm100_m_grouped_fp8_gemm_contiguous_1d1d` and `..._masked_1d1d`
    both launch `SM100FP8Gemm1D1DRuntime`; `sm90_fp8_gemm_1d2d.hpp` the same on SM90), so a
    tile's MMAs run at one rate; both models price the MFLOPs of the tiles they run. The normal
    rows cannot read it where the eager call's host floor (`host_us`) covers their device time:
    on GB200 / GB300 (538 / 633 µs) every row up to 512 tokens a rank, so a <= 1024-token fit
    traded the slope for the fixed cost (`tensor_frac` at its bound, 2048-16384 tokens priced
    6-42 % short)."""
    if not (key.startswith("deepep/experts_") and key.endswith("/normal")):
        return None
    masked = fits.get(key.replace("/normal", "/graph/low_latency"))
    if masked is None or "tensor_frac" not in masked.params:
        return None
    return {"tensor_frac": float(masked.params["tensor_frac"])}


# dense GEMMs whose MMA rate is held at the datasheet peak (its bound): the CuTe-DSL NVFP4 GEMM,
# whose compute side is its SMs' operand feed (`epsim.cost.fp4_gemm`: GB300, 1.5x GB200's FP4
# peak, streams the same bytes per SM in the same time), so its rows cannot tell the MMA rate;
# fitted free, the feed and the rate trade off on the <= 1024-row tokens split (the rate at
# 0.39 of the peak priced 4096-16384 rows 17-22 % long)
HELD_GEMM = {"any/gemm_nvfp4/graph": {"tensor_frac": 1.0}}


def _group(fit_set: list[SourcedRecord], base: Profile, skipped: list[str]
           ) -> tuple[dict[str, list[SourcedRecord]], list[SourcedRecord]]:
    """Fit records per component key, and the eager records whose stage has a device-only
    component (their host overhead is fitted apart, `epsim.calibrate.host`).

    The pooled `any/experts[/graph]` takes the single-GPU (`local`) grouped GEMM records alone
    where there are any: the 2-GPU backends' experts stages include their own layout work, and
    their eager timings are then host samples over the kernel model. Without such records the
    stages fit the kernel (less the block ops inside them), an eager fit holding the host.
    """
    groups: dict[str, list[SourcedRecord]] = defaultdict(list)
    eager_block_ops = []          # single-GPU block ops timed eagerly: their host part
    eager_stages = []             # backends' experts stages timed eagerly: their host part
    for s in fit_set:
        keys = _fit_keys(s.record)
        if keys and _predictable(s, base, skipped):
            for key in keys:
                groups[key].append(s)
        elif s.record.kind == "block_ops" and s.record.timing == "eager":
            eager_block_ops.append(s)
        elif _is_eager_stage(s.record) and _predictable(s, base, skipped):
            eager_stages.append(s)             # FP8: no pooled kernel row of its own
    if any(s.record.backend == "local" for k in groups if k.startswith("any/experts")
           for s in groups[k]):
        for key in [k for k in groups if k.startswith("any/experts")]:
            # a backend's eager stage is then the kernel model plus its host overhead
            eager_stages += [s for s in groups[key] if _is_eager_stage(s.record)]
            groups[key] = [s for s in groups[key] if s.record.backend == "local"]
            if not groups[key]:
                del groups[key]
    else:             # no kernel timed alone: the stages fit it, eager ones host included
        eager_stages = []
    eager_host = [s for s in eager_block_ops if component_keys(device_twin(s.record))[0] in groups]
    eager_host += eager_stages
    for key in list(groups):
        members = groups[key]
        r = members[0].record
        if r.kind not in HOST_KINDS or GRAPH in key.split("/") or key.startswith("any/"):
            continue
        if component_keys(device_twin(r))[0] in groups:      # device time measured too
            eager_host += members
            del groups[key]
    return groups, eager_host


def fit_records(raw: list[SourcedRecord], files: list[RecordFileInfo], holdout: Holdout,
                name: str = "", backends: Iterable[str] | None = None,
                spread_raw: list[SourcedRecord] = ()) -> Calibration:
    """`calibrate` on records already read (`load_records`; passes not yet merged);
    `spread_raw`: another run's records, for the run-to-run spread only."""
    records = pair_attention_kernels(merge_passes(raw))
    hardware = _hardware(records) if records else "cpu"
    base = Profile(name=name or f"{hardware} fit", hardware=hardware)
    skipped: list[str] = []
    fit_set = [s for s in records if not holdout.held_out(s.record)]
    groups, eager_host = _group(fit_set, base, skipped)
    if not groups and not any(s.record.kind in ("p2p_copy", "rebalance", "rebalance_term", "allreduce")
                              for s in fit_set):
        raise RecordError(f"records ({', '.join(f.path for f in files)}) hold no dispatch, combine, "
                          f"experts or rebalance timing in the fit set of holdout "
                          f"'{holdout.describe()}'")
    seen = {s.record.backend for s in records}
    for backend in backends or ():
        if backend not in seen:
            warnings.warn(f"backend {backend!r}: no records in {', '.join(f.path for f in files)}; "
                          f"its components keep datasheet values", CalibrationWarning, stacklevel=2)
    peaks = peaks_of(hardware)
    run_devs = run_deviations([*raw, *spread_raw])
    fits: dict[str, ComponentFit] = {}
    def is_layer(key: str) -> bool:            # `<backend>/moe_layer[/graph]`
        return key.split("/")[1] == "moe_layer"

    for key in sorted(k for k in groups if not is_layer(k) and not _over_kernels(k)
                      and not _mla_decode(k) and not _staged_experts(k)):
        fits[key] = fit_component(key, groups[key], evaluation_profile(base.model_copy(deep=True)),
                                  peaks, held=HELD_GEMM.get(key) or normal_runner_held(key, fits))
    for key in sorted(k for k in groups if _mla_decode(k)):       # after its prefill's
        fits[key] = fit_component(key, groups[key], evaluation_profile(base.model_copy(deep=True)),
                                  peaks, held=mla_decode_held(key, fits))
    for key in sorted(k for k in groups if _staged_experts(k)):     # after its dense GEMM's
        held = experts_held(key, fits, hardware) if _held_experts(key) else {}
        local = [s for s in groups[key] if s.record.ep_size == 1]
        if local and len(local) < len(groups[key]):
            # the EP 1 rows fix the kernel's rates; the EP > 1 rows add only its per-token
            # work on the tokens routed elsewhere (`token_us`, 0 at EP 1) and the launched CTAs
            # that exit (`exit_us`, few at EP 1: `epsim.cost.exiting_ctas`)
            first = fit_component(key, local, evaluation_profile(base.model_copy(deep=True)),
                                  peaks, held=held)
            held = {**{p: v for p, v in first.params.items() if p not in EP_ONLY_PARAMS}, **held}
        fits[key] = fit_component(key, groups[key], evaluation_profile(base.model_copy(deep=True)),
                                  peaks, held=held)
    kernels = base.model_copy(update={"components": {k: f.component() for k, f in fits.items()}})
    for key in sorted(k for k in groups if _over_kernels(k)):
        fits[key] = fit_component(key, groups[key], evaluation_profile(kernels.model_copy(deep=True)),
                                  peaks)
    fits.update(fit_allreduce_records([s for s in fit_set if s.record.kind == "allreduce"
                                       or is_nccl_allgather(s.record)],
                                      ClusterSpec(gpu=hardware if hardware != "cpu" else NOMINAL_GPU)))
    components = {k: f.component() for k, f in fits.items()}
    for key, fit in fits.items():
        components[key].spread = component_spread(fit.records, fit.predicted_us, fit.measured_us,
                                                  run_devs)
    # host overhead: the block ops' first, since a backend's experts stage holds some of them
    samples = host_samples(eager_host, evaluation_profile(
        base.model_copy(update={"components": dict(components)})))
    for key in sorted(k for k in samples if k.split("/")[1] == "block_ops"):
        components[key] = fit_host(samples[key])
    samples = host_samples(eager_host, evaluation_profile(
        base.model_copy(update={"components": dict(components)})))
    for key in sorted(k for k in samples if k.split("/")[1] != "block_ops"):
        components[key] = fit_host(samples[key])
    fitted = base.model_copy(update={"components": dict(components)})
    for key in sorted(k for k in groups if is_layer(k)):
        fits[key] = fit_layer_sync(key, groups[key], evaluation_profile(fitted.model_copy(deep=True)))
        components[key] = fits[key].component()
    components = dict(sorted(components.items()))
    rebalance = fit_rebalance([s for s in fit_set if s.record.kind in ("p2p_copy", "rebalance")],
                              peaks["nvl_gbps"])
    if rebalance is not None:
        components["any/rebalance"] = rebalance
    host = fit_rebalance_host(fit_set)
    if host is not None:
        components["any/rebalance_host"] = host
    num_held_out = len(records) - len(fit_set)
    profile = base.model_copy(update={
        "components": components,
        "provenance": _provenance(records, files, holdout, len(fit_set), num_held_out)})
    return Calibration(profile, fits, files, len(fit_set), num_held_out, holdout, skipped)
