"""epsim: a discrete-event simulator of Mixture-of-Experts inference with expert parallelism.

The public API is re-exported lazily so that `import epsim` stays cheap (no scipy,
matplotlib or simpy until used) and never imports torch.
"""

from __future__ import annotations

from epsim.exports import lazy_getattr

__version__ = "0.1.0"

_EXPORTS = {
    "ModelSpec": "epsim.spec", "ClusterSpec": "epsim.spec", "DeploymentSpec": "epsim.spec",
    "WorkloadSpec": "epsim.spec", "Scenario": "epsim.spec", "HardwareSpec": "epsim.spec",
    "load_scenario": "epsim.spec", "scenario_from_dict": "epsim.spec",
    "scenario_from_text": "epsim.spec",
    "get_model": "epsim.zoo", "get_hardware": "epsim.zoo",
    "model_names": "epsim.zoo", "hardware_names": "epsim.zoo",
    "EpsimError": "epsim.errors", "SpecError": "epsim.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

__getattr__ = lazy_getattr(__name__, _EXPORTS)
