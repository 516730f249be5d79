"""Which silicon rows carry the first-use compile term, with which warm-up, and that its compile
times are the committed records'."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from epsim.validate.silicon.first_use import (COMPILE_S, FMHA_BUILD_S, first_use_compile, note,
                                              scenario_field)

RECORDS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "first_use_compile"
RECORD = RECORDS / "aot_vm_records.jsonl"
NVCC_RECORD = RECORDS / "nvcc_vm_records.jsonl"


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
    ("backend", "trtllm"), ("system", "b300_sxm"), ("gemm_quant_mode", "nvfp4"),
    ("mode", "disagg"), ("model_path", "Qwen/Qwen3-235B-A22B-FP8")])
def test_rows_without_sglangs_triton_fused_moe_or_the_fmha_build_carry_no_term(field, value):
    assert first_use_compile(_row(**{field: value})) is None


def test_the_compile_time_is_the_records_median_of_the_prefill_keys():
    records = [json.loads(line) for line in RECORD.read_text().splitlines()]
    prefill = [r["cpu_s"] for r in records if r["tiles"][0] == 64]       # BLOCK_M 64 keys
    assert len(prefill) == 16
    assert COMPILE_S == pytest.approx(statistics.median(prefill), abs=0.005)


def _b200(**fields):
    base = {"system": "b200_sxm", "gemm_quant_mode": "nvfp4", "precision": "fp4", "isl": 8192,
            "osl": 1024, "agg": SimpleNamespace(num_gpus=4, moe_ep_size=1),
            "source": "db-dump/2026-04-27; measured=2025-11-10T00:00:00.000Z"}
    return _row(**{**base, **fields})


def test_a_b200_row_of_the_v0_5_5_image_builds_the_fmha_module_with_no_warm_up():
    compiles = first_use_compile(_b200())
    assert compiles["kernel"] == "flashinfer_cutlass_fmha" and compiles["warmup_batches"] == []
    assert compiles["image"] == "lmsysorg/sglang:v0.5.5-cu129-amd64"
    assert compiles["compile_s"] == FMHA_BUILD_S
    assert "image" not in scenario_field(compiles)
    assert "with no warm-up" in note(compiles) and "CUTLASS FMHA" in note(compiles)


def test_a_b200_row_of_a_later_image_carries_no_term():
    # measured 2026-03-25 under InferenceX 12ba0ae07's lmsysorg/sglang:v0.5.9-cu130
    later = _b200(agg=SimpleNamespace(num_gpus=4, moe_ep_size=4),
                  source="db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z")
    assert first_use_compile(later) is None


def test_the_fmha_build_time_is_the_records_slowest_source():
    records = [json.loads(line) for line in NVCC_RECORD.read_text().splitlines()]
    assert {r["source"] for r in records} == {"fmha_cutlass_sm100.cu",
                                              "fmha_cutlass_sm100_binding.cu",
                                              "blackwell_fmha_plan.cu"}
    assert FMHA_BUILD_S == pytest.approx(max(r["cpu_s"] for r in records), abs=0.5)
