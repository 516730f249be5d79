"""Per-version parts of an AIC profile: the components fitted on a table that aiconfigurator-core
collected at an older SGLang version than the one its profile is fitted on.

A system's profile (`aic_<gpu>`) is fitted at AIC's `current` SGLang version, each table at the
newest collection not newer than it (`aic_tables`). Where a table that prices an op SGLang owns
was also collected at older versions, the part of version V holds only the components fitted on
V's collection of it, to be laid over the profile for a deployment that ran V
(`epsim.default_profile.versioned_profile`). Which tables count (`VERSIONED_TABLES`) and why:

  custom_allreduce_perf  SGLang's own custom all-reduce (sgl-kernel's `custom_all_reduce`).
                         AIC collected it at 0.5.9, 0.5.10 and 0.5.14 on every system here; the
                         0.5.9 and 0.5.10 tables agree (the one kernel; GB200's 0.5.9 table
                         alone is 0.7x its 0.5.10 one at decode sizes), 0.5.14's graph-captured
                         one is 1.3-1.9x faster at <= 256 KiB (benchmarks/results/
                         aic_versions.md): SGLang's rewritten custom all-reduce (JIT "v2", PDL
                         and a push one-shot; sgl-project/sglang#19880, on by default from
                         #24363).

Other tables that AIC holds at several versions are left at the profile's: GEMM (H100 0.5.6.post2
vs 0.5.14: median 1.00), DeepEP normal and the wide-EP MoE (within 5 % at the median); DeepEP's
low-latency dispatch on Hopper (0.5.6.post2 vs 0.5.12: 1.13-1.24x) is DeepEP's own version,
not SGLang's, and is reported, not layered. An older table of another framework's rows (H100 and
H200's 0.5.6.post2 all-reduce table holds TRT-LLM's kernel) imports no fit record: no part.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from epsim.calibrate.aic import import_source, record_paths, tag_profile, write_records_gz
from epsim.calibrate.aic_tables import (AIC_TO_ZOO, AicTable, _sorted_versions, current_version,
                                        package_root, parse_source)
from epsim.profile import Profile

VERSIONED_TABLES = ("custom_allreduce_perf",)
FRAMEWORK = "sglang"
PARTS_FOLDER = "versions"          # under epsim/data/profiles/: not a shipped profile on its own


def part_name(gpu: str, version: str, framework: str = FRAMEWORK) -> str:
    """The part's profile name and file stem (`aic_b200_sglang_0.5.9`)."""
    return f"aic_{gpu.lower()}_{framework}_{version}"


def part_tables(system: str, version: str, root: Path | None = None) -> list[AicTable]:
    """The `VERSIONED_TABLES` of `system` collected at exactly `version` (none when `version`
    is AIC's current one: the profile itself holds those)."""
    root = root or package_root()
    if version == current_version(root, system, FRAMEWORK):
        return []
    source = parse_source(f"aic:{system}/{FRAMEWORK}/{version}", root)
    return [t for t in source.tables() if t.name in VERSIONED_TABLES and t.version == version]


def part_versions(system: str, root: Path | None = None) -> list[str]:
    """Versions older than AIC's current one at which a `VERSIONED_TABLES` table was collected."""
    root = root or package_root()
    source = parse_source(f"aic:{system}/{FRAMEWORK}", root)
    return [v for v in _sorted_versions(source.versions()) if part_tables(system, v, root)]


def build_part(system: str, version: str, root: Path | None = None) -> Profile | None:
    """The part of `system` at `version`: the components fitted on its `part_tables` alone
    (every record fitted: the hold-outs are judged apart), each tagged with its tables; None
    when the tables import no fit record. Its records go to
    `runs/aic/<system>_sglang_<version>_part.jsonl.gz`.
    """
    from epsim.calibrate import Holdout, calibrate
    root = root or package_root()
    tables = part_tables(system, version, root)
    source = parse_source(f"aic:{system}/{FRAMEWORK}/{version}", root)
    imported = import_source(source, tables)
    if not imported.fit:
        return None
    fit_path, pending_path = record_paths(
        source, f"runs/aic/{system}_{FRAMEWORK}_{version}_part.jsonl.gz")
    write_records_gz(imported.fit, fit_path)
    write_records_gz(imported.pending, pending_path)
    name = part_name(AIC_TO_ZOO[system], version)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cal = calibrate([fit_path], Holdout.parse("none"), name=name)
    tag_profile(cal, [imported])
    rels = {t.rel for t in tables}
    profile = cal.profile
    # only what these tables fixed: a component the fit gave datasheet values stays the profile's
    profile.components = {k: c for k, c in profile.components.items()
                          if c.source == "fit" and c.tables and set(c.tables) <= rels}
    return profile if profile.components else None
