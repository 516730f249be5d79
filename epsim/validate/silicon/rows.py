"""The public silicon sample: one row per measured deployment, read as it is written.

`aiconfigurator-core` ships `systems/silicon_sample.csv` (Apache-2.0): model, system, framework
and version, precision, agg/disagg, ISL/OSL, the parallelism of each side in AIConfigurator's
terms (`tp_size` x `attention_dp_size` GPUs per instance = `moe_tp_size` x `moe_ep_size`),
batch sizes, workers per side, the benchmark's client count (`silicon_concurrency=N` in
`silicon_data_source`) and the measured TTFT and TPOT (ms: the benchmark's mean TTFT and mean
TPOT, `sglang.bench_serving`'s definitions, docs/silicon.md). These rows are validation only:
nothing under `epsim/calibrate` or `epsim/cost` reads them (tests/epsim/validate/test_silicon.py).
"""

from __future__ import annotations

import csv
import importlib.util
import re
from dataclasses import dataclass, replace
from pathlib import Path

from epsim.errors import EpsimError

SAMPLE_NAME = "silicon_sample.csv"
# the rows in scope: SGLang (its scheduler and kernels are the ones epsim models) serving the
# MoE models of the zoo; every other backend or model is listed as out of scope with its reason
IN_SCOPE_BACKENDS = ("sglang",)
IN_SCOPE_MODELS = ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "Qwen/Qwen3-235B-A22B-FP8")
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")
_CONFIG_ID = re.compile(r"config_id=(\d+)")
_IMAGE = re.compile(r"(?:image=|; )([\w.\-/]+:[\w.\-]+)\s*$")
_MEASURED = re.compile(r"measured=([0-9T:.\-+Z]+)")
_REQUIRED = ("id", "silicon_data_source", "backend", "backend_version", "model_path", "system",
             "mode", "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "silicon_ttft_ms",
             "silicon_tpot_ms")


@dataclass(frozen=True)
class Side:
    """One kind of instance of a row, in AIConfigurator's terms.

    Attributes:
        tp_size: attention tensor-parallel ranks per attention-DP group.
        attention_dp_size: attention data-parallel groups (1: TP attention only).
        moe_tp_size, moe_ep_size: MoE tensor- and expert-parallel ranks
            (moe_tp x moe_ep = tp x attention_dp = GPUs of one instance).
        batch_size: requests per attention-DP rank as the row states it (None: not stated).
        num_workers: instances of this kind (None: not stated; an agg row has one).
    """

    tp_size: int
    pp_size: int
    attention_dp_size: int
    moe_tp_size: int
    moe_ep_size: int
    batch_size: int | None
    num_workers: int | None

    @property
    def num_gpus(self) -> int:
        return self.tp_size * self.attention_dp_size * self.pp_size


@dataclass(frozen=True)
class SiliconRow:
    """One measured deployment. `agg` is set for agg rows, `prefill` and `decode` for disagg."""

    id: str
    source: str
    backend: str
    backend_version: str
    model_path: str
    system: str
    precision: str
    mode: str
    isl: int
    osl: int
    gemm_quant_mode: str
    moe_quant_mode: str
    concurrency: int | None
    agg: Side | None
    prefill: Side | None
    decode: Side | None
    ttft_ms: float
    tpot_ms: float
    # the file's other rows of the same InferenceX configuration (`config_id`), each without its
    # own peers: the same deployment measured at other client counts, lengths or runs
    peers: tuple[SiliconRow, ...] = ()

    @property
    def model(self) -> str:
        """The model's name without its organisation (`DeepSeek-R1`)."""
        return self.model_path.rsplit("/", 1)[-1]

    @property
    def image(self) -> str:
        """The container image the source names (empty when it names none)."""
        match = _IMAGE.search(self.source)
        return match.group(1) if match else ""

    @property
    def measured_at(self) -> str | None:
        """When the run was measured (`measured_time` of its source)."""
        return measured_time(self.source)

    @property
    def config_id(self) -> str | None:
        """The InferenceX database's configuration id the source names (`config_id=434`), or
        None. InferenceX's database keys a benchmark result by a configuration record (hardware,
        framework, precision, spec_method, disagg, GPUs, workers, TP, EP and DP attention per
        side; aiconfigurator's `config_adapter/inferencex.py` reads the same record), so rows
        sharing one ran one deployment, with or without MTP alike."""
        match = _CONFIG_ID.search(self.source)
        return match.group(1) if match else None

    @property
    def tpot_side(self) -> Side:
        """The instance whose steps set TPOT: the decode side of a disagg row, else the one."""
        return self.decode if self.mode == "disagg" else self.agg

    @property
    def workers_stated(self) -> bool:
        return self.mode == "agg" or (self.prefill.num_workers is not None
                                      and self.decode.num_workers is not None)


def measured_time(source: str) -> str | None:
    """When a run was measured, as its `silicon_data_source` states it (`2026-02-09T00:00:00.000Z`:
    some sources give the day only), or None (AIConfigurator's own runs state no time)."""
    match = _MEASURED.search(source)
    return match.group(1) if match else None


def default_csv_path() -> Path | None:
    """The sample in an installed `aiconfigurator-core` (found without importing it), or None."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "systems" / SAMPLE_NAME
    return path if path.is_file() else None


def _int(value: str, where: str, name: str) -> int | None:
    """A CSV cell as an integer (`8`, `8.0`); None for an empty cell."""
    if value is None or value.strip() == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise EpsimError(f"{where}: {name} ({value!r:.30}) must be an integer or empty") from None
    if number != int(number) or number < 0:
        raise EpsimError(f"{where}: {name} ({value!r:.30}) must be a whole number >= 0")
    return int(number)


def _side(record: dict, prefix: str, where: str) -> Side:
    get = {name: _int(record.get(f"{prefix}{name}", ""), where, f"{prefix}{name}")
           for name in ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
                        "batch_size", "num_workers")}
    tp = get["tp_size"] or 1
    adp = get["attention_dp_size"] or 1
    # AIConfigurator infers a missing MoE width from the other (moe_tp x moe_ep = tp x dp)
    moe_tp, moe_ep = get["moe_tp_size"], get["moe_ep_size"]
    if moe_tp is None and moe_ep is None:
        moe_tp, moe_ep = tp * adp, 1
    elif moe_tp is None:
        moe_tp = max(tp * adp // moe_ep, 1)
    elif moe_ep is None:
        moe_ep = max(tp * adp // moe_tp, 1)
    return Side(tp, get["pp_size"] or 1, adp, moe_tp, moe_ep, get["batch_size"],
                1 if prefix == "" else get["num_workers"])


def _float(value: str, where: str, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise EpsimError(f"{where}: {name} ({value!r:.30}) must be a number") from None
    if not number > 0:
        raise EpsimError(f"{where}: {name} ({value!r:.30}) must be > 0 (a measured latency)")
    return number


def parse_row(record: dict, where: str) -> SiliconRow:
    """One CSV record as a `SiliconRow` (EpsimError naming the column for a bad cell)."""
    mode = record["mode"]
    if mode not in ("agg", "disagg"):
        raise EpsimError(f"{where}: mode ({mode!r:.20}) must be agg or disagg")
    match = _CONCURRENCY.search(record["silicon_data_source"] or "")
    return SiliconRow(
        id=record["id"], source=record["silicon_data_source"], backend=record["backend"],
        backend_version=record["backend_version"] or "", model_path=record["model_path"],
        system=record["system"], precision=record.get("precision", ""), mode=mode,
        isl=_int(record["isl"], where, "isl") or 0, osl=_int(record["osl"], where, "osl") or 0,
        gemm_quant_mode=record["gemm_quant_mode"] or "", moe_quant_mode=record["moe_quant_mode"] or "",
        concurrency=int(match.group(1)) if match else None,
        agg=_side(record, "", where) if mode == "agg" else None,
        prefill=_side(record, "prefill_", where) if mode == "disagg" else None,
        decode=_side(record, "decode_", where) if mode == "disagg" else None,
        ttft_ms=_float(record["silicon_ttft_ms"], where, "silicon_ttft_ms"),
        tpot_ms=_float(record["silicon_tpot_ms"], where, "silicon_tpot_ms"))


def read_rows(path: str | Path) -> list[SiliconRow]:
    """Every row of a silicon-sample CSV, in file order.

    Raises:
        EpsimError: unreadable file, a missing column, or a malformed cell (one line naming the
            file, the row and the column).
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in _REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise EpsimError(f"--silicon ({path}) must be a silicon-sample CSV; it lacks the "
                                 f"column(s) {', '.join(missing)}")
            return with_peers([parse_row(record, f"{path}:{i + 2}")
                               for i, record in enumerate(reader)])
    except OSError as exc:
        raise EpsimError(f"--silicon ({path}) must be a readable CSV file: "
                         f"{exc.strerror or type(exc).__name__}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise EpsimError(f"--silicon ({path}) must be a UTF-8 CSV file: {exc}") from None


def with_peers(rows: list[SiliconRow]) -> list[SiliconRow]:
    """`rows` with `peers` set: each row's other rows of its `config_id` (none without one)."""
    by_config: dict[str, list[SiliconRow]] = {}
    for row in rows:
        if row.config_id is not None:
            by_config.setdefault(row.config_id, []).append(replace(row, peers=()))
    return [replace(row, peers=tuple(p for p in by_config[row.config_id] if p.id != row.id))
            if row.config_id is not None else row for row in rows]


def out_of_scope(row: SiliconRow) -> str | None:
    """Why a row is out of scope, or None when it is in."""
    if row.backend not in IN_SCOPE_BACKENDS:
        return f"backend {row.backend} (its scheduler and kernels are not modelled)"
    if row.model_path not in IN_SCOPE_MODELS:
        return f"model {row.model_path} (not in the zoo)"
    return None


def sample(rows: list[SiliconRow], num: int | None, seed: int) -> list[SiliconRow]:
    """`num` rows drawn without replacement by `seed`, kept in file order (all when None)."""
    if num is None or num >= len(rows):
        return list(rows)
    import numpy as np
    keep = np.sort(np.random.default_rng(seed).choice(len(rows), size=num, replace=False))
    return [rows[i] for i in keep.tolist()]
