"""Recorded expert loads: our JSON Lines traces, SGLang expert-distribution dumps (`.pt`) and
the JSON loads SGLang's `--init-expert-location` takes (`{"logical_count": ...}`).

All read to one array, `[steps, layers, experts]` logical-expert token counts. SGLang counts
over every hidden layer, its dense ones (DeepSeek-V3's first three) as all-zero rows;
`moe_layers` drops them for a model's MoE layers.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from epsim.errors import SpecError
from epsim.io import MAX_BINARY_BYTES, load_json, loads_json, read_bytes, read_text

JSON_KEYS = ("logical_count", "loads")      # SGLang's stat dump / --init-expert-location; ours


def physical_to_logical_counts(physical_counts: np.ndarray, physical_to_logical: np.ndarray,
                               num_logical: int | None = None) -> np.ndarray:
    """Sum the counts of every replica into its logical expert.

    Args:
        physical_counts: [..., layers, physical] counts.
        physical_to_logical: [layers, physical] int, logical id of each physical slot (-1 = empty).
    Returns:
        [..., layers, logical] float64.
    """
    counts = np.asarray(physical_counts, dtype=np.float64)
    p2l = np.asarray(physical_to_logical, dtype=np.int64)
    num_logical = num_logical or int(p2l.max()) + 1
    num_layers = p2l.shape[0]
    flat = counts.reshape(-1, num_layers, p2l.shape[1])
    out = np.zeros((flat.shape[0], num_layers, num_logical))
    for layer in range(num_layers):
        valid = p2l[layer] >= 0
        np.add.at(out[:, layer, :], (slice(None), p2l[layer][valid]), flat[:, layer, valid])
    return out.reshape(*counts.shape[:-1], num_logical)


def read_jsonl_trace(path: str | Path) -> np.ndarray:
    """Read our trace: one JSON object per line with `loads` = [layers, experts] counts.

    Lines are ordered by `forward_pass_id` when present (measurement records of kind
    `expert_load` from the live recorder qualify).

    Returns:
        [steps, layers, experts] float64.
    Raises:
        SpecError: a line that is not JSON, lacks `loads`, or has a different shape.
    """
    path = Path(path)
    steps: list[tuple[int, np.ndarray]] = []
    shape = None
    for lineno, line in enumerate(read_text(path, "trace").splitlines(), 1):
        if not line.strip():
            continue
        obj = loads_json(line, f"{path}:{lineno}", one_line=True)
        if not isinstance(obj, dict) or "loads" not in obj:
            raise SpecError(f"{path}:{lineno}: loads (missing) must be a [layers, experts] list")
        try:
            loads = np.asarray(obj["loads"], dtype=np.float64)
            step = int(obj.get("forward_pass_id", len(steps)))
        except (TypeError, ValueError, OverflowError):
            raise SpecError(f"{path}:{lineno}: loads must be a [layers, experts] list of numbers "
                            f"and forward_pass_id an integer") from None
        if loads.ndim == 1:
            loads = loads[None, :]
        if loads.ndim != 2 or not np.isfinite(loads).all() or (loads < 0).any():
            raise SpecError(f"{path}:{lineno}: loads must be a [layers, experts] list of "
                            f"finite counts >= 0")
        if shape is not None and loads.shape != shape:
            raise SpecError(f"{path}:{lineno}: loads shape {list(loads.shape)} must match "
                            f"earlier lines {list(shape)}")
        shape = loads.shape
        steps.append((step, loads))
    if not steps:
        raise SpecError(f"{path}: no trace lines found")
    steps.sort(key=lambda item: item[0])
    return np.stack([loads for _, loads in steps])


def read_sglang_dump(path: str | Path) -> np.ndarray:
    """Read SGLang's expert-distribution recorder output (`.pt` file or a folder of them).

    Per-pass dumps hold `records` (each with `forward_pass_id`, `rank`,
    `global_physical_count` [layers, physical]) and `last_physical_to_logical_map`
    [layers, physical]; stat dumps hold `logical_count` [..., layers, experts]. Loaded with
    `torch.load(weights_only=True)`: tensors and plain containers only, never arbitrary pickles.

    Returns:
        [steps, layers, experts] float64 logical counts, one step per forward pass.
    """
    try:
        import torch  # only this reader needs torch
    except ImportError:
        raise SpecError(f"{path}: reading an SGLang .pt dump needs torch "
                        f"(pip install 'epsim[live]')") from None
    path = Path(path)
    files = sorted(path.glob("*.pt")) if path.is_dir() else [path]
    if not files:
        raise SpecError(f"{path}: no .pt files found")
    per_pass: dict[int, np.ndarray] = {}
    stat_counts = []
    p2l = None
    for file in files:
        pack = _load_pt(file, torch)
        if not isinstance(pack, dict):
            raise SpecError(f"{file}: must hold a dict with 'records' or 'logical_count' "
                            f"(it holds a {type(pack).__name__})")
        if "logical_count" in pack:
            counts = _counts(pack["logical_count"], file, "logical_count")
            if counts.ndim < 2:
                raise SpecError(f"{file}: logical_count (shape {list(counts.shape)}) must be "
                                f"[..., layers, experts]")
            stat_counts.append(counts.reshape(-1, *counts.shape[-2:]))
            continue
        if "records" not in pack or "last_physical_to_logical_map" not in pack:
            raise SpecError(f"{file}: must hold 'records' and 'last_physical_to_logical_map' "
                            f"(SGLang per_pass mode) or 'logical_count' (stat mode)")
        p2l = _counts(pack["last_physical_to_logical_map"], file, "last_physical_to_logical_map",
                      low=-1)
        if p2l.ndim != 2 or p2l.size == 0 or (p2l != np.round(p2l)).any():
            raise SpecError(f"{file}: last_physical_to_logical_map (shape {list(p2l.shape)}) must "
                            f"be a non-empty [layers, physical] integer map")
        p2l = p2l.astype(np.int64)
        records = pack["records"]
        if not isinstance(records, (list, tuple)):
            raise SpecError(f"{file}: records ({type(records).__name__}) must be a list")
        for i, record in enumerate(records):
            try:
                fid = int(record["forward_pass_id"])
                gpc = record["global_physical_count"]
            except (KeyError, TypeError, ValueError):
                raise SpecError(f"{file}: records[{i}] must have forward_pass_id, rank and "
                                f"global_physical_count") from None
            gpc = _counts(gpc, file, f"records[{i}].global_physical_count")
            if gpc.shape != p2l.shape:
                raise SpecError(f"{file}: records[{i}].global_physical_count (shape "
                                f"{list(gpc.shape)}) must match last_physical_to_logical_map "
                                f"{list(p2l.shape)}")
            per_pass[fid] = per_pass.get(fid, 0) + gpc
    if stat_counts:
        if len({c.shape[1:] for c in stat_counts}) > 1:
            raise SpecError(f"{path}: logical_count shapes must agree across files")
        return np.concatenate(stat_counts)
    if not per_pass:
        raise SpecError(f"{path}: no records found (records must be a non-empty list)")
    physical = np.stack([per_pass[k] for k in sorted(per_pass)])  # [steps, layers, physical]
    return physical_to_logical_counts(physical, p2l)


def _load_pt(file: Path, torch):
    """`torch.load(weights_only=True)` of a size-capped file. torch's own message is not
    passed on: it advises `weights_only=False`, which would run arbitrary pickled code."""
    data = read_bytes(file, "SGLang dump", MAX_BINARY_BYTES)
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many types for a bad file  # noqa: BLE001
        raise SpecError(f"{file}: must be an SGLang expert-distribution dump saved with torch.save "
                        f"(tensors and plain containers only; {type(exc).__name__} reading it)") from None


def _counts(value, file: Path, name: str, low: float = 0.0) -> np.ndarray:
    """A tensor/list of counts as a float64 array; finite and >= `low`, or SpecError."""
    try:
        array = np.asarray(value.cpu().numpy() if hasattr(value, "cpu") else value, dtype=np.float64)
    except (TypeError, ValueError, RuntimeError):
        raise SpecError(f"{file}: {name} must be a tensor of numbers") from None
    if not np.isfinite(array).all() or (array < low).any():
        raise SpecError(f"{file}: {name} must hold finite counts >= {low:g}")
    return array


def is_json_loads(path: str | Path) -> bool:
    """`.json` or `.json.gz`: a loads file `read_loads_json` reads (not our `.jsonl` trace)."""
    suffixes = [s.lower() for s in Path(path).suffixes[-2:]]
    return suffixes[-1:] == [".json"] or suffixes == [".json", ".gz"]


def read_loads_json(path: str | Path) -> np.ndarray:
    """Read expert loads from a JSON file (gzipped when it ends in `.gz`).

    SGLang's `{"logical_count": [...]}` (its expert-distribution recorder's stat output, the
    file `--init-expert-location` takes), our `{"loads": [...]}`, or a bare list.

    Returns:
        [layers, experts] or [steps, layers, experts] float64 (a 1-D list: [experts]),
        finite counts >= 0.
    Raises:
        SpecError: not JSON, no known key, not a rectangular list, an entry NaN/inf or < 0
            (one line naming the file and the entry).
    """
    path = Path(path)
    data = load_json(path, "loads file")
    if isinstance(data, dict):
        key = next((k for k in JSON_KEYS if k in data), None)
        if key is None:
            raise SpecError(f"{path}: loads (missing) must be a [layers, experts] list under "
                            f"'loads' or 'logical_count' (keys found: {sorted(data)[:5]})")
        data = data[key]
    try:
        if np.asarray(data).dtype == bool:                 # true/false are not token counts
            raise ValueError
        loads = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        raise SpecError(f"{path}: loads must be a rectangular [layers, experts] list of "
                        f"numbers") from None
    if loads.ndim not in (1, 2, 3) or loads.size == 0:
        raise SpecError(f"{path}: loads (shape {list(loads.shape)}) must be a non-empty "
                        f"[layers, experts] or [steps, layers, experts] list")
    bad = np.argwhere(~np.isfinite(loads) | (loads < 0))
    if len(bad):
        where = tuple(int(i) for i in bad[0])
        value = loads[where]
        rule = "must be >= 0; loads are routed-token counts" if value < 0 else "must be finite"
        raise SpecError(f"{path}: loads[{', '.join(map(str, where))}] ({value:g}) {rule}")
    return loads


def moe_layers(trace: np.ndarray, num_layers: int) -> np.ndarray:
    """The trace's MoE layers: where it has more layers than `num_layers`, its leading all-zero
    layers (the dense layers SGLang counts as zeros) dropped, at most the surplus.

    Args:
        trace: [steps, layers, experts] counts.
    Returns:
        [steps, layers', experts], layers' >= num_layers where the trace had that many.
    """
    surplus = trace.shape[1] - num_layers
    if surplus <= 0:
        return trace
    zero = ~trace.any(axis=(0, 2))                                            # [layers]
    leading = int(np.argmin(zero)) if not zero.all() else 0
    return trace[:, min(leading, surplus):]


def read_trace(path: str | Path) -> np.ndarray:
    """Read a trace by file type: `.pt` or a folder -> SGLang dump, `.json[.gz]` -> loads JSON
    (one step unless it holds [steps, layers, experts]), otherwise our JSONL."""
    path = Path(path)
    if path.suffix == ".pt" or path.is_dir():
        return read_sglang_dump(path)
    if is_json_loads(path):
        loads = read_loads_json(path)
        while loads.ndim < 3:                    # [experts] -> [1, experts] -> [1, 1, experts]
            loads = loads[None]
        return loads
    return read_jsonl_trace(path)
