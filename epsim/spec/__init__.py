"""Scenario specs: model, cluster, deployment, workload (pydantic, loaded from YAML)."""

from epsim.spec.deployment import DeploymentSpec, FailureSpec
from epsim.spec.hardware import ClusterSpec, HardwareSpec
from epsim.spec.model import ModelSpec
from epsim.spec.scenario import (Scenario, load_scenario, parse_override, scenario_from_dict,
                                 scenario_from_text)
from epsim.spec.workload import (HotSetSkew, SkewSpec, TraceSkew, UniformSkew, WorkloadSpec,
                                 ZipfSkew)

__all__ = [
    "ClusterSpec", "DeploymentSpec", "FailureSpec", "HardwareSpec", "HotSetSkew", "ModelSpec",
    "Scenario", "SkewSpec", "TraceSkew", "UniformSkew", "WorkloadSpec", "ZipfSkew",
    "load_scenario", "parse_override", "scenario_from_dict", "scenario_from_text",
]
