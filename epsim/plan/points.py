"""Sweep points: the base scenario with one point's values applied, validated, keyed, and run.

A point's key is a hash of its resolved scenario (seed included), the content of every file it
references (arrival and skew traces, recorded expert loads; a Hugging Face config is resolved
into the scenario itself), the profile's content and epsim's code, so a results directory
knows which points it already holds, and an edited trace recomputes. A point whose
values fail validation (an EP size that does not divide the experts, redundant experts without
EPLB) is skipped with the validation message as its reason. `run_point` simulates one point in
whichever worker an executor (`epsim.plan.executors`) sends it to.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import epsim
from epsim.errors import EpsimError, SpecError
from epsim.io import MAX_YAML_BYTES, load_yaml, read_text
from epsim.plan.columns import summary_metrics
from epsim.plan.sweep import check_key
from epsim.profile import load_profile
from epsim.profile import profile_path as profile_path_of
from epsim.report.summary import summarize
from epsim.routing.skew import SkewModel
from epsim.sim import simulate
from epsim.sim.arrivals import sample_requests
from epsim.sim.stepper import default_engine
from epsim.spec.model import ModelSpec
from epsim.spec.scenario import load_scenario, parse_override, scenario_from_dict
from epsim.zoo import get_model


@dataclass(frozen=True)
class BaseScenario:
    """A scenario as data, before validation: what the sweep starts every point from."""

    data: dict
    where: str
    base_dir: str


@dataclass(frozen=True, eq=False)
class Point:
    """One valid configuration of a sweep.

    Attributes:
        index: position in the sweep's Cartesian order.
        values: `{swept key: value}`.
        scenario: the validated `Scenario`.
        key: 16 hex digits identifying (scenario, seed, profile, epsim's code).
        profile_path: the profile the simulation loads (None = the shipped default).
    """

    index: int
    values: dict[str, Any]
    scenario: Any
    key: str
    profile_path: str | None


@dataclass(frozen=True)
class Skipped:
    """A point whose values do not make a valid scenario."""

    index: int
    values: dict[str, Any]
    reason: str


def load_base(scenario: str | Path | dict, overrides: list[str] | dict[str, Any] | None = None,
              base_dir: str | Path = ".") -> BaseScenario:
    """Read a scenario file (or take a mapping) and apply `--set` style overrides.

    The result is validated once as a whole, so an error in the base scenario is reported
    as such, not as every point being skipped.

    Raises:
        SpecError: unreadable file, bad YAML, or an invalid base scenario.
    """
    if isinstance(scenario, dict):
        data, where = copy.deepcopy(scenario), "scenario"
    else:
        path = Path(scenario)
        load_scenario(path)    # the file's own errors, reported with its line and column
        data = load_yaml(read_text(path, "scenario file", MAX_YAML_BYTES), str(path))
        where, base_dir = str(path), path.parent
    if isinstance(overrides, list):
        overrides = dict(parse_override(o) for o in overrides)
    for key, value in (overrides or {}).items():
        check_key(key, flag="--set")
        data = apply_values(data, {key: value}, where, str(base_dir))
    read_traces(scenario_from_dict(data, where=where, base_dir=base_dir))
    return BaseScenario(data, where, str(base_dir))


def read_traces(scenario) -> None:
    """Read the scenario's trace files once, so that a bad one stops the plan before it starts
    (one line) rather than failing every point in its worker.

    Raises:
        SpecError: the reader's `<file>:<line>: ...` message.
    """
    m, w = scenario.model, scenario.workload
    if w.arrivals.kind == "trace":
        sample_requests(w, scenario.seed, scenario.base_dir)
    if w.skew.kind == "trace":
        SkewModel(w.skew, m.num_moe_layers, m.num_experts, m.top_k, seed=scenario.seed,
                  base_dir=scenario.base_dir)


def _resolved_model(data: dict, base_dir: str) -> dict:
    """The `model` entry as a full mapping (a zoo name or `hf_config` reference expanded), so
    that `model.<field>` can be set on top of it."""
    model = data.get("model")
    if isinstance(model, str):
        return get_model(model).model_dump()
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str):
        return ModelSpec.from_hf_config(Path(base_dir) / model["hf_config"], name=model.get("name")).model_dump()
    return model


def apply_values(data: dict, values: dict[str, Any], where: str, base_dir: str = ".") -> dict:
    """A copy of `data` with each dotted key set (missing mappings created on the way)."""
    data = copy.deepcopy(data)
    if any(key.startswith("model.") for key in values):
        data["model"] = _resolved_model(data, base_dir)
    for dotted, value in values.items():
        node = data
        parts = dotted.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise SpecError(f"{where}: {dotted} cannot be set: {'.'.join(parts[:depth + 1])} "
                                f"({child!r}) is not a mapping")
            node = child
        node[parts[-1]] = copy.deepcopy(value)
    return data


def _signature(path: Path) -> tuple:
    """What changes when a file is rewritten (a long-lived process, the app, must see it)."""
    try:
        st = path.stat()
    except OSError:
        return (str(path), None)
    return (os.path.realpath(path), st.st_mtime_ns, st.st_size, st.st_ino)


def profile_digest(profile_path: str | None) -> str:
    """sha256 (16 hex digits) of the profile's content: the shipped default when None."""
    return _profile_digest(profile_path, _signature(Path(profile_path)) if profile_path else None)


@lru_cache(maxsize=32)
def _profile_digest(profile_path: str | None, signature) -> str:
    profile = load_profile(profile_path)
    return hashlib.sha256(profile.model_dump_json(by_alias=True).encode()).hexdigest()[:16]


def referenced_files(scenario) -> dict[str, Path]:
    """The files a scenario reads besides its profile, by field: arrival and skew traces, and
    the recorded loads of `deployment.init_expert_location` (a file or a folder)."""
    w, d = scenario.workload, scenario.deployment
    found = {}
    for field, spec in (("workload.arrivals.path", w.arrivals), ("workload.skew.path", w.skew)):
        if spec.kind == "trace":
            found[field] = scenario.resolve_path(spec.path)
    if d.init_expert_location not in ("trivial", "from_skew"):
        found["deployment.init_expert_location"] = scenario.resolve_path(d.init_expert_location)
    return found


def content_digest(path: Path) -> str:
    """sha256 (16 hex digits) of a file's bytes, or of a folder's files (names and bytes, in
    name order); cached while the files' sizes and times stay the same."""
    path = Path(path)
    if path.is_dir():
        members = tuple((str(p.relative_to(path)), _signature(p))
                        for p in sorted(path.rglob("*")) if p.is_file())
    else:
        members = (("", _signature(path)),)
    return _content_digest(members)


@lru_cache(maxsize=256)
def _content_digest(members: tuple) -> str:
    digest = hashlib.sha256()
    for name, signature in members:
        digest.update(name.encode() + b"\0")
        try:
            with open(signature[0], "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        except OSError as exc:               # vanished or unreadable: never equal to a real file
            digest.update(f"unreadable: {exc.strerror}".encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 (16 hex digits) of epsim's own files (sources and zoo data): a cached point is
    reused only by the code that computed it."""
    root = Path(epsim.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".yaml", ".json") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def point_key(scenario, profile_path: str | None) -> str:
    """Identity of a point's result: scenario (without `base_dir`, so a moved results
    directory still resumes), seed, the content of the files it references, profile content,
    epsim's code and the simulator engine."""
    files = {field: content_digest(path) for field, path in referenced_files(scenario).items()}
    blob = json.dumps({"scenario": scenario.model_dump(mode="json", exclude={"base_dir"}),
                       "files": files, "profile": profile_digest(profile_path),
                       "code": code_digest(), "engine": default_engine()},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def build_point(base: BaseScenario, index: int, values: dict[str, Any],
                profile_path: str | None = None) -> Point | Skipped:
    """Validate one point; a validation failure becomes `Skipped` with its message.

    Args:
        profile_path: a profile that overrides the scenario's own `profile` field.
    """
    try:
        data = apply_values(base.data, values, base.where, base.base_dir)
        scenario = scenario_from_dict(data, where="point", base_dir=base.base_dir)
    except EpsimError as exc:
        return Skipped(index, values, str(exc).removeprefix("point: "))
    if profile_path is None and scenario.profile:
        profile_path = str(profile_path_of(scenario.profile, scenario.base_dir))
    return Point(index, values, scenario, point_key(scenario, profile_path), profile_path)


@dataclass(frozen=True, eq=False)
class PointTask:
    """What a worker needs: the validated scenario and the profile path (None = default)."""

    scenario: Any
    profile_path: str | None


def run_point(task: PointTask) -> dict:
    """Simulate one point. Returns `{"metrics": {...}, "warnings": [...]}` or `{"error": msg}`:
    a failing point is a failed row with its one-line reason, and the sweep goes on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            profile = load_profile(task.profile_path, shared=True) if task.profile_path else None
            result = simulate(task.scenario, profile=profile)
        except EpsimError as exc:
            return {"error": " ".join(str(exc).split())}
        except MemoryError:
            return {"error": "ran out of memory simulating this point"}
        except Exception as exc:  # noqa: BLE001 -- one point's bug must not end the sweep
            text = " ".join(str(exc).split())[:200]
            return {"error": f"internal error ({type(exc).__name__}: {text}); please report it"}
    messages = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    return {"metrics": summary_metrics(summarize(result)), "warnings": messages}
