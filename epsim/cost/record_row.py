"""One record's design row (`RecordFeatures`) and what every row reads off a record: the
cluster it was measured on and the timing path of its stage (`epsim.cost.record` for the
multi-GPU stages, `epsim.cost.record_single` for the single-GPU kernels and layer parts)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epsim.cost.timing import stage_timing
from epsim.errors import RecordError
from epsim.profile import Profile, is_graph, record_mode_path
from epsim.records import MeasurementRecord
from epsim.spec.hardware import ClusterSpec
from epsim.zoo import get_hardware, hardware_names


@dataclass(frozen=True)
class RecordFeatures:
    """One record's row for a least-squares fit of one component.

    Attributes:
        component: profile key, e.g. "torch/dispatch", "deepep/combine/low_latency", "any/experts".
        coef_names: names of the coefficients the row multiplies (e.g. "inv_nvl_gbps").
        row: [len(coef_names)] float64; `row @ coefficients` is microseconds.
        coefficients: [len(coef_names)] the profile's current coefficients of that component
            (zeros for a backend's layout work the profile has not fitted: not charged).
        host_us: host overhead of an eager record.
        offset_us: device time of the record the component does not hold (a backend's experts
            stage: the kernel model and the block ops inside it), fixed in a fit.
    """

    component: str
    coef_names: tuple[str, ...]
    row: np.ndarray
    coefficients: np.ndarray
    host_us: float = 0.0
    offset_us: float = 0.0

    @property
    def predicted_us(self) -> float:
        """Device time (`row @ coefficients` plus the fixed parts the row does not hold,
        `offset_us`) plus the host overhead of an eager record."""
        return float(self.row @ self.coefficients) + self.offset_us + self.host_us


def record_cluster(record: MeasurementRecord, profile: Profile) -> ClusterSpec:
    """The cluster a record was measured on: its provenance's GPU (else the profile's), as
    many nodes as its EP size needs."""
    gpu = record.provenance.hardware or profile.hardware
    if gpu not in hardware_names():
        raise RecordError(f"provenance.hardware ({gpu!r}) must be one of {hardware_names()}")
    per_node = get_hardware(gpu).gpus_per_node
    return ClusterSpec(gpu=gpu, num_nodes=max(1, -(-record.ep_size // per_node)))


def carried_from(profile: Profile, cluster: ClusterSpec):
    """The zoo GPU whose records `profile` was fitted on where it is not `cluster`'s (a system
    hold-out: fitted rates, fractions of that GPU's datasheet, are carried to this GPU's; each
    component's `carried_*` says which), else None."""
    if profile.hardware in hardware_names() and profile.hardware != cluster.gpu:
        return get_hardware(profile.hardware)
    return None


def device_path(record: MeasurementRecord, profile: Profile, kind: str) -> tuple[str, float]:
    """(mode path to read the device-time parameters with, host overhead µs to add): an eager
    record of a stage whose profile holds device time and host overhead apart is predicted as
    the simulator predicts an eager step (`epsim.cost.timing.stage_timing`); others by their
    own component."""
    path = record_mode_path(record, kind)
    if is_graph(record):
        return path, 0.0
    # the experts' device time is the kernel model's whatever the backend (`any/experts...`)
    owner = "any" if kind == "experts" and record.backend != "local" else None
    timing = stage_timing(profile, record.backend, kind, path, eager=True, device_owner=owner)
    if timing.host_key:
        return timing.mode_path, timing.host_us
    return path, 0.0
