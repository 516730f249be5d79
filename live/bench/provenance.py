"""Where a measurement ran: device, driver, library versions, commit (for MeasurementRecord)."""

from __future__ import annotations

import importlib.util
import os
import platform
import runpy
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch


def _run(cmd: list[str], cwd: str | None = None) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _version(*dists: str) -> str:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return ""


def deep_ep_version() -> str:
    """The installed DeepEP: its version, plus what `scripts/build_deepep.sh` recorded in the
    wheel (release, commit, torch, CUDA, NVSHMEM) when it was built from source; "" if absent.

    Reads `deep_ep/_build_info.py` as a file: importing `deep_ep` would load its CUDA extension.
    """
    version = _version("sgl-deep-ep", "deep-ep", "deep_ep")
    try:
        spec = importlib.util.find_spec("deep_ep")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return version
    info_path = Path(list(spec.submodule_search_locations)[0]) / "_build_info.py"
    if not info_path.is_file():
        return version
    info = runpy.run_path(str(info_path)).get("BUILD_INFO", {})
    return (f"{version} ({info.get('release', '?')} {info.get('commit', '?')[:12]}; torch "
            f"{info.get('torch', '?')}, CUDA {info.get('cuda', '?')}, NVSHMEM "
            f"{info.get('nvshmem') or 'none'}; kernels {info.get('kernels', '?')})")


def commit() -> str:
    """`EPSIM_COMMIT` if set, else `git rev-parse HEAD` (+ "-dirty" with local changes)."""
    if os.environ.get("EPSIM_COMMIT"):
        return os.environ["EPSIM_COMMIT"]
    root = str(Path(__file__).resolve().parent.parent)
    head = _run(["git", "rev-parse", "HEAD"], cwd=root)
    if not head:
        return "unknown"
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return head + ("-dirty" if dirty else "")


def collect(world_size: int, backend: str) -> dict:
    """Provenance fields of `epsim.records.Provenance` for this machine.

    Args:
        world_size: ranks in the measurement; backend: "nccl" or "gloo".
    """
    cuda = backend == "nccl" and torch.cuda.is_available()
    if cuda:
        name = torch.cuda.get_device_name(0)
        device = f"{world_size}x {name}"
        hardware = next((h for h in ("H200", "H100", "H800", "B200") if h in name), "")
        driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        driver = driver.splitlines()[0].strip() if driver else ""
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    else:
        device, hardware, driver, nccl = f"{world_size}x cpu (gloo)", "", "", ""
    return {"device": device, "hardware": hardware, "driver": driver, "torch": torch.__version__,
            "nccl": nccl, "cuda": torch.version.cuda or "",
            "mooncake": _version("mooncake-transfer-engine-cuda13", "mooncake-transfer-engine"),
            "deep_ep": deep_ep_version(),
            "commit": commit(), "host": platform.node(),
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds")}
