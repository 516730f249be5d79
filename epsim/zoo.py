"""The model, hardware and network zoo shipped as package data (`epsim/data/zoo/`)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml

from epsim.errors import SpecError, did_you_mean, hinted
from epsim.spec.errors import validate
from epsim.spec.gpu import HardwareSpec
from epsim.spec.model import ModelSpec
from epsim.spec.network import NETWORK_KINDS, Network, NetworkSpec


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


def _entry(kind: str, name: str, spec_class, label: str):
    """The zoo's `kind` ("models", "hardware") entry `name` as a validated `spec_class`.

    Raises:
        SpecError: `<label> (<name>) must be one of [...]`, the names the zoo has.
    """
    data = _load(kind).get(name)
    if data is None:
        raise SpecError(hinted(f"{label} ({name!r}) must be one of {list(_load(kind))}",
                               did_you_mean(name, _load(kind))))
    if kind == "hardware" and "hbm_mib" in data:
        # the one unit conversion of memory: the device's MiB (nvidia-smi memory.total) to GiB;
        # NVIDIA's datasheet "GB" (`hbm_gb`) are binary less a reserve, not 1e9 bytes
        data = {**data, "hbm_gib": data["hbm_mib"] / 1024.0}
        del data["hbm_mib"]
    return validate(spec_class, data, f"zoo/{kind}/{name}.yaml")


@lru_cache(maxsize=None)
def get_model(name: str) -> ModelSpec:
    """A zoo model by name. Raises SpecError naming the known models."""
    return _entry("models", name, ModelSpec, "model")


@lru_cache(maxsize=None)
def get_hardware(name: str) -> HardwareSpec:
    """A zoo GPU by name. Raises SpecError naming the known GPUs."""
    return _entry("hardware", name, HardwareSpec, "gpu")


# -- networks ------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _network_defaults() -> dict[str, dict[str, dict]]:
    """{kind: {gpu: {system, nics_per_node, nic_gbit_per_s, source}}} from zoo/networks.yaml."""
    return yaml.safe_load((resources.files("epsim") / "data" / "zoo" / "networks.yaml").read_text())


def network_defaults() -> list[tuple[str, str, dict]]:
    """Every datasheet network default as (kind, gpu, entry), in file order."""
    return [(kind, gpu, entry) for kind, by_gpu in _network_defaults().items()
            for gpu, entry in by_gpu.items()]


def check_network(spec: NetworkSpec, gpu: str) -> None:
    """Raise ValueError (`network.<field> (<value>) must ...`) when `spec` cannot apply to `gpu`."""
    hw = get_hardware(gpu)
    if (spec.kind == "nvl72") != (hw.network == "nvl72"):
        nvl72_gpus = [n for n in hardware_names() if get_hardware(n).network == "nvl72"]
        if spec.kind == "nvl72":
            raise ValueError(f"network.kind ('nvl72') must go with an NVL72 GPU {nvl72_gpus}; "
                             f"{gpu} nodes hold {hw.gpus_per_node} GPUs on NVLink")
        raise ValueError(f"network.kind ({spec.kind!r}) must be 'nvl72' for {gpu}: its node is a "
                         f"{hw.gpus_per_node}-GPU NVLink rack whose racks meet over InfiniBand")
    default = _network_defaults().get(spec.kind, {}).get(gpu)
    if default is None and (spec.nics_per_node is None or spec.nic_gbit_per_s is None):
        known = sorted(_network_defaults().get(spec.kind, {}))
        missing = "nics_per_node" if spec.nics_per_node is None else "nic_gbit_per_s"
        raise ValueError(f"network.{missing} (unset) must be given for {spec.kind} on {gpu}: no "
                         f"datasheet default (defaults exist for {known})")


def resolve_network(spec: NetworkSpec, gpu: str, gpus_per_node: int) -> Network:
    """`spec` with unset fields from the datasheet default of its kind for `gpu`.

    Raises:
        SpecError: the kind does not fit the GPU, or has no default and leaves a field unset.
    """
    try:
        check_network(spec, gpu)
    except ValueError as exc:
        raise SpecError(f"cluster.{exc}") from None
    default = _network_defaults().get(spec.kind, {}).get(gpu, {})
    return Network(kind=spec.kind,
                   nics_per_node=spec.nics_per_node or default["nics_per_node"],
                   nic_gbit_per_s=float(spec.nic_gbit_per_s or default["nic_gbit_per_s"]),
                   gpus_per_node=gpus_per_node,
                   system=("custom" if spec.nics_per_node or spec.nic_gbit_per_s
                           else default.get("system", "")),
                   source=default.get("source", ""))


def get_network(kind: str, gpu: str) -> Network:
    """The datasheet network of `kind` for a node of `gpu`. Raises SpecError."""
    if kind not in NETWORK_KINDS:
        raise SpecError(f"network ({kind!r}) must be one of {list(NETWORK_KINDS)}")
    return resolve_network(NetworkSpec(kind=kind), gpu, get_hardware(gpu).gpus_per_node)
