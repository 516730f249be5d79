"""A profile from record files: group records by component, fit each on the fit set of the
hold-out protocol, and write down where every number came from.

Components (profile keys, `epsim.profile`):
  `<backend>/dispatch`, `<backend>/combine`  DeepEP-class all-to-all (torch, mooncake, deepep
                                             with `/normal` or `/low_latency`); FP8 dispatches
                                             fit `<backend>/dispatch[/mode]/fp8`
  `none/allgather`, `none/allreduce`         the `none` backend's two collectives
  `<backend>/experts[/fp8]`                   the experts stage as each backend lays it out
  `any/experts`                              all backends pooled (for backends not measured)
  `<backend>/moe_layer`                       `sync_us`: what a whole layer adds to its parts
  `any/rebalance`                            EPLB weight moves (`epsim.calibrate.rebalance`)
The parts are fitted first; a layer's `sync_us` then on `moe_layer` records, the parts fixed.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from epsim.calibrate.fit import ComponentFit, fit_component, fit_layer_sync
from epsim.calibrate.holdout import Holdout
from epsim.calibrate.inputs import (RecordFileInfo, RecordWarning, SourcedRecord, load_records,
                                    merge_passes)
from epsim.errors import EpsimError, ProfileError, RecordError
from epsim.profile import Profile, ProfileProvenance, RecordSource, component_keys

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
    from epsim.zoo import hardware_names
    if profile.hardware in hardware_names():
        return profile
    return profile.model_copy(update={"hardware": NOMINAL_GPU})


def _hardware(records: list[SourcedRecord]) -> str:
    names = {s.record.provenance.hardware for s in records}
    devices = {s.record.provenance.device for s in records}
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
    from epsim.spec.hardware import ClusterSpec
    cluster = ClusterSpec(gpu=hardware if hardware != "cpu" else NOMINAL_GPU)
    hw = cluster.hardware
    return {"nvl_gbps": cluster.nvlink_gbps_resolved, "rdma_gbps": cluster.rdma_gbps_resolved,
            "hbm_gbps": hw.hbm_gbps, "tflops": hw.bf16_tflops}


def _provenance(records: list[SourcedRecord], files: list[RecordFileInfo], holdout: Holdout,
                num_fit: int, num_held_out: int) -> ProfileProvenance:
    from epsim.records import records_hash
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
    from epsim.cost.record import predict_record
    try:
        predict_record(s.record, evaluation_profile(profile))
    except EpsimError as exc:
        message = f"{s.where}: {exc} -- skipped"
        skipped.append(message)
        warnings.warn(message, RecordWarning, stacklevel=3)
        return False
    return True


def calibrate(paths: Iterable[str | Path], holdout: Holdout | None = None, name: str = "",
              strict: bool = False, backends: Iterable[str] | None = None) -> Calibration:
    """Fit a profile on record files under a hold-out protocol.

    Args:
        holdout: which records the fit may use (default: `Holdout.parse(None)`, the default rule).
        backends: backends the caller expects; one without records is warned about.
        strict: a bad record line raises instead of being skipped with a warning.
    Raises:
        RecordError: unreadable files, or no record any component can be fitted on.
    """
    from epsim.calibrate.rebalance import fit_rebalance
    holdout = holdout or Holdout.parse(None)
    records, files = load_records(paths, strict=strict)
    records = merge_passes(records)
    hardware = _hardware(records) if records else "cpu"
    base = Profile(name=name or f"{hardware} fit", hardware=hardware)
    skipped: list[str] = []
    fit_set = [s for s in records if not holdout.held_out(s.record)]
    groups: dict[str, list[SourcedRecord]] = defaultdict(list)
    for s in fit_set:
        keys = component_keys(s.record)
        if keys and _predictable(s, base, skipped):
            for key in keys:
                groups[key].append(s)
    if not groups and not any(s.record.kind in ("p2p_copy", "rebalance") for s in fit_set):
        raise RecordError(f"records ({', '.join(f.path for f in files)}) hold no dispatch, combine, "
                          f"experts or rebalance timing in the fit set of holdout "
                          f"'{holdout.describe()}'")
    seen = {s.record.backend for s in records}
    for backend in backends or ():
        if backend not in seen:
            warnings.warn(f"backend {backend!r}: no records in {', '.join(f.path for f in files)}; "
                          f"its components keep datasheet values", CalibrationWarning, stacklevel=2)
    peaks = peaks_of(hardware)
    fits: dict[str, ComponentFit] = {}
    def is_layer(key: str) -> bool:            # `<backend>/moe_layer[/graph]`
        return key.split("/")[1] == "moe_layer"

    for key in sorted(k for k in groups if not is_layer(k)):
        fits[key] = fit_component(key, groups[key], evaluation_profile(base.model_copy(deep=True)),
                                  peaks)
    fitted = base.model_copy(update={"components": {k: f.component() for k, f in fits.items()}})
    for key in sorted(k for k in groups if is_layer(k)):
        fits[key] = fit_layer_sync(key, groups[key], evaluation_profile(fitted.model_copy(deep=True)))
    components = {key: fit.component() for key, fit in sorted(fits.items())}
    rebalance = fit_rebalance([s for s in fit_set if s.record.kind in ("p2p_copy", "rebalance")],
                              peaks["nvl_gbps"])
    if rebalance is not None:
        components["any/rebalance"] = rebalance
    num_held_out = len(records) - len(fit_set)
    profile = base.model_copy(update={
        "components": components,
        "provenance": _provenance(records, files, holdout, len(fit_set), num_held_out)})
    return Calibration(profile, fits, files, len(fit_set), num_held_out, holdout, skipped)
