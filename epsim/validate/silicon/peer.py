"""The peer on the same rows: AIConfigurator's own estimate (`aiconfigurator cli estimate`), run
in this process through its Python API (`aiconfigurator.cli.api.cli_estimate`), when installed.

Each row is given to it as its authors' regression harness gives it
(`tools/accuracy_regression_testing/predict_silicon_sample.py` in ai-dynamo/aiconfigurator): the
row's model, system, backend, ISL/OSL, quantization, and the parallelism, batch and worker
cells the row fills, nothing invented. The row's framework version is asked first; when the
peer's database does not serve that version, its default version is used and recorded. What it
refuses is kept with its message and a reason class.

Speed: the peer parses its database's YAML files on every call (~5 s a row here); its
`perf_database` module is given a `yaml` whose `safe_load` is libyaml's `CSafeLoader`, the same
documents parsed in C (~0.5-2 s a row). Its estimates are unchanged (a test compares both).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import re
import time
import types
from contextlib import redirect_stdout
from importlib.metadata import PackageNotFoundError, version as package_version

PACKAGE = "aiconfigurator"
FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size",
          "num_workers")
# (pattern in "<ExceptionType>: <message>", reason class), first match wins
REASON_CLASSES = (
    (r"batch_size is required for disagg|num_workers is required for disagg",
     "disagg row gives no batch sizes or workers (the peer needs them)"),
    (r"Cross-node EP requires DeepEP", "no cross-node DeepEP data in its database"),
    (r"PerfDataNotAvailable|no (compatible )?(exact )?.*data", "op data missing from its database"),
    (r"OOM|does not fit in GPU memory", "out of memory by its memory model"),
    (r"num_heads \d+ should be divisible by tp_size", "attention heads not divisible by TP"),
    (r"version", "framework version not in its database"),
)


def available() -> bool:
    """AIConfigurator is importable here (the `peer` extra)."""
    return importlib.util.find_spec(PACKAGE) is not None


def version() -> str | None:
    """The installed AIConfigurator's version."""
    try:
        return package_version(PACKAGE)
    except PackageNotFoundError:
        return None


_PREPARED = False


def _prepare() -> None:
    """Once per process: quiet its logging; its database YAML parsed by libyaml (module doc)."""
    global _PREPARED
    if _PREPARED:
        return

    import yaml
    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    if getattr(yaml, "__with_libyaml__", False):
        from aiconfigurator_core.sdk import perf_database
        fast = types.SimpleNamespace(**{k: getattr(yaml, k) for k in dir(yaml) if not k.startswith("__")})
        fast.safe_load = lambda stream: yaml.load(stream, Loader=yaml.CSafeLoader)
        perf_database.yaml = fast
    _PREPARED = True


def estimate_kwargs(row, backend_version: str | None) -> dict:
    """`cli_estimate` keyword arguments for a row (the cells the row fills, module doc)."""
    kwargs = dict(model_path=row.model_path, system_name=row.system, mode=row.mode,
                  backend_name=row.backend, backend_version=backend_version, isl=row.isl,
                  osl=row.osl, gemm_quant_mode=row.gemm_quant_mode or None,
                  moe_quant_mode=row.moe_quant_mode or None)
    sides = [("", row.agg)] if row.mode == "agg" else [("prefill_", row.prefill), ("decode_", row.decode)]
    for prefix, side in sides:
        for name in FIELDS:
            value = getattr(side, name)
            if value is not None and (prefix or name != "num_workers"):
                kwargs[prefix + name] = value
    return kwargs


def row_key(row) -> str:
    """What the peer is asked about a row, hashed (sha256 of its sorted JSON): the key of its
    cached answer (`epsim.validate.silicon.peer_cache`)."""
    asked = {"id": row.id, **estimate_kwargs(row, row.backend_version or None)}
    return hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()


def reason_class(message: str) -> str:
    """The class of a refusal (`REASON_CLASSES`), else its exception type."""
    for pattern, label in REASON_CLASSES:
        if re.search(pattern, message):
            return label
    return f"other: {message.split(':')[0]}"


def _call(row, backend_version: str | None):
    from aiconfigurator.cli.api import cli_estimate
    with redirect_stdout(io.StringIO()):
        return cli_estimate(**estimate_kwargs(row, backend_version))


def estimate(row) -> dict:
    """The peer's entry for a row: `{"status": "predicted" | "refused", "ttft_ms", "tpot_ms",
    "wall_s", "version_used", "reason", "reason_class", "notes"}`."""
    _prepare()
    start = time.perf_counter()
    entry = {"status": "refused", "ttft_ms": None, "tpot_ms": None, "version_used": None,
             "reason": None, "reason_class": None, "notes": []}
    try:
        try:
            result = _call(row, row.backend_version or None)
        except ValueError as exc:
            if not row.backend_version or not re.search(r"version|database", str(exc)):
                raise
            entry["notes"].append(f"version {row.backend_version} not served: its default used")
            result = _call(row, None)
        ttft, tpot = float(result.ttft), float(result.tpot)
        if not (ttft > 0 and tpot > 0 and ttft < float("inf") and tpot < float("inf")):
            raise ValueError(f"non-finite or non-positive estimate (ttft {ttft}, tpot {tpot})")
        entry.update(status="predicted", ttft_ms=round(ttft, 4), tpot_ms=round(tpot, 4),
                     version_used=result.backend_version)
        if result.kv_cache_warning:
            entry["notes"].append(" ".join(result.kv_cache_warning.split())[:200])
    except Exception as exc:  # noqa: BLE001 -- every refusal is a row of the table, with its class
        message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        entry.update(reason=message[:300], reason_class=reason_class(message))
    entry["wall_s"] = round(time.perf_counter() - start, 3)
    return entry
