"""Which silicon rows carry the first-use compile term, with which warm-up, and that its compile
times are the committed records'."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from epsim.validate.silicon.rows import measured_time
from epsim.validate.silicon.first_use import (ALLOC_DECODE_COMPILE_S, ALLOC_EXTEND_COMPILE_S,
                                              ALLOC_0510_DECODE_COMPILE_S,
                                              ALLOC_0510_EXTEND_COMPILE_S, COMPILE_S,
                                              FMHA_BUILD_S, SPEC_COMPILE_S,
                                              alloc_extend_compile_s,
                                              first_use_compile, note, scenario_field)

RECORDS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "first_use_compile"
RECORD = RECORDS / "aot_vm_records.jsonl"
NVCC_RECORD = RECORDS / "nvcc_vm_records.jsonl"
ALLOC_RECORD = RECORDS / "alloc_aot_vm_records.jsonl"
SPEC_RECORD = RECORDS / "spec_aot_vm_records.jsonl"
ALLOC_0510_RECORD = RECORDS / "alloc_0510_aot_vm_records.jsonl"


def _row(**fields):
    base = {"backend": "sglang", "mode": "agg", "system": "h200_sxm", "gemm_quant_mode": "fp8",
            "model_path": "deepseek-ai/DeepSeek-V3", "concurrency": 4,
            "source": "db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z"}
    row = {**base, **fields}
    return SimpleNamespace(**row, measured_at=measured_time(row["source"]))


def test_an_h200_fp8_sglang_agg_row_after_the_warm_up_landed_warms_up_twice_n():
    compiles = first_use_compile(_row(concurrency=8))
    assert compiles == {"compile_s": COMPILE_S, "warmup_batches": [8, 8]}
    assert "2 prefill batches of 8 copies" in note(compiles)


def test_a_row_from_before_the_warm_up_met_only_the_start_up():
    compiles = first_use_compile(_row(source="x; measured=2025-11-10T00:00:00.000Z"))
    assert compiles["warmup_batches"] == []
    assert "with no warm-up" in note(compiles)


@pytest.mark.parametrize("field, value", [
    ("backend", "trtllm"), ("system", "gb200"), ("gemm_quant_mode", "nvfp4"),
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
    # its allocator is 0.5.9's: the first wave's 4 x 8192 tokens reach the 16384-token chunk
    assert compiles["page_size"] == 64
    assert compiles["alloc_compile_s"] == ALLOC_EXTEND_COMPILE_S[16384]
    assert compiles["decode_compile_s"] == ALLOC_DECODE_COMPILE_S
    assert "paged KV allocator" in note(compiles) and "a proxy" in note(compiles)


def test_a_b200_row_of_a_later_image_carries_the_paged_allocators_compiles():
    # measured 2026-03-25 under InferenceX 12ba0ae07's lmsysorg/sglang:v0.5.9-cu130, after the
    # warm-up; 4 x 8192 tokens reach the script's 16384-token chunk
    later = _b200(agg=SimpleNamespace(num_gpus=4, moe_ep_size=4),
                  source="db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z")
    compiles = first_use_compile(later)
    assert compiles == {"kernel": "sglang_paged_alloc", "page_size": 64,
                        "compile_s": ALLOC_EXTEND_COMPILE_S[16384],
                        "decode_compile_s": ALLOC_DECODE_COMPILE_S, "warmup_batches": [4, 4]}
    assert "paged KV allocator" in note(compiles) and "2 prefill batches of 4" in note(compiles)


def test_a_b200_row_that_ran_mtp_adds_the_eagle_kernels():
    # InferenceX 12ba0ae07 swept dsr1-fp8-b200-sglang-mtp (TP 8) at 1024/8192 and 64 clients
    later = _b200(gemm_quant_mode="fp8", precision="fp8", isl=1024, osl=8192, concurrency=64,
                  agg=SimpleNamespace(num_gpus=8, moe_ep_size=1),
                  source="db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z")
    compiles = first_use_compile(later, speculative=True)
    assert compiles["spec_compile_s"] == SPEC_COMPILE_S and compiles["warmup_batches"] == [64, 64]
    assert "EAGLE v1 kernels" in note(compiles)
    without = first_use_compile(later)
    assert without is None or "EAGLE" not in note(without)


def test_the_eagle_kernels_compile_times_are_the_records_medians():
    records = [json.loads(line) for line in SPEC_RECORD.read_text().splitlines()]
    assert {r["triton"] for r in records} == {"3.5.1"} and {r["target"] for r in records} == {
        "cuda:100"}
    assert set(SPEC_COMPILE_S) == {r["kernel"] for r in records}
    for kernel, compile_s in SPEC_COMPILE_S.items():
        times = [r["cpu_s"] for r in records if r["kernel"] == kernel and r["order"] > 0]
        assert len(times) >= 9
        assert compile_s == pytest.approx(statistics.median(times), abs=0.001)


def test_a_b200_row_of_an_image_without_the_extend_constexpr_carries_no_term(monkeypatch):
    # sgl-project/sglang#19898 (0.5.10) keys the extend kernel on the batch alone: not priced
    from epsim.validate.silicon import agg_recipes
    monkeypatch.setattr(agg_recipes, "image_of", lambda found: "lmsysorg/sglang:v0.5.10-cu130")
    later = _b200(agg=SimpleNamespace(num_gpus=4, moe_ep_size=4),
                  source="db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z")
    assert first_use_compile(later) is None


@pytest.mark.parametrize("clients, isl, chunk, tokens", [
    (4, 1024, 16384, 4096), (2, 1024, 16384, 4096), (8, 1024, 16384, 8192),
    (64, 1024, 16384, 16384), (4, 8192, 32768, 32768), (128, 8192, 65536, 32768)])
def test_the_extend_compile_is_priced_at_the_warm_ups_largest_extend(clients, isl, chunk, tokens):
    assert alloc_extend_compile_s(clients, isl, chunk) == ALLOC_EXTEND_COMPILE_S[tokens]


def test_the_allocator_compile_times_are_the_records_medians():
    records = [json.loads(line) for line in ALLOC_RECORD.read_text().splitlines()]
    assert {r["triton"] for r in records} == {"3.5.1"} and {r["target"] for r in records} == {
        "cuda:100"}
    decode = [r["cpu_s"] for r in records if r["kernel"] == "alloc_decode_kernel"][1:]
    assert ALLOC_DECODE_COMPILE_S == pytest.approx(statistics.median(decode), abs=0.001)
    for tokens, compile_s in ALLOC_EXTEND_COMPILE_S.items():
        extend = [r["cpu_s"] for r in records if r.get("max_num_extend_tokens") == tokens]
        assert len(extend) == 16
        assert compile_s == pytest.approx(statistics.median(extend), abs=0.005)


def test_the_fmha_build_time_is_the_records_slowest_source():
    records = [json.loads(line) for line in NVCC_RECORD.read_text().splitlines()]
    assert {r["source"] for r in records} == {"fmha_cutlass_sm100.cu",
                                              "fmha_cutlass_sm100_binding.cu",
                                              "blackwell_fmha_plan.cu"}
    assert FMHA_BUILD_S == pytest.approx(max(r["cpu_s"] for r in records), abs=0.5)


def test_a_b300_row_of_0_5_10_post1_keys_its_extend_on_the_batch_alone(monkeypatch):
    from epsim.validate.silicon import agg_recipes
    monkeypatch.setattr(agg_recipes, "image_of",
                        lambda found: "lmsysorg/sglang:v0.5.10.post1-cu130")
    b300 = _b200(system="b300_sxm", gemm_quant_mode="fp8", precision="fp8", isl=1024, osl=1024,
                 agg=SimpleNamespace(num_gpus=8, moe_ep_size=1),
                 source="db-dump/2026-04-27; measured=2026-04-20T00:00:00.000Z")
    compiles = first_use_compile(b300)
    assert compiles is not None and compiles["extend_keys_tokens"] is False
    assert compiles["compile_s"] == ALLOC_0510_EXTEND_COMPILE_S
    assert compiles["decode_compile_s"] == ALLOC_0510_DECODE_COMPILE_S
    assert "extrapolated from sm100" in note(compiles)
    assert "proxy" not in scenario_field(compiles)


def test_the_0_5_10_allocator_compile_times_are_the_records_medians():
    records = [json.loads(line) for line in ALLOC_0510_RECORD.read_text().splitlines()]
    assert {r["triton"] for r in records} == {"3.5.1"} and {r["target"] for r in records} == {
        "cuda:100"}
    assert not any("max_num_extend_tokens" in r for r in records)
    extend = [r["cpu_s"] for r in records if r["kernel"] == "alloc_extend_kernel"]
    decode = [r["cpu_s"] for r in records if r["kernel"] == "alloc_decode_kernel"][1:]
    assert ALLOC_0510_EXTEND_COMPILE_S == pytest.approx(statistics.median(extend), abs=0.001)
    assert ALLOC_0510_DECODE_COMPILE_S == pytest.approx(statistics.median(decode), abs=0.001)
