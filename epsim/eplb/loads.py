"""Read an expert-load matrix `[layers, experts]` from a file, whatever its format.

JSON (`[[...], ...]`, `{"loads": ...}` or SGLang's `{"logical_count": ...}`), NPY, CSV (one
row per layer), our JSONL trace or an SGLang expert-distribution dump (`.pt` file or folder);
traces are summed over steps.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from epsim.eplb.inputs import check_weight
from epsim.errors import PlacementError, SpecError
from epsim.io import MAX_BINARY_BYTES, read_bytes, read_text
from epsim.routing.trace import is_json_loads, read_loads_json, read_trace

FORMATS = ".json[.gz], .jsonl, .npy, .csv, or an SGLang dump (.pt file or folder)"


def _from_csv(path: Path) -> np.ndarray:
    text = read_text(path, "loads file")
    try:
        return np.loadtxt(io.StringIO(text), delimiter=",", comments="#", ndmin=2, dtype=np.float64)
    except ValueError as exc:
        raise SpecError(f"{path}: loads must be numbers, one row per layer, comma-separated "
                        f"({str(exc).splitlines()[0]})") from None


def _from_npy(path: Path) -> np.ndarray:
    data = read_bytes(path, "loads file", MAX_BINARY_BYTES)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError):  # pickled objects, a corrupt header, not .npy at all
        raise SpecError(f"{path}: not a numeric .npy array (write it with numpy.save)") from None


def read_loads(path: str | Path) -> np.ndarray:
    """Loads per logical expert, summed over recorded steps.

    Returns:
        [layers, experts] float64, finite and >= 0 (a 1-D file is one layer).
    Raises:
        SpecError / PlacementError: missing or unreadable file, unknown format, wrong shape,
            NaN or negative loads; the message names the file.
    """
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{path}: loads file not found")
    suffix = path.suffix.lower()
    if path.is_dir() or suffix in (".pt", ".jsonl"):
        loads = read_trace(path).sum(axis=0)                                # [layers, experts]
    elif is_json_loads(path):
        loads = read_loads_json(path)
    elif suffix == ".csv":
        loads = _from_csv(path)
    elif suffix == ".npy":
        loads = _from_npy(path)
    else:
        raise SpecError(f"{path}: loads file suffix ({suffix or 'none'!r}) must be one of {FORMATS}")
    if loads.ndim == 1:
        loads = loads[None, :]
    elif loads.ndim == 3:                                                    # [steps, layers, experts]
        loads = loads.sum(axis=0)
    try:
        return check_weight(loads, name="loads")
    except PlacementError as exc:
        raise PlacementError(f"{path}: {exc}") from None
