"""MeasurementRecord: one measured configuration per JSON line (schema `epsim.record/1`).

`live/` writes these; `epsim calibrate` fits profiles on them; `epsim validate` judges
predictions against them. Times are microseconds; counts are per rank, rank order.

Schema 2 (`epsim.record/2`) adds, all optional: the single-GPU kinds (`attention_prefill`,
`attention_decode`, `dense_mlp`, `block_ops`), `timing` (what a time measures: device, host or eager),
`num_local_experts`, the attention sizes and `intermediate_size`. Schema 3 (`epsim.record/3`)
adds the whole-layer kinds of `live.bench.layers` (`decoder_layer`, `layer_stack`, `layer_part`).
Schema 4 (`epsim.record/4`) adds, all optional, the kinds imported from the field's op databases
that no cost model reads yet (`gemm`, `quant_experts`, `mla_prefill`, `mla_decode`, `mla_bmm`,
`quantize`: `epsim.calibrate.aic`) and the fields they need: `weight_dtype`, `kv_cache_dtype`,
`tp_size`, `moe_tp_size`. Version 1, 2 and 3 lines still read.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path
from typing import Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from epsim import vocab
from epsim.errors import RecordError
from epsim.io import loads_json, read_text as read_capped
from epsim.io.write import LineAppender, write_text
from epsim.spec.errors import format_error
from epsim.spec.numbers import check_numbers

SCHEMA = "epsim.record/4"
READABLE_SCHEMAS = ("epsim.record/1", "epsim.record/2", "epsim.record/3", SCHEMA)
RecordDtype = Literal[(*vocab.DISPATCH_DTYPES, "")]   # "": the backend's native dtype

RecordKind = Literal[
    "dispatch",      # tokens sent to the ranks holding their experts
    "combine",       # expert outputs returned and weighted-summed
    "experts",       # grouped GEMM of the local experts on received tokens
    "moe_layer",     # router + dispatch + experts + combine, end to end
    "rebalance",     # EPLB weight moves between ranks
    "p2p_copy",      # reference GPU-to-GPU copy bandwidth on the same machine
    "rebalance_term",  # one term of a rebalance or recovery timed alone (live.bench.eplb_host)
    "allreduce",     # the `none` backend's all-reduce of hidden states
    "expert_load",   # recorder output: tokens per [layer, expert] over a window
    "equality",      # a correctness check (max abs error vs the reference), not a timing
    "attention_prefill",  # causal GQA attention over new tokens (one GPU, live.bench.component_ops)
    "attention_decode",   # one new token per sequence against a KV cache (one GPU)
    "dense_mlp",     # a dense SwiGLU MLP: dense layers, DeepSeek's shared expert (one GPU)
    "block_ops",     # the block's own ops: router, permute, top-k weighting and sum (one GPU)
    "decoder_layer",  # a whole decoder layer in decode, one GPU: EP 1 or a virtual EP n rank
    "layer_stack",   # `num_layers` decoder layers in one CUDA graph (one GPU)
    "layer_part",    # a decoder layer's own sub-block (`extra.part`), timed alone (one GPU)
    # schema 4, imported op tables with no cost model yet (never fitted into a component):
    "gemm",          # one dense GEMM [m, k] x [k, n]: m = num_tokens_per_rank, k = hidden_size,
                     # n = intermediate_size, weights in `weight_dtype`
    "quant_experts",  # grouped SwiGLU GEMM of the local experts with quantised weights
                     # (`weight_dtype` fp8_block, nvfp4, ...), else as `experts`
    "mla_prefill",   # multi-head latent attention over new tokens (per attention-TP rank)
    "mla_decode",    # MLA, one new token per sequence against a latent KV cache
    "mla_bmm",       # MLA's absorbed-weight batched GEMMs (`extra.op`: pre or post attention)
    "quantize",      # activation quantisation [m, k] to `weight_dtype` (m tokens, k = hidden_size)
]

# What a record's times measure (schema 2):
#   device: GPU time alone -- CUDA-graph replays timed with CUDA events, launched ahead of the
#       GPU so no host work is inside (what a CUDA-graph decode step pays);
#   host: host time to issue one eager call (Python, dispatch, kernel launches; no device wait),
#       the overhead an eager step adds on top of device time where the host is the bottleneck;
#   eager: one eager call from an idle GPU, CUDA events around it (device time plus the launch
#       gaps the host leaves); on CPU, a monotonic clock around the call;
#   "": schema-1 records -- stage gaps of an eager forward (device and host time mixed), or
#       `mode: graph` for launched-ahead forwards.
Timing = Literal["", "device", "host", "eager"]


class Provenance(BaseModel):
    """Where a record was measured."""
    model_config = ConfigDict(extra="allow", frozen=True)

    device: str = Field(min_length=1, description="e.g. '2x NVIDIA H200' or 'cpu (gloo)'")
    hardware: str = Field(default="", description="zoo GPU name the device matches, e.g. 'H200'")
    driver: str = ""
    torch: str = ""
    nccl: str = ""
    mooncake: str = ""
    deep_ep: str = ""
    cuda: str = ""
    commit: str = ""
    host: str = ""
    timestamp: str = ""


class MeasurementRecord(BaseModel):
    """One measured configuration.

    Routing counts (what the cost models consume) are taken from the actual dispatch:
    `recv_tokens_per_rank[r]` token copies rank r received, `send_tokens_per_rank[r]` copies
    it sent, `expert_tokens_per_rank[r]` token-expert pairs its experts computed, and
    `local_expert_tokens[r][j]` tokens of its j-th local expert. Timings are the median over
    `num_iters` of the slowest rank's time per iteration.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal[READABLE_SCHEMAS] = Field(default=SCHEMA, alias="schema")
    kind: RecordKind
    timing: Timing = Field(default="", description="device | host | eager (see `Timing`)")
    backend: str = Field(min_length=1, description="none | torch | mooncake | deepep | p2p")
    mode: str = Field(default="", description="deepep normal | low_latency; plus a 'graph' part "
                      "for device-only timings (launched ahead of the GPU, as a CUDA graph replays)")
    ep_size: int = Field(gt=0)
    num_tokens_per_rank: int = Field(ge=0)
    hidden_size: int = Field(ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    num_experts: int = Field(default=0, ge=0, description="logical experts")
    num_physical_experts: int = Field(default=0, ge=0)
    num_local_experts: int = Field(default=0, ge=0, description="experts the measured GPU holds "
                                   "(single-GPU experts records: rank 0 of an EP group of ep_size)")
    intermediate_size: int = Field(default=0, ge=0, description="dense_mlp: the MLP's width")
    num_attention_heads: int = Field(default=0, ge=0, description="attention: query heads")
    num_kv_heads: int = Field(default=0, ge=0, description="attention: key/value heads (GQA)")
    head_dim: int = Field(default=0, ge=0)
    num_seqs: int = Field(default=0, ge=0, description="attention: sequences in the batch")
    context_len: int = Field(default=0, ge=0, description="attention: key/value tokens per sequence "
                             "(prefill: the sequence itself; decode: the cache)")
    top_k: int = Field(default=0, ge=0)
    weight_dtype: str = Field(default="", description="schema 4: the weights' dtype (bf16, fp8, "
                              "fp8_block, nvfp4, ...); '' for BF16 records of schemas 1-3")
    kv_cache_dtype: str = Field(default="", description="schema 4, attention: the KV cache's dtype "
                                "(bf16, fp8); '' for BF16")
    tp_size: int = Field(default=1, ge=1, description="schema 4: attention tensor-parallel size "
                         "(the heads a record's GPU holds are num_attention_heads)")
    moe_tp_size: int = Field(default=1, ge=1, description="schema 4: MoE tensor-parallel size (each "
                             "expert's intermediate size split over it)")
    model: str = ""
    dispatch_dtype: RecordDtype = "bf16"
    skew: dict = Field(default_factory=dict)
    seed: int = 0
    recv_tokens_per_rank: list[float] = Field(default_factory=list)
    send_tokens_per_rank: list[float] = Field(default_factory=list)
    expert_tokens_per_rank: list[float] = Field(default_factory=list)
    local_expert_tokens: list[list[float]] = Field(default_factory=list)
    bytes: float = Field(default=0.0, ge=0, allow_inf_nan=False,
                         description="payload bytes (rebalance, p2p_copy)")
    num_layers: int = Field(default=1, ge=0)
    median_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    p10_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    p90_us: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    per_rank_median_us: list[float] = Field(default_factory=list)
    num_iters: int = Field(default=0, ge=0)
    value: float | None = Field(default=None, description="non-timing result, e.g. max abs error")
    loads: list[list[float]] | None = Field(default=None, description="expert_load: [layers, experts]")
    forward_pass_id: int | None = None
    extra: dict = Field(default_factory=dict)
    provenance: Provenance

    @model_validator(mode="after")
    def _consistent(self) -> "MeasurementRecord":
        timed = self.kind not in ("expert_load", "equality")
        for name in ("median_us", "p10_us", "p90_us"):
            value = getattr(self, name)
            if not math.isfinite(value):
                raise ValueError(f"{name} ({value}) must be a finite number of microseconds")
        if timed and self.median_us <= 0:
            raise ValueError(f"median_us ({self.median_us}) must be > 0 for a timing record")
        if timed and self.p10_us and self.p90_us and not self.p10_us <= self.median_us <= self.p90_us:
            raise ValueError(f"median_us ({self.median_us}) must lie between p10_us ({self.p10_us}) "
                             f"and p90_us ({self.p90_us})")
        for name in ("recv_tokens_per_rank", "send_tokens_per_rank", "expert_tokens_per_rank",
                     "per_rank_median_us"):
            values = getattr(self, name)
            if values and len(values) != self.ep_size:
                raise ValueError(f"{name} has {len(values)} entries; it must have ep_size "
                                 f"({self.ep_size})")
            if any(not math.isfinite(v) or v < 0 for v in values):
                raise ValueError(f"{name} must hold finite values >= 0")
        if self.local_expert_tokens and len(self.local_expert_tokens) != self.ep_size:
            raise ValueError(f"local_expert_tokens has {len(self.local_expert_tokens)} rows; it "
                             f"must have ep_size ({self.ep_size})")
        if self.kind == "expert_load" and self.loads is None:
            raise ValueError("loads (missing) must be a [layers, experts] list for expert_load")
        return self

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, exclude_defaults=False), separators=(",", ":"))


def records_hash(paths: Iterable[str | Path]) -> str:
    """sha256 over the bytes of the record files, in the order given."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def read_records(path: str | Path, strict: bool = True) -> list[MeasurementRecord]:
    """Read a JSON Lines file of measurement records.

    Args:
        strict: raise on the first bad line; else warn naming each bad line and skip it.
    Raises:
        RecordError: `<file>:<line>: <field> (<value>) must ...` for a bad line (strict).
    """
    return [record for _, record in iter_records(path, strict)]


def read_text(path: str | Path) -> str:
    """A record file's text; `.gz` files (the shipped records are kept compressed) decompressed.

    Raises:
        RecordError: unreadable, over the size cap, corrupt gzip, not UTF-8 (`epsim.io`).
    """
    return read_capped(path, "records", error=RecordError)


def iter_records(path: str | Path, strict: bool = True) -> Iterator[tuple[int, MeasurementRecord]]:
    """`read_records`, with each record's 1-based line number (for messages naming the line)."""
    path = Path(path)
    lines = read_text(path).splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            data = loads_json(line, where, RecordError, one_line=True)
        except RecordError as exc:
            problem = str(exc)
        else:
            bad = check_numbers(data, MeasurementRecord)
            if isinstance(data, dict) and data.get("schema", SCHEMA) not in READABLE_SCHEMAS:
                problem = (f"{where}: schema ({str(data.get('schema'))[:40]!r}) must be one of "
                           f"{', '.join(READABLE_SCHEMAS)}")
            elif bad is not None:
                problem = f"{where}: {bad[0]} {bad[1]}"
            else:
                try:
                    record = MeasurementRecord.model_validate(data)
                except ValidationError as exc:
                    problem = format_error(exc.errors()[0], MeasurementRecord, where)
                else:
                    yield lineno, record
                    continue
        if strict:
            raise RecordError(problem)
        warnings.warn(problem, stacklevel=3)


def write_records(records: Iterable[MeasurementRecord], path: str | Path, append: bool = True) -> int:
    """Append (or write) records as JSON Lines; returns how many were written. Appending writes
    whole lines (a line cut short by an error is undone); writing replaces the file atomically
    (`epsim.io.write`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [record.to_json() for record in records]
    if not append:
        write_text(path, "".join(line + "\n" for line in lines))
        return len(lines)
    with LineAppender(path, sync=False) as out:
        for line in lines:
            out.append(line)
    return len(lines)
