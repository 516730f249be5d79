"""The named gaps of the silicon scoreboard: a gap names a row from what the row states, never from
its measured latencies, and the tables put each gap's rows' errors beside the rest's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from epsim.validate.silicon import gaps, report
from epsim.validate.silicon.resolve import resolve
from epsim.validate.silicon.rows import read_rows

FIXTURE = Path(__file__).resolve().parent / "data" / "silicon_fixture.csv"


def _row(id_prefix: str):
    return next(r for r in read_rows(FIXTURE) if r.id.startswith(id_prefix))


def _named(row) -> list[str]:
    return gaps.named(row, resolve(row))


def test_a_gaps_rule_cannot_see_the_measured_latencies():
    assert not {f.name for f in dataclasses.fields(gaps.Facts)} & {"ttft_ms", "tpot_ms", "measured"}
    row = _row("2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632")
    moved = dataclasses.replace(row, ttft_ms=row.ttft_ms * 7, tpot_ms=row.tpot_ms / 3)
    assert _named(moved) == _named(row)


@pytest.mark.parametrize(("prefix", "expected"), [
    # filed as agg, ran as InferenceX's 2025 P/D group (DEP48 decode): the harness warmed it up
    ("2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632",
     ["P/D TTFT under load", "2025 GB200 wide-EP decode", "R1's expert loads"]),
    ("dsr1_gb200_sglang_fp4_disagg_1024x1024_c8192_cfg483", ["P/D TTFT under load", "R1's expert loads"]),
    ("2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c8_tp8", ["few-client floor"]),
    ("qwen_qwen3_235b_a22b_fp8", ["few-client floor", "Qwen3-235B H200 step"]),
    ("dsr1_b300_sglang_fp4_agg_8192x1024_c16_cfg717", []),
])
def test_rows_get_the_gaps_their_facts_name(prefix, expected):
    assert _named(_row(prefix)) == expected


def test_an_agg_run_before_the_harness_warmed_up_is_a_cold_first_wave():
    row = _row("2026_03_25_deepseek_r1_b200_sxm_sglang_fp4_agg_1024x1024_c8_tp8")
    cold = dataclasses.replace(row, source=row.source.replace("measured=2026-03-25", "measured=2025-11-10"))
    assert _named(cold) == ["cold first wave", "few-client floor"]


def _entry(system: str, tpot_err: float, ttft_err: float, named: list[str]) -> dict:
    return {"bucket": {"system": system, "mode": "agg", "model": "DeepSeek-R1", "ep": "EP 1"},
            "gaps": named, "measured": {"tpot_ms": 10.0, "ttft_ms": 100.0},
            "epsim": {"status": "predicted", "tpot_ms": 10.0 * (1 + tpot_err), "ttft_ms": 100.0 * (1 + ttft_err)}}


def test_gaps_table_puts_each_gaps_rows_beside_the_rest_and_shares_the_error():
    entries = [_entry("b200_sxm", 0.30, -0.50, ["few-client floor"]),
               _entry("b200_sxm", 0.10, -0.10, ["few-client floor", "cold first wave"]),
               _entry("h200_sxm", -0.02, 0.05, [])]
    lines = report.gaps_table(entries)
    floor = next(line for line in lines if line.startswith("| few-client floor |"))
    cells = [c.strip() for c in floor.strip("|").split("|")]
    # its rows: TPOT 30 and 10 % -> 20.0; the rest: 2 %; TTFT 50, 10 -> 30.0 / 5.0
    assert cells[3:8] == ["2", "20.0 / 2.0", "30.0 / 5.0", f"{100 * 40 / 42:.0f}", f"{100 * 60 / 65:.0f}"]
    none = next(line for line in lines if line.startswith(f"| ({report.NONE_NAMED}) |"))
    assert [c.strip() for c in none.strip("|").split("|")][3] == "1"


def test_targets_table_lists_only_buckets_above_a_target_with_their_gaps():
    entries = [_entry("b200_sxm", 0.05, -0.50, ["few-client floor"]),
               _entry("b200_sxm", 0.05, -0.10, []),
               _entry("h200_sxm", 0.02, 0.05, []),            # within both targets: not listed
               _entry("gb200", 0.25, 0.0, [])]                # above the TPOT target, nothing named
    text = "\n".join(report.targets_table(entries))
    assert "h200_sxm" not in text
    assert "| b200_sxm | agg | DeepSeek-R1 | EP 1 | 2 | 5.0 | 30.0 | few-client floor (1) |" in text
    assert f"| gb200 | agg | DeepSeek-R1 | EP 1 | 1 | 25.0 | 0.0 | {report.NONE_NAMED} |" in text


def test_a_run_with_the_mtp_draft_carries_the_mtp_gap():
    row = _row("dsr1_gb300_sglang_fp4_disagg_8192x1024_c4_cfg569")
    ran = resolve(row)
    assert ran.error is None and gaps.named(row, ran) == ["few-client floor"]
    assert gaps.named(row, dataclasses.replace(ran, speculative=True)) == [
        "few-client floor", "MTP verify and acceptance"]
    # a row whose draft is not known (MTP and non-MTP groups fit it) is not named by it
    unknown = _row("dsr1_h200_sglang_fp8_disagg_8192x1024_c256_cfg434")
    assert resolve(unknown).error is not None
    assert "MTP verify and acceptance" not in gaps.named(unknown, dataclasses.replace(
        resolve(unknown), speculative=True))


def test_the_cli_names_the_gaps_carrying_most_error():
    entries = [_entry("b200_sxm", 0.30, -0.50, ["few-client floor"]),
               _entry("b200_sxm", 0.10, -0.10, ["few-client floor", "cold first wave"]),
               _entry("h200_sxm", -0.02, 0.05, [])]
    assert report.gap_lines(entries) == [
        f"most TPOT error on named gaps: few-client floor (2 rows, {100 * 40 / 42:.0f} %); "
        f"cold first wave (1 rows, {100 * 10 / 42:.0f} %)",
        f"most TTFT error on named gaps: few-client floor (2 rows, {100 * 60 / 65:.0f} %); "
        f"cold first wave (1 rows, {100 * 10 / 65:.0f} %)"]
    assert report.gap_lines([_entry("h200_sxm", 0.1, 0.1, [])]) == []
