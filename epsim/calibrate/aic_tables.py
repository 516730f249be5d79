"""aiconfigurator-core's op tables: where an installed package keeps them, which tables a
system, framework and version resolve to, and how epsim's hardware zoo names AIC's systems.

aiconfigurator-core (PyPI, Apache-2.0, NVIDIA) ships op-level measurements collected on each
system as parquet files, `systems/data/<system>/<op>/<framework>/<version>/<table>.parquet`,
each folder with a `collection_meta.yaml` (framework version, container image, collector).
They are calibration data, like our own records. The same package also ships an end-to-end
sample: validation only. What a fit may read is an allowlist (`check_calibration_input`): record
files (JSON Lines) and parquet op tables inside a system's `data/` folder; nothing else opens.

A version is resolved per table as AIC itself serves it: the newest collected version not
newer than the one asked for (default: AIC's `current` version of that system and framework,
`systems/query_versions.yaml`), so a table last collected at an older version fills in. AIC
also fills single shapes from older versions (first wins), which keeps its multi-node
communication curves serving: DeepEP's low-latency table of 0.5.12 holds one node, 0.5.6.post2's
holds 1-8. Where the newest low-latency table lacks a node count, the newest older one that has
it contributes those rows alone (`NODE_FILL_TABLES`, `AicTable.fill_nodes`): the low-latency
kernel is one kernel at every node count (DeepEP's `internode_ll`), while the normal mode runs
other kernels across nodes (`internode` against `intranode`), so its table is not filled.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from epsim.errors import RecordError

PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
INSTALL_HINT = "pip install 'epsim[aic]' (aiconfigurator-core, pandas, pyarrow)"
ROOT_ENV = "EPSIM_AIC_SYSTEMS"

# AIC system -> epsim zoo GPU (`epsim hardware`), and the device names its tables' rows carry
# ("" would mark a system the zoo has no GPU of: its tables surveyed, no profile fitted)
AIC_TO_ZOO = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "b300_sxm": "B300",
              "gb200": "GB200", "gb300": "GB300"}
DEVICE_PREFIX = {"h100_sxm": "NVIDIA H100", "h200_sxm": "NVIDIA H200", "b200_sxm": "NVIDIA B200",
                 "b300_sxm": "NVIDIA B300", "gb200": "NVIDIA GB200", "gb300": "NVIDIA GB300"}
FRAMEWORKS = ("sglang",)          # the importer reads SGLang's tables (vllm, trtllm: not yet)

# the op tables the importer reads: (op folder, table file stem)
TABLES = (("gemm", "gemm_perf"), ("moe", "moe_perf"),
          ("moe", "wideep_context_moe_perf"), ("moe", "wideep_generation_moe_perf"),
          ("attention", "context_attention_perf"), ("attention", "generation_attention_perf"),
          ("mla", "context_mla_perf"), ("mla", "generation_mla_perf"),
          ("mla", "wideep_context_mla_perf"), ("mla", "wideep_generation_mla_perf"),
          ("mla_bmm", "mla_bmm_perf"), ("quantize", "scale_matrix_perf"),
          ("quantize", "computescale_perf"), ("comm", "custom_allreduce_perf"),
          ("comm", "wideep_deepep_ll_perf"), ("comm", "wideep_deepep_normal_perf"))
# tables whose node counts missing from the chosen version older versions fill (module doc)
NODE_FILL_TABLES = (("comm", "wideep_deepep_ll_perf"),)
NCCL_TABLE = ("comm", "nccl_perf")          # `comm/nccl/<NCCL version>/`, not per framework
RECORD_SUFFIXES = (".jsonl", ".jsonl.gz")    # epsim's measurement records


def zoo_gpu(system: str) -> str:
    """The zoo GPU of an AIC system ("" for none); the one place the two namings meet."""
    return AIC_TO_ZOO.get(system, "")


def aic_system(gpu: str) -> str:
    """The AIC system of a zoo GPU ("" for none)."""
    return next((s for s, g in AIC_TO_ZOO.items() if g and g == gpu), "")


def check_calibration_input(path: str | Path) -> Path:
    """`path` if a fit may read it: an epsim record file (`.jsonl`, `.jsonl.gz`) or a parquet op
    table in a system's folder of the package's `data/` (`data/<system>/<op>/...`). Anything
    else -- end-to-end results (AIC's sample of whole deployments, epsim's published figures),
    which are validation only -- is refused, so no fit can read them.

    Raises:
        RecordError: `<path>: not a calibration input ...` naming what is allowed.
    """
    path = Path(path)
    parts = path.parts
    table = path.suffix == ".parquet" and any(
        a == "data" and b in AIC_TO_ZOO for a, b in zip(parts, parts[1:]))
    if not (table or path.name.endswith(RECORD_SUFFIXES)):
        raise RecordError(f"{path}: not a calibration input: a fit reads epsim record files "
                          f"({', '.join(RECORD_SUFFIXES)}) and op tables (data/<system>/.../"
                          f"*.parquet); end-to-end results are validation only")
    return path


def package_root() -> Path:
    """The installed aiconfigurator-core's `systems` folder (found without importing it), or
    the folder `EPSIM_AIC_SYSTEMS` names (a copy of its layout: the tests' fixture).

    Raises:
        RecordError: the package is not installed (or `EPSIM_AIC_SYSTEMS` is not a folder).
    """
    import os
    from importlib.util import find_spec
    if os.environ.get(ROOT_ENV):
        root = Path(os.environ[ROOT_ENV])
        if not root.is_dir():
            raise RecordError(f"{ROOT_ENV} ({root}) must be a folder of aiconfigurator-core "
                              f"systems (its `systems/` layout)")
        return root
    spec = find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise RecordError(f"aic: {PACKAGE} is not installed; {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "systems"


def package_version() -> str:
    """The installed aiconfigurator-core's version ("" when it has no metadata)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return ""


def _sorted_versions(names) -> list[str]:
    """Versions oldest first (PEP 440 order; a name that does not parse sorts first)."""
    from packaging.version import InvalidVersion, Version

    def key(text: str):
        try:
            return (1, Version(text), text)
        except InvalidVersion:
            return (0, Version("0"), text)
    return sorted(names, key=key)


def _newest_not_after(versions: list[str], target: str) -> str | None:
    """The newest of `versions` not newer than `target` (None: all are newer)."""
    from packaging.version import InvalidVersion, Version
    try:
        limit = Version(target)
    except InvalidVersion:
        return target if target in versions else None
    ok = []
    for v in versions:
        try:
            if Version(v) <= limit:
                ok.append(Version(v))
        except InvalidVersion:
            continue
    return str(max(ok)) if ok else None


@dataclass(frozen=True)
class AicTable:
    """One op table of an installed aiconfigurator-core.

    Attributes:
        system, op, framework, version: where it lies (`<system>/<op>/<framework>/<version>/`).
        name: the table's file stem (`moe_perf`).
        path: the parquet file.
        runtime: `collection_meta.yaml`'s `runtime` (framework, version, image, image_digest).
        meta: its `tables.<name>` entry (collector_ref, collected_at, rows, status).
        fill_nodes: node counts this (older) table contributes where the newest lacks them;
            empty: every row (`NODE_FILL_TABLES`).
    """

    system: str
    op: str
    framework: str
    version: str
    name: str
    path: Path
    runtime: dict = field(default_factory=dict, compare=False)
    meta: dict = field(default_factory=dict, compare=False)
    fill_nodes: tuple[int, ...] = ()

    @property
    def rel(self) -> str:
        """The table's path under the package's `systems/data`, as provenance names it."""
        return f"{self.system}/{self.op}/{self.framework}/{self.version}/{self.name}.parquet"

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def frame(self):
        """The table as a pandas DataFrame, rows of other devices left out (one old SGLang table
        of h200_sxm also holds H100 rows). Latencies stay in the table's units."""
        import pandas as pd
        frame = pd.read_parquet(check_calibration_input(self.path))
        prefix = DEVICE_PREFIX.get(self.system, "")
        if "device" in frame.columns and prefix:
            frame = frame[frame["device"].astype(str).str.startswith(prefix)]
        if self.fill_nodes:
            frame = frame[frame["node_num"].isin(self.fill_nodes)]
        return frame.reset_index(drop=True)


@dataclass(frozen=True)
class AicSource:
    """What `aic:SYSTEM[/FRAMEWORK[/VERSION]]` names: a system's tables at one version."""

    system: str
    framework: str
    version: str              # the version asked for, or AIC's current one
    root: Path

    @property
    def gpu(self) -> str:
        return zoo_gpu(self.system)

    @property
    def label(self) -> str:
        return f"aic:{self.system}/{self.framework}/{self.version}"

    def versions(self) -> list[str]:
        """Framework versions with any table of this system."""
        data = self.root / "data" / self.system
        found = {v.name for op in data.iterdir() if (op / self.framework).is_dir()
                 for v in (op / self.framework).iterdir() if v.is_dir()}
        return _sorted_versions(found)

    def tables(self) -> list[AicTable]:
        """Every table the importer reads, each at the newest version not newer than `version`
        (what AIC serves), plus the NCCL table of the system's NCCL version."""
        out = []
        data = self.root / "data" / self.system
        for op, name in TABLES:
            folder = data / op / self.framework
            if not folder.is_dir():
                continue
            have = [v.name for v in folder.iterdir() if (v / f"{name}.parquet").is_file()]
            chosen = _newest_not_after(have, self.version)
            if chosen:
                out.append(_table(self.system, op, self.framework, chosen, name, folder / chosen))
                if (op, name) in NODE_FILL_TABLES:
                    out += self._node_fills(out[-1], have)
        nccl = _system_yaml(self.root, self.system).get("misc", {}).get("nccl_version")
        folder = data / "comm" / "nccl" / str(nccl)
        if nccl and (folder / f"{NCCL_TABLE[1]}.parquet").is_file():
            out.append(_table(self.system, "comm", "nccl", str(nccl), NCCL_TABLE[1], folder))
        return out

    def _node_fills(self, newest: AicTable, have: list[str]) -> list[AicTable]:
        """Older versions of `newest`'s table, each with the node counts no newer one holds
        (newest older version first; module doc)."""
        import pandas as pd
        held = set(pd.read_parquet(newest.path, columns=["node_num"])["node_num"].tolist())
        out = []
        older = [v for v in _sorted_versions(have) if v != newest.version
                 and _newest_not_after([v], newest.version) == v]
        for version in reversed(older):
            folder = newest.path.parent.parent / version
            nodes = set(pd.read_parquet(folder / newest.path.name, columns=["node_num"])
                        ["node_num"].tolist()) - held
            if nodes:
                table = _table(self.system, newest.op, self.framework, version, newest.name,
                               folder)
                out.append(replace(table, fill_nodes=tuple(sorted(int(n) for n in nodes))))
                held |= nodes
        return out


def _load_yaml(path: Path) -> dict:
    import yaml
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RecordError(f"{path}: unreadable ({' '.join(str(exc).split())[:200]})") from None
    return data if isinstance(data, dict) else {}


def _system_yaml(root: Path, system: str) -> dict:
    path = root / f"{system}.yaml"
    return _load_yaml(path) if path.is_file() else {}


def _table(system, op, framework, version, name, folder: Path) -> AicTable:
    meta_path = folder / "collection_meta.yaml"
    meta = _load_yaml(meta_path) if meta_path.is_file() else {}
    return AicTable(system, op, framework, version, name, folder / f"{name}.parquet",
                    dict(meta.get("runtime") or {}), dict((meta.get("tables") or {}).get(name) or {}))


def current_version(root: Path, system: str, framework: str) -> str:
    """AIC's `current` version of a system and framework (`systems/query_versions.yaml`)."""
    data = _load_yaml(root / "query_versions.yaml")
    slot = (data.get("overrides") or {}).get(system, {}).get(framework) \
        or (data.get("defaults") or {}).get(framework) or {}
    return str(slot.get("current") or "")


def parse_source(text: str, root: Path | None = None) -> AicSource:
    """Parse `aic:SYSTEM[/FRAMEWORK[/VERSION]]` against the installed package.

    Raises:
        RecordError: the package is absent, or a system, framework or version it does not have
            (one line naming what is allowed).
    """
    body = text[4:] if text.startswith("aic:") else text
    parts = [p for p in body.split("/")]
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise RecordError(f"records ({text!r}) must be aic:SYSTEM[/FRAMEWORK[/VERSION]], e.g. "
                          f"aic:h200_sxm/sglang")
    root = root or package_root()
    system = parts[0]
    if system not in AIC_TO_ZOO or not (root / "data" / system).is_dir():
        have = [s for s in AIC_TO_ZOO if (root / "data" / s).is_dir()]
        raise RecordError(f"aic system ({system!r}) must be one of {have}")
    framework = parts[1] if len(parts) > 1 else "sglang"
    if framework not in FRAMEWORKS:
        raise RecordError(f"aic framework ({framework!r}) must be one of {list(FRAMEWORKS)}")
    source = AicSource(system, framework, "", root)
    have = source.versions()
    version = parts[2] if len(parts) > 2 else current_version(root, system, framework)
    if version not in have:
        raise RecordError(f"aic version ({version!r}) of {system}/{framework} must be one of {have}")
    return AicSource(system, framework, version, root)
