"""Which silicon rows carry the first-use compile term, with which warm-up, and that its compile
time is the committed record's."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from epsim.validate.silicon.first_use import COMPILE_S, first_use_compile, note

RECORD = (Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "first_use_compile"
          / "aot_vm_records.jsonl")


def _row(**fields):
    base = {"backend": "sglang", "mode": "agg", "system": "h200_sxm", "gemm_quant_mode": "fp8",
            "model_path": "deepseek-ai/DeepSeek-V3", "concurrency": 4,
            "source": "db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z"}
    return SimpleNamespace(**{**base, **fields})


def test_an_h200_fp8_sglang_agg_row_after_the_warm_up_landed_warms_up_twice_n():
    compiles = first_use_compile(_row(concurrency=8))
    assert compiles == {"compile_s": COMPILE_S, "warmup_batches": [8, 8]}
    assert "2 prefill batches of 8 copies" in note(compiles)


def test_a_row_from_before_the_warm_up_met_only_the_start_up():
    compiles = first_use_compile(_row(source="x; measured=2025-11-10T00:00:00.000Z"))
    assert compiles["warmup_batches"] == []
    assert "with no warm-up" in note(compiles)


@pytest.mark.parametrize("field, value", [
    ("backend", "trtllm"), ("system", "b200_sxm"), ("gemm_quant_mode", "nvfp4"),
    ("mode", "disagg"), ("model_path", "Qwen/Qwen3-235B-A22B-FP8")])
def test_rows_without_sglangs_triton_fused_moe_carry_no_term(field, value):
    assert first_use_compile(_row(**{field: value})) is None


def test_the_compile_time_is_the_records_median_of_the_prefill_keys():
    records = [json.loads(line) for line in RECORD.read_text().splitlines()]
    prefill = [r["cpu_s"] for r in records if r["tiles"][0] == 64]       # BLOCK_M 64 keys
    assert len(prefill) == 16
    assert COMPILE_S == pytest.approx(statistics.median(prefill), abs=0.005)
