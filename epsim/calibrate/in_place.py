"""One component written into a profile in place, with the file it came from listed.

The host components (`any/rebalance_host`, `any/serving_host`) are refit or carried from one
record file or two each and written into a shipped profile without rebuilding the rest of it: the
component replaced, the file's provenance entry (its sha256, its count) replaced or added,
`records_sha256` recomputed over every listed file, and the measuring device named where the
profile does not name it yet. The write is atomic (`epsim.io.write.write_text`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from epsim.io.write import write_text
from epsim.profile import Component
from epsim.records import records_hash


def missing_file(*paths: Path) -> bool:
    """Whether any of `paths` is not an existing file, saying which on stderr in one line."""
    for path in paths:
        if not path.is_file():
            print(f"{path} must be an existing file", file=sys.stderr)
            return True
    return False


def put_component(profile: Path, key: str, component: Component, sources: dict[Path, int],
                  devices: Iterable[str]) -> None:
    """Write `component` as `key` into the profile JSON at `profile`, listing `sources` (each file
    it came from: its count of records) and `devices` in its provenance (module doc)."""
    data = json.loads(profile.read_text())
    data["components"][key] = json.loads(component.model_dump_json())
    prov = data["provenance"]
    for source, count in sources.items():
        entry = {"path": str(source), "sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
                 "num_records": count}
        prov["records"] = [e for e in prov["records"] if e["path"] != str(source)] + [entry]
    prov["records_sha256"] = records_hash(e["path"] for e in prov["records"])
    # device names hold commas ("cpu (AMD EPYC), 1 thread"): add a name only when absent
    for device in devices:
        if device not in prov.get("device", ""):
            prov["device"] = ", ".join(filter(None, [prov.get("device", ""), device]))
    write_text(profile, json.dumps(data, indent=1) + "\n")
