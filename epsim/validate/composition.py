"""The composition axis: the simulator's decoder layer against whole layers measured on one GPU.

The simulator prices a layer as the sum of its parts with its overlaps (`CostModel.step`:
attention, block ops, experts, shared experts, dispatch, combine, `sync_us`). `live.bench.layers`
measures transformers' whole Qwen3 MoE decoder layer, and its parts, in the same run. Each
measured layer (`decoder_layer`, device time) is priced here exactly as `epsim simulate` prices
one MoE layer of a decode step on that instance -- the public cost API on the measured shape
(`simulator_model`), BF16, DP attention, `B` requests per rank at context `C`, the layer's
measured rows per expert as its loads -- for every a2a backend:

- EP 1: one GPU holding every expert, everything the step charges the layer (what a user of
  `ep_size: 1` sees; a backend that charges dispatch and combine there is wrong to);
- virtual EP n: the per-rank work of an EP n instance, its dispatch and combine taken out (the
  measured rank communicates nothing);

plus, as for every layer of a step, the step overhead's per-layer term (`any/step_overhead`
`per_layer_us`). A stack of N layers (`layer_stack`) is judged against N x that, and against N x
the measured layer of the same point (does the GPU compose?).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from epsim import vocab
from epsim.calibrate.inputs import load_records
from epsim.cost import BatchCounts, CostModel, build_tables, contiguous_placement
from epsim.eplb import Placement
from epsim.errors import RecordError
from epsim.records import MeasurementRecord
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.spec.model import ModelSpec
from epsim.zoo import get_hardware

RECORDS_DIR = ("records", "h200_layer")    # the shipped whole-layer records (never fitted on)
PARTS = ("attention_block", "attention_kernel", "moe_block", "experts_module", "experts_kernel",
         "router", "block_ops", "shared_expert")


def default_composition_paths() -> list[Path]:
    """The shipped whole-layer records (`epsim/data/records/h200_layer/*.jsonl[.gz]`)."""
    folder = Path(str(resources.files("epsim") / "data" / Path(*RECORDS_DIR)))
    return sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]) if folder.is_dir() else []


@dataclass(frozen=True)
class Priced:
    """One layer as the simulator prices it (µs, the slowest rank's): `layer_us` is what it
    adds to a step; the rest are its parts. `experts_component` names the profile component
    that priced the experts (`none/experts`, `any/experts/graph`, ...)."""

    layer_us: float
    attention_us: float
    experts_us: float
    block_ops_us: float
    shared_us: float
    comm_us: float
    sync_us: float
    per_layer_us: float
    experts_component: str

    @property
    def moe_us(self) -> float:
        """The MoE part: the layer less its attention and per-layer overhead."""
        return self.layer_us - self.attention_us - self.per_layer_us


def simulator_model(record: MeasurementRecord):
    """The measured layer's shape as the simulator's `ModelSpec` (one layer; GQA attention with
    the record's heads; a shared expert where the record has one, of the experts' width)."""
    return ModelSpec(name=record.model, num_layers=1, hidden_size=record.hidden_size,
                     moe_intermediate_size=record.moe_intermediate_size,
                     num_experts=record.num_experts, top_k=record.top_k,
                     num_shared_experts=record.intermediate_size // record.moe_intermediate_size,
                     num_attention_heads=record.num_attention_heads,
                     num_key_value_heads=record.num_kv_heads, head_dim=record.head_dim)


class Pricer:
    """Prices measured layers through `epsim.cost.CostModel` (one cost model per shape, EP
    size and backend, kept); `time_mode` "graph" prices device time (a CUDA-graph decode
    step), "eager" device time plus host overhead."""

    def __init__(self, profile, gpu: str = "H200", time_mode: str = "graph"):
        self.profile, self.gpu, self.time_mode = profile, gpu, time_mode
        self._models: dict[tuple, tuple] = {}

    def _cost_model(self, record: MeasurementRecord, backend: str):
        ep, model = record.ep_size, simulator_model(record)
        key = (model, ep, backend)
        if key not in self._models:
            per_node = get_hardware(self.gpu).gpus_per_node
            cluster = ClusterSpec(gpu=self.gpu, num_nodes=max(1, ep // per_node))
            deployment = DeploymentSpec(ep_size=ep, moe_a2a_backend=backend, dispatch_dtype="bf16",
                                        enable_dp_attention=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # out-of-range fits are what is being judged
                cost = CostModel(model, cluster, deployment, self.profile, self.time_mode)
            tables = build_tables(Placement.on_cluster(
                contiguous_placement(1, model.num_experts, ep), model.num_experts, ep, per_node))
            self._models[key] = (cost, tables)
        return self._models[key]

    def price(self, record: MeasurementRecord, backend: str) -> Priced:
        """One layer of a decode step of `record.num_seqs` requests per rank at
        `record.context_len`, loads the record's rows per expert (`local_expert_tokens`)."""
        cost, tables = self._cost_model(record, backend)
        ep = record.ep_size
        loads = np.asarray(record.local_expert_tokens, dtype=np.float64).reshape(1, -1)
        batch = BatchCounts.uniform_decode(ep, record.num_seqs, record.context_len)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = cost.step(batch, loads, tables)
        comm = float(step.dispatch_us[0] + step.combine_us[0])
        parts = (float(step.attention_us[0]), float(step.experts_us[0]),
                 float(step.block_ops_us[0]), float(step.shared_experts_us[0]))
        layer = float(step.layer_us[0])
        per_layer = float(cost.params.overhead["per_layer_us"])
        # which fit priced the experts (a diagnostic)
        source = cost.params.step(cost.uses_graph(batch)).experts.timing.key or "datasheet"
        return Priced(layer - (comm if ep > 1 else 0.0) + per_layer, *parts, comm,
                      layer - sum(parts) - comm, per_layer, source)


@dataclass
class LayerRow:
    """A measured layer (µs, device time), its parts measured in the same run (None where the
    run has none), and what each backend's pricing gives."""

    model: str
    ep_size: int
    num_seqs: int
    context_len: int
    measured_us: float
    parts_us: dict[str, float | None]
    priced: dict[str, Priced] = field(default_factory=dict)


@dataclass
class StackRow:
    """A measured stack of `num_layers` layers against N x its measured one layer (`one_us`,
    None without one) and N x each backend's priced layer."""

    model: str
    ep_size: int
    num_seqs: int
    context_len: int
    num_layers: int
    measured_us: float
    one_us: float | None
    priced_us: dict[str, float] = field(default_factory=dict)


@dataclass
class Composition:
    layers: list[LayerRow]
    stacks: list[StackRow]
    backends: tuple[str, ...]
    timing: str
    sources: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)


def _parts_index(records: list[MeasurementRecord]) -> dict[tuple, float]:
    """Measured parts by (part, model, EP, batch, context), µs; context or EP 0 where a part
    does not depend on it."""
    out = {}
    for r in records:
        if r.kind == "layer_part":
            part = r.extra.get("part", "")
            ep = r.ep_size if part in ("moe_block", "experts_module") else 1
            out[(part, r.model, ep, r.num_seqs, r.context_len)] = r.median_us
        elif r.kind == "attention_decode":
            out[("attention_kernel", r.model, 1, r.num_seqs, r.context_len)] = r.median_us
        elif r.kind == "experts" and "part" in r.extra:
            out[("experts_kernel", r.model, r.ep_size, r.num_tokens_per_rank, 0)] = r.median_us
        elif r.kind == "block_ops":
            out[("block_ops", r.model, 1, r.num_tokens_per_rank, 0)] = r.median_us
        elif r.kind == "dense_mlp" and r.model.endswith("/shared_expert"):
            layer = r.model.rsplit("/", 1)[0]
            out[("shared_expert", layer, 1, r.num_tokens_per_rank, 0)] = r.median_us
    return out


def _parts_of(index: dict, r: MeasurementRecord) -> dict[str, float | None]:
    b, c, ep, m = r.num_seqs, r.context_len, r.ep_size, r.model
    keys = {"attention_block": (m, 1, b, c), "attention_kernel": (m, 1, b, c),
            "moe_block": (m, ep, b, 0), "experts_module": (m, ep, b, 0),
            "experts_kernel": (m, ep, b, 0), "router": (m, 1, b, 0), "block_ops": (m, 1, b, 0),
            "shared_expert": (m, 1, b, 0)}
    return {part: index.get((part, *keys[part])) for part in PARTS}


def compose(records: list[MeasurementRecord], profile, backends=vocab.A2A_BACKENDS,
            timing: str = "device", sources: list[str] | None = None) -> Composition:
    """Price every measured layer and stack of `timing` for each backend.

    Raises:
        RecordError: no `decoder_layer` record of that timing.
    """
    records = [r for r in records if r.timing == timing]
    layers = [r for r in records if r.kind == "decoder_layer"]
    if not layers:
        raise RecordError(f"records ({', '.join(sources or [])[:200]}) must hold decoder_layer "
                          f"records timed '{timing}' (live.bench.layers)")
    gpus = {r.provenance.hardware for r in layers if r.provenance.hardware}
    pricer = Pricer(profile, gpus.pop() if len(gpus) == 1 else "H200",
                    "graph" if timing == "device" else "eager")
    index = _parts_index(records)
    rows, one = [], {}
    for r in layers:
        row = LayerRow(r.model, r.ep_size, r.num_seqs, r.context_len, r.median_us,
                       _parts_of(index, r), {b: pricer.price(r, b) for b in backends})
        rows.append(row)
        one[(r.model, r.ep_size, r.num_seqs, r.context_len)] = row
    stacks = []
    for r in records:
        if r.kind != "layer_stack":
            continue
        base = one.get((r.model, r.ep_size, r.num_seqs, r.context_len))
        stacks.append(StackRow(r.model, r.ep_size, r.num_seqs, r.context_len, r.num_layers,
                               r.median_us, base.measured_us if base else None,
                               {b: r.num_layers * base.priced[b].layer_us for b in backends}
                               if base else {}))
    devices = sorted({r.provenance.device for r in layers})
    return Composition(rows, stacks, tuple(backends), timing, list(sources or []), devices)


def compose_files(paths, profile, backends=vocab.A2A_BACKENDS, timing: str = "device",
                  strict: bool = False) -> Composition:
    """`compose` over record files (`epsim.calibrate.inputs.load_records`)."""
    sourced, files = load_records(paths, strict=strict)
    return compose([s.record for s in sourced], profile, backends, timing,
                   [f"{f.path} ({f.num_records}, sha256 {f.sha256[:12]})" for f in files])
