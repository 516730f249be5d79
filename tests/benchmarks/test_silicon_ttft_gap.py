"""benchmarks/silicon_ttft_gap.py: the harness each row's source names, a group's figures on a
small exact case, and its recorded result regenerating from the whole-set record (all but the
header line, which names the machine)."""

from __future__ import annotations

import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.benchmarks.regenerate import assert_body_regenerates  # noqa: E402

import silicon_ttft_gap as gap  # noqa: E402


def test_harness_reads_the_source_and_the_warmup_date():
    agg, pd = {"mode": "agg"}, {"mode": "disagg"}
    dated = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4; measured="
    assert gap.harness(agg, dated + "2026-03-25T10:00:00Z") == (
        "InferenceX one node, 10N after 2N warm-ups of one prompt")
    assert gap.harness(agg, dated + "2025-11-10T10:00:00Z") == (
        "InferenceX one node, no warm-up (before 2026-01-21)")
    assert gap.harness(pd, "db-dump/2026-02-07; config_id=434; silicon_concurrency=4") == (
        "Dynamo P/D, 5N after a warm-up run")
    assert gap.harness(agg, "source_file=/Users/x/Qwen.csv; silicon_concurrency=4").startswith(
        "not known")


def test_server_prompt_reads_the_inflated_prompt_from_the_assumptions():
    inflated = {"version": "0.5.10.post1", "isl": 1024, "epsim": {"assumptions": [
        "prompts as the server tokenized them: ISL 1024 x 5.03 = 5152 (InferenceX's client ...)"]}}
    plain = {"version": "0.5.9", "isl": 8192, "epsim": {"assumptions": ["ISL/OSL uniform"]}}
    assert gap.server_prompt(inflated) == "0.5.10.post1, ISL 1024 -> 5152 tokens"
    assert gap.server_prompt(plain) == "0.5.9, ISL 8192 -> 8192 tokens"
    assert gap.server_prompt({**plain, "version": ""}).startswith("not stated, ")


def test_group_table_on_three_runs():
    def run(measured, predicted, k):
        return {"system": "h200_sxm", "measured_ttft_ms": measured, "predicted_ttft_ms": predicted,
                "gap_ms": measured - predicted, "run_k": k}
    rows = [run(300.0, 100.0, 10), run(200.0, 100.0, 10), run(110.0, 100.0, None)]
    line = gap.group_table(rows, "system", "t").splitlines()[-1]
    # gaps 200, 100, 10: median 100, quartiles at ranks 0 and 2; MAPE (2/3 + 1/2 + 1/11) / 3 =
    # 42 %; gap x K over the two runs with K: 2.0 and 1.0 s, median 1.5
    assert line == "| h200_sxm | 3 | 100 (10, 200) | 200 | 100 | 42 | 1.50 |"


def test_pd_steps_on_three_runs():
    def run(system, gap_ms, tpot_ms, mode="disagg"):
        return {"system": system, "mode": mode, "gap_ms": gap_ms, "measured": {"tpot_ms": tpot_ms}}
    # a gap that is a steady 20 steps grows with the step: ranks agree, correlation +1
    rows = [run("gb200", 200.0, 10.0), run("gb200", 100.0, 5.0), run("gb300", 160.0, 8.0),
            run("gb300", 999.0, 1.0, mode="agg")]
    lines = gap.pd_steps(rows).splitlines()
    assert lines[4] == "| gb200 | 2 | 7.5 | 150 | 20.0 |"
    assert lines[5] == "| gb300 | 1 | 8.0 | 160 | 20.0 |"
    assert lines[-1].endswith("over the 3 runs: +1.00.")
    assert gap.rank_correlation([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == -1.0


def test_recorded_result_regenerates(tmp_path):
    assert_body_regenerates("silicon_ttft_gap.py", "silicon_ttft_gap.md", tmp_path)
