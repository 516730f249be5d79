"""Scenario specs: model, cluster, deployment, workload (pydantic, loaded from YAML).

The names below are re-exported lazily (`epsim.exports`): the zoo (`epsim.zoo`) builds its
entries from the schema modules here while `ClusterSpec` and `Scenario` resolve names through
the zoo, so importing one module of this package must not import them all.
"""

from __future__ import annotations

from epsim.exports import lazy_getattr

_EXPORTS = {
    "DeploymentSpec": "epsim.spec.deployment", "FailureSpec": "epsim.spec.deployment",
    "HardwareSpec": "epsim.spec.gpu",
    "ClusterSpec": "epsim.spec.hardware",
    "ModelSpec": "epsim.spec.model",
    "Scenario": "epsim.spec.scenario", "load_scenario": "epsim.spec.scenario",
    "parse_override": "epsim.spec.scenario", "scenario_from_dict": "epsim.spec.scenario",
    "scenario_from_text": "epsim.spec.scenario",
    "HotSetSkew": "epsim.spec.workload", "SkewSpec": "epsim.spec.workload",
    "TraceSkew": "epsim.spec.workload", "UniformSkew": "epsim.spec.workload",
    "WorkloadSpec": "epsim.spec.workload", "ZipfSkew": "epsim.spec.workload",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
