"""Profile: the cost models' coefficients per (hardware, backend, kind), with provenance.

A profile is JSON (schema `epsim.profile/1`). Each component, keyed `"<backend>/<kind>"`
(`"torch/dispatch"`, `"any/experts"`, `"deepep/dispatch/low_latency"`), holds:
  params       the cost model's coefficients (names carry units: `base_us`, `link_gbps`, ...)
  source       "fit" (least squares on measured records) or "datasheet" (no measurement)
  residuals    fit quality on the records it was fitted on (`mape`, `max_ape`, `num_records`)
  valid_range  the data range it was fitted on, e.g. {"num_tokens_per_rank": [1, 4096]}
and the profile's `provenance` names the record files (with sha256) it came from.
"""

from __future__ import annotations

import json
import warnings
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from epsim.errors import ProfileError
from epsim.spec.errors import format_error

SCHEMA = "epsim.profile/1"
DEFAULT_PROFILE = "profiles/h200x2.json"   # package data, measured on two H200 over NVLink


class ExtrapolationWarning(UserWarning):
    """A prediction was asked outside the data range a fitted component was fitted on."""


class Component(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, float]
    source: str = Field(default="fit", pattern="^(fit|datasheet|derived)$")
    residuals: dict[str, float] = Field(default_factory=dict)
    valid_range: dict[str, list[float]] = Field(default_factory=dict)
    note: str = ""


class RecordSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    num_records: int


class ProfileProvenance(BaseModel):
    model_config = ConfigDict(extra="allow")

    records: list[RecordSource] = Field(default_factory=list)
    records_sha256: str = ""
    device: str = ""
    versions: dict[str, str] = Field(default_factory=dict)
    commit: str = ""
    created: str = ""
    method: str = ""
    holdout: dict[str, Any] = Field(default_factory=dict)


class Profile(BaseModel):
    """Fitted cost-model coefficients for one hardware type."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=SCHEMA, alias="schema")
    name: str = ""
    hardware: str = Field(min_length=1, description="zoo GPU name, e.g. 'H200'")
    components: dict[str, Component] = Field(default_factory=dict)
    provenance: ProfileProvenance = Field(default_factory=ProfileProvenance)
    path: str = Field(default="", exclude=True, description="where it was loaded from")

    # -- lookup ----------------------------------------------------------------------------
    def component(self, backend: str, kind: str, mode: str = "") -> Component | None:
        """The most specific component: `backend/kind/mode`, `backend/kind`, `any/kind/mode`,
        `any/kind`.

        A mode of several parts (`low_latency/fp8`) falls back part by part:
        `deepep/dispatch/low_latency/fp8`, `deepep/dispatch/low_latency`, `deepep/dispatch`, ...
        A backend's own eager component comes before a pooled one of the same mode (`torch`
        measured no `graph` experts because it cannot be captured: its eager fit applies).
        """
        parts = [p for p in mode.split("/") if p]
        keys = []
        for owner in (backend, "any"):
            keys += [f"{owner}/{kind}/" + "/".join(parts[:i]) for i in range(len(parts), 0, -1)]
            keys.append(f"{owner}/{kind}")
        for key in keys:
            if key in self.components:
                return self.components[key]
        return None

    def params(self, backend: str, kind: str, mode: str = "",
               defaults: dict[str, float] | None = None) -> dict[str, float]:
        """Coefficients of a component over `defaults` (datasheet values for what is unfitted)."""
        comp = self.component(backend, kind, mode)
        return {**(defaults or {}), **(comp.params if comp else {})}

    def warn_outside(self, backend: str, kind: str, mode: str = "", **values: float) -> bool:
        """Warn (ExtrapolationWarning) if any value lies outside the component's fitted range."""
        comp = self.component(backend, kind, mode)
        if comp is None or comp.source != "fit":
            return False
        outside = []
        for name, value in values.items():
            lo_hi = comp.valid_range.get(name)
            if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
                outside.append(f"{name} ({value:g}) outside fitted [{lo_hi[0]:g}, {lo_hi[1]:g}]")
        if outside:
            warnings.warn(f"profile {self.name or self.path}: {backend}/{kind}: "
                          + "; ".join(outside) + " -- extrapolating", ExtrapolationWarning,
                          stacklevel=3)
        return bool(outside)

    # -- io --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(self.model_dump(by_alias=True), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read a profile JSON. Raises ProfileError naming the file and field."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise ProfileError(f"{path}: cannot read profile ({exc.strerror})") from None
        except json.JSONDecodeError as exc:
            raise ProfileError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data, where=str(path))

    @classmethod
    def from_dict(cls, data: Any, where: str = "profile") -> "Profile":
        if isinstance(data, dict) and data.get("schema", SCHEMA) != SCHEMA:
            raise ProfileError(f"{where}: schema ({data.get('schema')!r}) must be {SCHEMA!r}")
        try:
            profile = cls.model_validate(data)
        except ValidationError as exc:
            raise ProfileError(format_error(exc.errors()[0], cls, where)) from None
        profile.path = where
        return profile


def default_profile_path() -> Path:
    """The shipped default profile (measured on two H200; see its provenance)."""
    return Path(str(resources.files("epsim") / "data" / DEFAULT_PROFILE))


@lru_cache(maxsize=8)
def _load_cached(path: str) -> Profile:
    return Profile.load(path)


def load_profile(path: str | Path | None = None) -> Profile:
    """A profile from `path`, or the shipped default; falls back to datasheet-only for the
    default when no measured profile ships (then every component is `datasheet`)."""
    if path is not None:
        return _load_cached(str(Path(path).resolve())).model_copy(deep=True)
    default = default_profile_path()
    if default.is_file():
        return _load_cached(str(default)).model_copy(deep=True)
    return Profile(name="datasheet-H200", hardware="H200")
