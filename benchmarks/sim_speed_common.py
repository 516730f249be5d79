"""What the parts of the simulator speed benchmark (`benchmarks/sim_speed.py`) share: where the
scenarios and the result live, the speed targets, the one-core setting and the machine."""

from __future__ import annotations

import os
import platform
import subprocess
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import simpy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "sim_speed.md"
EPLB_SCENARIOS = ("eplb_redundancy_32gpu", "eplb_interval_drift", "redundant_experts",
                  "deepseek_v3_decode", "deepseek_v3_prefill", "elastic_ep64_failure")
TARGETS = {"R1": 1000.0, "EPLB": 300.0}     # issue #17: simulated s per wall s on one core


def scenario_file(name: str) -> Path:
    """scenarios/NAME.yaml."""
    return ROOT / "scenarios" / f"{name}.yaml"


R1 = scenario_file("r1_qwen235b_ep64_decode")


@contextmanager
def quietly():
    """The profile's extrapolation warnings off: the timed runs say it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def one_core(pin: bool) -> str:
    """The process is single-threaded (one BLAS thread); optionally pin it to one CPU too."""
    if pin and hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"single-threaded, pinned to CPU {cpu}"
    return "single-threaded (one BLAS thread), not pinned"


def machine() -> str:
    try:
        cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        cpu = "\n".join(cpu.splitlines()[:10])
    except (OSError, subprocess.CalledProcessError):
        cpu = platform.processor() or "unknown CPU"
    return (f"{cpu}\n\npython {platform.python_version()}, numpy {np.__version__}, "
            f"simpy {simpy.__version__}, {platform.platform()}")
