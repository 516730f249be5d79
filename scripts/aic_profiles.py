"""Build one profile per system from aiconfigurator-core's op tables (one command):

    python scripts/aic_profiles.py [--systems h200_sxm b200_sxm ...] [--out-dir epsim/data/profiles]
                                   [--parts-only]

For each AIC system with a zoo GPU (`epsim.calibrate.aic_tables.AIC_TO_ZOO`) this is
`epsim calibrate --records aic:<system>/sglang --holdout none --out <out-dir>/aic_<gpu>.json`:
every imported fit record is fitted (the hold-outs are judged apart, benchmarks/aic_holdout.py);
the records go to runs/aic/. Then each system's version parts (`epsim.calibrate.aic_versions`: the
components fitted on a table AIC collected at an older SGLang version, laid over the profile for a
deployment of that version) go to <out-dir>/versions/aic_<gpu>_sglang_<version>.json, a stale
part of the system removed; `--parts-only` builds the parts alone. Profiles are written
atomically; the NOTICE beside them carries aiconfigurator-core's Apache-2.0 notice. A system
without a zoo GPU would be named and skipped.
Needs the optional aiconfigurator-core (`pip install 'epsim[aic]'`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from epsim.calibrate import Holdout, calibrate  # noqa: E402
from epsim.calibrate.aic_tables import AIC_TO_ZOO, package_root, package_version  # noqa: E402
from epsim.calibrate.aic_versions import (PARTS_FOLDER, build_part, part_name,  # noqa: E402
                                          part_versions)

NOTICE = """epsim/data/profiles/aic_*.json

These calibration profiles are fitted on op-level performance tables of aiconfigurator-core
{version} (https://pypi.org/project/aiconfigurator-core/, https://github.com/ai-dynamo/aiconfigurator),
Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES, licensed under the Apache License,
Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0). The profiles hold coefficients fitted
on those tables (a derived work), not the tables; each profile's `provenance.aic` names every
table it read (path under the package's systems/data, sha256, framework version, container image
where given) and `provenance.sources` which tables fed each component.

Built by `python scripts/aic_profiles.py`; docs/aic_tables.md describes the tables and the import.
"""


def profile_path(out_dir: Path, gpu: str) -> Path:
    return out_dir / f"aic_{gpu.lower()}.json"


def save_atomic(profile, path: Path) -> None:
    """Write a profile JSON through a temporary file and a rename (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(profile.model_dump(by_alias=True), indent=1) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def write_parts(system: str, gpu: str, folder: Path) -> None:
    """Every version part of `system` into `folder`, its parts no longer built removed."""
    kept = set()
    for version in part_versions(system):
        part = build_part(system, version)
        if part is None:
            print(f"{system} {version}: its tables import no fit record (another framework's "
                  f"kernel): no part")
            continue
        path = folder / f"{part_name(gpu, version)}.json"
        save_atomic(part, path)
        kept.add(path)
        print(f"{system} {version} -> {_shown(path)}: {', '.join(part.components)}")
    for stale in folder.glob(f"{part_name(gpu, '')}*.json"):
        if stale not in kept:
            stale.unlink()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--systems", nargs="+", default=list(AIC_TO_ZOO))
    parser.add_argument("--out-dir", default=str(ROOT / "epsim" / "data" / "profiles"))
    parser.add_argument("--parts-only", action="store_true",
                        help="build the version parts alone (the profiles stay as they are)")
    args = parser.parse_args(argv)
    package_root()                                   # a one-line error when absent
    out_dir = Path(args.out_dir)
    for system in args.systems:
        gpu = AIC_TO_ZOO.get(system)
        if gpu is None:
            print(f"{system}: not an AIC system this importer knows ({list(AIC_TO_ZOO)})")
            return 2
        if not gpu:
            print(f"{system}: no GPU in epsim's hardware zoo (`epsim hardware`): no profile")
            continue
        if not args.parts_only:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cal = calibrate([f"aic:{system}/sglang"], Holdout.parse("none"),
                                name=f"aic_{gpu.lower()}")
            path = profile_path(out_dir, gpu)
            save_atomic(cal.profile, path)
            print(f"{system} -> {_shown(path)}: {len(cal.profile.components)} components on "
                  f"{cal.num_fit} records")
        write_parts(system, gpu, out_dir / PARTS_FOLDER)
    (out_dir / "NOTICE").write_text(NOTICE.format(version=package_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
