"""The model and hardware zoo shipped as package data (`epsim/data/zoo/`)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

from epsim.errors import SpecError
from epsim.spec.errors import validate
from epsim.spec.hardware import HardwareSpec
from epsim.spec.model import ModelSpec


def _zoo_dir(kind: str):
    return resources.files("epsim") / "data" / "zoo" / kind


@lru_cache(maxsize=None)
def _load(kind: str) -> dict[str, dict]:
    entries = {}
    for item in sorted(_zoo_dir(kind).iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml"):
            data = yaml.safe_load(item.read_text())
            entries[data["name"]] = data
    return entries


def model_names() -> list[str]:
    return list(_load("models"))


def hardware_names() -> list[str]:
    return list(_load("hardware"))


@lru_cache(maxsize=None)
def get_model(name: str) -> ModelSpec:
    """A zoo model by name. Raises SpecError naming the known models."""
    data = _load("models").get(name)
    if data is None:
        raise SpecError(f"model ({name!r}) must be one of {model_names()}")
    return validate(ModelSpec, data, f"zoo/models/{name}.yaml")


@lru_cache(maxsize=None)
def get_hardware(name: str) -> HardwareSpec:
    """A zoo GPU by name. Raises SpecError naming the known GPUs."""
    data = _load("hardware").get(name)
    if data is None:
        raise SpecError(f"gpu ({name!r}) must be one of {hardware_names()}")
    return validate(HardwareSpec, data, f"zoo/hardware/{name}.yaml")
