"""A scenario: model + cluster + deployment + workload + seed, loaded from YAML.

Loading validates everything up front; a bad file fails here with one line naming the file,
the field path, the bad value and what is allowed, never later in the simulation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from epsim.errors import SpecError, did_you_mean, hinted
from epsim.io import MAX_YAML_BYTES, load_yaml, read_text
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.errors import validate
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import MODELLED_ATTENTION, ModelSpec
from epsim.spec.parallel import model_problem
from epsim.spec.quant import served_model, weight_tensor_dtype
from epsim.spec.workload import STEADY, HotSetSkew, TraceArrivals, TraceSkew, WorkloadSpec
from epsim.zoo import check_network, get_hardware, get_model, hardware_names, model_names


class Scenario(BaseModel):
    """Everything one simulation needs. `model` may be a zoo name, an inline spec, or
    `{hf_config: path/to/config.json}` (relative to the scenario file)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "scenario"
    description: str = ""
    model: ModelSpec
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    deployment: DeploymentSpec = Field(default_factory=DeploymentSpec)
    workload: WorkloadSpec = Field(default_factory=WorkloadSpec)
    seed: int = Field(default=0, ge=0)
    profile: str | None = Field(default=None, description="calibration profile JSON; None = shipped default")
    base_dir: str = Field(default=".", description="directory relative paths resolve against")

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        m, c, d, w = self.model, self.cluster, self.deployment, self.workload
        # the instance's GPUs: `tp_size` where set, else `ep_size` (named as the user wrote it)
        gpus, field = d.num_gpus, "tp_size" if d.tp_size is not None else "ep_size"
        if gpus > c.num_gpus:
            nodes = -(-gpus // c.gpus_per_node_resolved)
            raise ValueError(f"deployment.{field} ({gpus}) must be <= the cluster's GPUs "
                             f"({c.num_nodes} nodes x {c.gpus_per_node_resolved} = {c.num_gpus}); "
                             f"set cluster.num_nodes: {nodes} for {gpus} GPUs")
        if gpus > c.gpus_per_node_resolved and gpus % c.gpus_per_node_resolved:
            raise ValueError(f"deployment.{field} ({gpus}) must be a multiple of gpus_per_node "
                             f"({c.gpus_per_node_resolved}) when it spans nodes")
        _check_served(m, c, d)
        num_slots = m.num_experts + d.ep_num_redundant_experts
        if num_slots % d.ep_size and m.num_experts % d.ep_size == 0:
            raise ValueError(f"deployment.ep_num_redundant_experts ({d.ep_num_redundant_experts}) "
                             f"must be a multiple of ep_size ({d.ep_size}) so every rank holds "
                             f"equal slots ({m.num_experts} experts + {d.ep_num_redundant_experts})")
        if num_slots % d.ep_size:
            raise ValueError(f"deployment.ep_size ({d.ep_size}) must divide experts + redundant "
                             f"({m.num_experts} + {d.ep_num_redundant_experts} = {num_slots})")
        # replicas SGLang never moves (no EPLB) sit where its trivial placement puts them
        # (experts 0, 1, ... again): a real server's case (the wide-EP recipes' 32 slots), but
        # rarely meant, so it must be asked for by naming the placement
        if (d.ep_num_redundant_experts and not d.enable_eplb and d.init_expert_location == "trivial"
                and "init_expert_location" not in d.model_fields_set):
            raise ValueError(f"deployment.ep_num_redundant_experts ({d.ep_num_redundant_experts}) "
                             f"needs deployment.enable_eplb: true or an init_expert_location "
                             f"(from_skew, recorded loads, or trivial stated: SGLang's replicas "
                             f"of experts 0, 1, ..., never moved) to place the replicas")
        if w.initial_running_per_rank == STEADY:
            if d.disaggregation_mode == "prefill":
                raise ValueError(f"workload.initial_running_per_rank ('{STEADY}') needs "
                                 f"deployment.disaggregation_mode: decode or null (it starts "
                                 f"decoding requests; a prefill instance has none)")
            if not hasattr(w.arrivals, "rate_per_s") and w.arrivals.kind != "concurrency":
                raise ValueError(f"workload.initial_running_per_rank ('{STEADY}') needs arrivals "
                                 f"with a rate_per_s (poisson or bursty) or clients (concurrency) "
                                 f"to find the steady batch; give a number instead")
        location = d.init_expert_location
        if location not in ("trivial", "from_skew") and not (Path(self.base_dir) / location).exists():
            raise ValueError(f"deployment.init_expert_location ({location!r}) must be trivial, "
                             f"from_skew or an existing file or folder of recorded expert loads "
                             f"(relative to {self.base_dir})")
        if d.failures:
            _check_failures(d, num_slots // d.ep_size, m.num_experts)
        if d.num_instances > 1 and w.arrivals.kind == "trace":
            raise ValueError(f"deployment.num_instances ({d.num_instances}) needs poisson, bursty "
                             f"or concurrency arrivals (a trace's share per instance is not drawn)")
        skew = w.skew
        if isinstance(skew, HotSetSkew):
            if skew.num_hot >= m.num_experts:
                raise ValueError(f"workload.skew.num_hot ({skew.num_hot}) must be < the model's "
                                 f"num_experts ({m.num_experts})")
            inclusion = skew.hot_frac / skew.num_hot * m.top_k
            if inclusion > 1:
                raise ValueError(
                    f"workload.skew.hot_frac ({skew.hot_frac}) must be <= num_hot / top_k "
                    f"({skew.num_hot}/{m.top_k} = {skew.num_hot / m.top_k:.3f}); a token picks an "
                    f"expert at most once")
        base = Path(self.base_dir)
        for label, spec in (("workload.skew.path", skew), ("workload.arrivals.path", w.arrivals)):
            if isinstance(spec, (TraceSkew, TraceArrivals)) and not (base / spec.path).is_file():
                raise ValueError(f"{label} ({spec.path!r}) must be an existing file "
                                 f"(relative to {base})")
        return self

    def resolve_path(self, path: str) -> Path:
        """A path from the scenario, relative to the scenario file's directory."""
        return Path(self.base_dir) / path

    @property
    def dp_size(self) -> int:
        """Attention data-parallel groups, each with its own batch (`Parallel.dp_size`): one per
        GPU with DP attention unless `deployment.dp_size` says otherwise, else one."""
        return self.deployment.parallel.dp_size

    @property
    def served_model(self) -> ModelSpec:
        """The model in the weight formats the deployment serves it in
        (`deployment.quantization`, `epsim.spec.quant.served_model`)."""
        return served_model(self.model, self.deployment.quantization)

    def one_instance(self) -> "Scenario":
        """What one of `deployment.num_instances` instances serves (itself when there is one):
        the router's round-robin gives each 1/num_instances of the arrival rate, or of the
        clients and their requests (rounded up: the simulated instance is the busiest)."""
        n = self.deployment.num_instances
        if n == 1:
            return self
        a = self.workload.arrivals
        share = ({"clients": -(-a.clients // n)} if a.kind == "concurrency"
                 else {"rate_per_s": a.rate_per_s / n})
        if a.kind == "concurrency" and a.num_requests is not None:
            share["num_requests"] = -(-a.num_requests // n)
        workload = self.workload.model_copy(update={"arrivals": a.model_copy(update=share)})
        deployment = self.deployment.model_copy(update={"num_instances": 1})
        return self.model_copy(update={"workload": workload, "deployment": deployment})


def _check_served(m: ModelSpec, c: ClusterSpec, d: DeploymentSpec) -> None:
    """What the deployment's layout and formats need of the model and the GPU: attention that
    a step can price, SGLang's shape checks on the layout, FP4 tensor cores for NVFP4."""
    if not m.attention_modelled:
        raise ValueError(f"model.attention ({m.attention!r}) must be one of "
                         f"{list(MODELLED_ATTENTION)} to simulate {m.name}: its attention is not "
                         f"modelled (docs/model.md, the zoo); `epsim cost` prices its MoE layers")
    served = served_model(m, d.quantization)
    problem = model_problem(d.parallel, m.num_attention_heads, m.num_key_value_heads,
                            m.moe_intermediate_size, served.weight_dtype, m.attention)
    if problem:
        raise ValueError(f"deployment.{problem}")
    for fmt in {served.weight_dtype, served.dense_weight_dtype or served.weight_dtype}:
        dtype = weight_tensor_dtype(fmt)
        if c.hardware.tensor_tflops(dtype) is None:
            fp4 = [g for g in hardware_names() if get_hardware(g).fp4_tflops]
            named = (f"deployment.quantization ({d.quantization!r})" if d.quantization
                     else f"model.weight_dtype ({fmt!r})")
            raise ValueError(f"{named} must run on a GPU with {dtype.upper()} tensor cores "
                             f"{fp4}: {c.gpu} has none")
    if d.mla_kv_splits == "one":
        # SGLang's cutlass_mla backend: an MLA decode kernel built for SM100 alone (Blackwell,
        # the zoo's GPUs with FP4 tensor cores)
        sm100 = [g for g in hardware_names() if get_hardware(g).fp4_tflops]
        if not m.attention.startswith("mla") or c.hardware.fp4_tflops is None:
            raise ValueError(f"deployment.mla_kv_splits ('one': SGLang's cutlass_mla) needs an MLA "
                             f"model on an SM100 GPU {sm100}: {m.name} ({m.attention}) on {c.gpu}")


def _check_failures(d: DeploymentSpec, slots_per_rank: int, num_experts: int) -> None:
    """What elastic EP needs of `deployment.failures` (see `epsim.sim.elastic`)."""
    if not d.enable_dp_attention or d.parallel.attn_tp_size != 1:
        raise ValueError("deployment.failures needs deployment.enable_dp_attention: true with one "
                         "GPU per DP group (dp_size = tp_size): elastic EP masks a DP-attention "
                         "rank; a TP attention group cannot lose one")
    outages = []
    for i, f in enumerate(d.failures):
        end = f.at_s + f.recover_after_s if f.recover_after_s is not None else float("inf")
        for j, (rank, start, stop) in enumerate(outages):
            if rank == f.rank and f.at_s < stop and start < end:
                raise ValueError(f"deployment.failures.{i} (rank {f.rank} at {f.at_s:g} s) must not "
                                 f"overlap failures.{j} (rank {rank} down from {start:g} s)")
        outages.append((f.rank, f.at_s, end))
        if d.elastic_recovery == "reload" and f.recover_after_s is None:
            raise ValueError(f"deployment.failures.{i}.recover_after_s (None) must be set with "
                             f"elastic_recovery: reload (the instance waits for the rank to come back)")
    # the most ranks down at once: count outages covering each failure's start
    most_down = max(sum(start <= at < stop for _, start, stop in outages) for _, at, _ in outages)
    if most_down >= d.ep_size:
        at = max((at for _, at, _ in outages),
                 key=lambda t: sum(start <= t < stop for _, start, stop in outages))
        raise ValueError(f"deployment.failures ({most_down} of ep_size {d.ep_size} ranks down at "
                         f"{at:g} s) must leave at least one rank serving at every moment: with "
                         f"every rank lost nothing can run or recover; fail fewer ranks, or "
                         f"give recover_after_s so that outages do not all overlap")
    if d.elastic_recovery != "replicas":
        return
    survivors = d.ep_size - most_down
    if survivors * slots_per_rank < num_experts:
        raise ValueError(
            f"deployment.elastic_recovery (replicas) needs the surviving ranks to hold every expert: "
            f"{survivors} ranks x {slots_per_rank} slots ({survivors * slots_per_rank}) must be >= "
            f"num_experts ({num_experts}); add ep_num_redundant_experts or use elastic_recovery: reload")


def _set_dotted(data: dict, dotted: str, value: Any, where: str) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if isinstance(child, BaseModel):
            child = node[key] = child.model_dump()
        if not isinstance(child, dict):
            raise SpecError(f"{where}: {dotted} cannot be set: {key} is not a mapping")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`deployment.ep_size=16` -> ("deployment.ep_size", 16); values parse as YAML scalars."""
    if "=" not in text:
        raise SpecError(f"--set ({text!r}) must look like key.path=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise SpecError(f"--set ({text!r}) must look like key.path=value")
    try:
        value = load_yaml(raw, "--set")
    except SpecError:
        value = raw
    return key, value


def scenario_from_dict(data: dict, where: str = "scenario", base_dir: str | Path = ".",
                       overrides: dict[str, Any] | None = None) -> Scenario:
    """Validate a scenario mapping, applying dotted-path overrides first."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: (top level) ({type(data).__name__}) must be a mapping of "
                        f"scenario fields")
    data = dict(data)
    for key, value in (overrides or {}).items():
        _set_dotted(data, key, value, where)
    data.setdefault("base_dir", str(base_dir))
    _resolve_zoo(data, where, Path(base_dir))
    scenario = validate(Scenario, data, where)
    if scenario.cluster.network is not None:
        try:
            check_network(scenario.cluster.network, scenario.cluster.gpu)
        except ValueError as exc:
            raise SpecError(f"{where}: cluster.{exc}") from None
    return scenario


def _resolve_zoo(data: dict, where: str, base_dir: Path) -> None:
    """Replace a zoo model name or an `hf_config` file by the model's spec and check the zoo GPU,
    here in the loader: the specs' validators read no files (the network is checked against
    the GPU once the cluster is valid).

    Raises:
        SpecError: an unknown model or GPU, or an unreadable config.json
            (`<where>: <field path> (<value>) must ...`).
    """
    model = data.get("model")
    if isinstance(model, str):
        if model not in model_names():
            raise SpecError(hinted(f"{where}: model ({model!r}) must be one of {model_names()} or "
                                   f"a mapping with the model's fields or hf_config",
                                   did_you_mean(model, model_names())))
        data["model"] = get_model(model)
    elif isinstance(model, dict) and "hf_config" in model:
        path = model["hf_config"]
        if not isinstance(path, str) or not path:
            raise SpecError(f"{where}: model.hf_config ({path!r:.60}) must be a path to a "
                            f"config.json (relative to the scenario file)")
        data["model"] = ModelSpec.from_hf_config(base_dir / path, name=model.get("name"))
    cluster = data.get("cluster")
    if not isinstance(cluster, dict):
        return                                  # the default cluster, or the validator's error
    gpu = cluster.get("gpu", ClusterSpec.model_fields["gpu"].default)
    if isinstance(gpu, str) and gpu not in hardware_names():
        raise SpecError(f"{where}: cluster.gpu ({gpu!r}) must be one of {hardware_names()}")


def load_scenario(path: str | Path, overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario YAML file.

    Args:
        path: the YAML file; or a name of a scenario shipped in `scenarios/` / package data.
        overrides: `["deployment.ep_size=16", ...]` or a `{dotted.path: value}` mapping.
    Raises:
        SpecError: unreadable file, bad YAML, or any invalid field (one line).
    """
    path = Path(path)
    text = read_text(path, "scenario file", MAX_YAML_BYTES)
    return scenario_from_text(text, str(path), path.parent, overrides)


def scenario_from_text(text: str, where: str = "scenario", base_dir: str | Path = ".",
                       overrides: list[str] | dict[str, Any] | None = None) -> Scenario:
    """Parse and validate scenario YAML text (an upload, an editor's contents).

    Args:
        where: the name messages give the text (a file name).
        base_dir: what relative paths in it (traces, hf_config) resolve against.
    Raises:
        SpecError: bad YAML (with line and column; nesting, aliases and duplicate keys
            bounded by `epsim.io`) or any invalid field (one line).
    """
    data = load_yaml(text, where)
    if isinstance(overrides, list):
        overrides = dict(parse_override(o) for o in overrides)
    return scenario_from_dict(data, where=where, base_dir=base_dir, overrides=overrides)
