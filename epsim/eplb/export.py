"""A placement and its loads as files: the two SGLang's `--init-expert-location` reads, and
epsim's own maps.

SGLang (`sglang/srt/eplb/expert_location.py`, `compute_initial_expert_location_metadata`) reads
`--init-expert-location PATH` as JSON (`.json`), a torch file (`.pt`) or inline JSON, and takes
one of two dicts:

- `{"physical_to_logical_map": [layers, physical]}`: the placement itself, passed as keyword
  arguments to `ExpertLocationMetadata.init_by_mapping` -- so the file holds that key alone
  (`EXPERT_LOCATION_FILE`);
- `{"logical_count": [layers, experts]}` (or `[..., layers, experts]`): expert loads, from which
  SGLang computes the placement with its EPLB algorithm at start (`LOGICAL_COUNT_FILE`; epsim's
  `read_loads` reads it back too).

`PLACEMENT_FILE` holds epsim's maps (phy2log, log2phy, logcnt, GPUs, nodes), what `epsim eplb
--previous` reads. Physical slot `s` lives on EP rank `s // (physical / ep_size)` in both tools.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from epsim.io.write import write_text

EXPERT_LOCATION_FILE = "expert_location.json"
LOGICAL_COUNT_FILE = "logical_count.json"
PLACEMENT_FILE = "placement.json"
SUMMARY_FILE = "eplb.json"


def _write_json(path: Path, data) -> Path:
    """`data` as JSON, written whole or not at all (`epsim.io.write`)."""
    return write_text(path, json.dumps(data, separators=(",", ":")) + "\n")


def sglang_expert_location(placement) -> dict:
    """`{"physical_to_logical_map": [layers, physical]}`: SGLang's `init_by_mapping` input."""
    return {"physical_to_logical_map": placement.physical_to_logical.astype(np.int64).tolist()}


def sglang_logical_count(loads: np.ndarray) -> dict:
    """`{"logical_count": [layers, experts]}`: SGLang's `init_by_eplb` input (whole counts stay
    integers, as its expert-distribution recorder writes them)."""
    loads = np.asarray(loads, dtype=np.float64)
    whole = np.all(loads == np.round(loads))
    return {"logical_count": (loads.astype(np.int64) if whole else loads).tolist()}


def write_placement(out: str | Path, placement, loads: np.ndarray, summary: dict) -> list[Path]:
    """Write the placement (for SGLang and for epsim), the loads and the summary to `out`
    (created). Returns the paths written.

    Args:
        placement: an `epsim.eplb.Placement`.
        loads: [layers, experts] the loads it was computed from.
        summary: what `epsim eplb --json` prints, less the maps (`SUMMARY_FILE`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return [_write_json(out / EXPERT_LOCATION_FILE, sglang_expert_location(placement)),
            _write_json(out / LOGICAL_COUNT_FILE, sglang_logical_count(loads)),
            _write_json(out / PLACEMENT_FILE, placement.to_dict()),
            _write_json(out / SUMMARY_FILE, summary)]
