"""The composition axis: the simulator's decoder layer against whole layers measured on one GPU.

The simulator prices a layer as the sum of its parts with its overlaps (`CostModel.layer`:
attention and its block's own ops, block ops, experts, the backend's layout work, shared
experts, dispatch, combine, `sync_us`). `live.bench.layers`
measures transformers' whole Qwen3 MoE decoder layer, and its parts, in the same run. Each
measured layer (`decoder_layer`, device time) is priced here exactly as `epsim simulate` prices
one MoE layer of a decode step on that instance -- the public layer cost (`CostModel.layer`) on
the measured shape (`simulator_model`), BF16, DP attention, `B` requests per rank at context
`C`, the layer's measured rows per expert as its loads -- for every a2a backend:

- EP 1: one GPU holding every expert, everything the step charges the layer (what a user of
  `ep_size: 1` sees; no backend runs, nothing is dispatched);
- virtual EP n: the per-rank work of an EP n instance (`LayerCost.compute_us`): its dispatch,
  combine, the backend's own layout work and the layer sync taken out (the measured rank
  communicates nothing), the permute and weighting a low-latency backend's kernels would do
  run by the block, as the measured rank runs them;

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
from epsim.cost.record_single import layer_model
from epsim.errors import RecordError
from epsim.records import MeasurementRecord
from epsim.spec.deployment import DeploymentSpec
from epsim.spec.hardware import ClusterSpec
from epsim.validate.composition_holdout import held_out_shape, layer_baselines, stack_baselines
from epsim.zoo import get_hardware

RECORDS_DIR = ("records", "h200_layer")    # the shipped whole-layer records (never fitted on)
# the same run's op-level parts: calibration data, shipped with the single-GPU records
PARTS_FILES = (("records", "h200_single", "layer_parts_run1.jsonl.gz"),)
PARTS = ("attention_block", "attention_kernel", "moe_block", "experts_module", "experts_kernel",
         "router", "block_ops", "shared_expert")


def default_composition_paths() -> list[Path]:
    """The shipped whole-layer records (`epsim/data/records/h200_layer/*.jsonl[.gz]`: validation
    data) and their run's parts (`epsim/data/records/h200_single/layer_parts_run1.jsonl.gz`:
    calibration data, read here for the parts tables)."""
    data = Path(str(resources.files("epsim") / "data"))
    folder = data / Path(*RECORDS_DIR)
    if not folder.is_dir():
        return []
    wholes = sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")])
    return wholes + [data / Path(*f) for f in PARTS_FILES if (data / Path(*f)).is_file()]


@dataclass(frozen=True)
class Priced:
    """One layer as the simulator prices it (µs, the slowest rank's; `epsim.cost.LayerCost`):
    `layer_us` is what it adds to a step at EP 1, or a virtual EP n rank's own work (the
    layer's compute, no dispatch, combine, backend layout or sync); the rest are its parts.
    `components` names the profile component that priced each part (`experts`:
    `any/experts/graph`, ...)."""

    layer_us: float
    attention_us: float
    attention_ops_us: float
    experts_us: float
    block_ops_us: float
    shared_us: float
    comm_us: float
    layout_us: float
    sync_us: float
    per_layer_us: float
    components: dict[str, str]

    @property
    def experts_component(self) -> str:
        """The component that priced the experts (a diagnostic)."""
        return self.components.get("experts") or "datasheet"

    @property
    def moe_us(self) -> float:
        """The MoE part: the layer less its attention (with its block's ops) and per-layer
        overhead."""
        return self.layer_us - self.attention_us - self.attention_ops_us - self.per_layer_us


simulator_model = layer_model        # the measured layer's shape as the simulator's ModelSpec


class Pricer:
    """Prices measured layers through `epsim.cost.CostModel.layer` (one cost model per shape,
    EP size and backend, kept); `time_mode` "graph" prices device time (a CUDA-graph decode
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
                # the bench times transformers' block: its attention ops, not SGLang's
                cost = CostModel(model, cluster, deployment, self.profile, self.time_mode,
                                 engine="transformers")
            tables = build_tables(Placement.on_cluster(
                contiguous_placement(1, model.num_experts, ep), model.num_experts, ep, per_node))
            self._models[key] = (cost, tables)
        return self._models[key]

    def price(self, record: MeasurementRecord, backend: str) -> Priced:
        """One layer of a decode step of `record.num_seqs` requests per rank at
        `record.context_len`, loads the record's rows per expert (`local_expert_tokens`): at
        EP 1 what the step charges, at virtual EP n the rank's own work (`LayerCost.compute_us`)."""
        cost, tables = self._cost_model(record, backend)
        ep = record.ep_size
        loads = np.asarray(record.local_expert_tokens, dtype=np.float64).reshape(1, -1)
        batch = BatchCounts.uniform_decode(ep, record.num_seqs, record.context_len)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            layer = cost.layer(batch, loads, tables)

        def part(name: str) -> float:
            return float(layer.part(name)[0])

        whole = float(layer.layer_us[0]) if ep == 1 else float(layer.compute_us[0])
        block = part("block_ops") + (part("block_ops_in_comm") if ep > 1 else 0.0)
        return Priced(whole + layer.per_layer_us, part("attention"), part("attention_ops"),
                      part("experts"), block, part("shared_experts"),
                      part("dispatch") + part("combine"), part("layout"), part("sync"),
                      layer.per_layer_us, {p.name: p.component for p in layer.parts})


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
    """Every measured layer and stack, priced for each backend; the baselines of each
    (`epsim.validate.composition_holdout`: (constant, log-log) µs, aligned with `layers` and
    `stacks`); the attention block's ops refitted on one shape (`held_out`) and the other
    shapes' layers priced with it (`held_out_layers`)."""

    layers: list[LayerRow]
    stacks: list[StackRow]
    backends: tuple[str, ...]
    timing: str
    sources: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    layer_baselines: list[tuple[float, float]] = field(default_factory=list)
    stack_baselines: list[tuple[float, float]] = field(default_factory=list)
    held_out: object = None
    held_out_layers: list[LayerRow] = field(default_factory=list)


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
    held = held_out_shape(records, profile) if timing == "device" else None
    held_rows = []
    if held is not None:
        again = Pricer(held.profile, pricer.gpu, pricer.time_mode)
        held_rows = [LayerRow(r.model, r.ep_size, r.num_seqs, r.context_len, r.median_us, {},
                              {b: again.price(r, b) for b in backends})
                     for r in layers if r.model != held.fit_shape]
    return Composition(rows, stacks, tuple(backends), timing, list(sources or []), devices,
                       layer_baselines(rows), stack_baselines(stacks),
                       held, held_rows)


def compose_files(paths, profile, backends=vocab.A2A_BACKENDS, timing: str = "device",
                  strict: bool = False) -> Composition:
    """`compose` over record files (`epsim.calibrate.inputs.load_records`)."""
    sourced, files = load_records(paths, strict=strict)
    return compose([s.record for s in sourced], profile, backends, timing,
                   [f"{f.path} ({f.num_records}, sha256 {f.sha256[:12]})" for f in files])
