"""One set of serving numbers (`epsim.report.serving`): offered, served and finished defined once
and the same in `summary.json`, the CLI summary and the plan's columns; "saturated by design"
said one way by the run's verdict and the scenario scripts; the EPLB caution."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import epsim
from epsim.plan.columns import summary_metrics
from epsim.commands.scripting import margin_and_share
from epsim.report import summarize
from epsim.report.cautions import eplb_stale
from epsim.report.serving import DEFINITIONS, SATURATED_BY_DESIGN
from epsim.sim import simulate

ROOT = Path(__file__).resolve().parents[2]
SHORT = {"workload.duration_s": 3.0, "workload.warmup_s": 1.0}


@pytest.fixture(scope="module")
def default_summary():
    return summarize(simulate(epsim.load_scenario(ROOT / "scenarios" / "default.yaml", SHORT)))


def test_summary_defines_offered_served_finished_once(default_summary):
    s = default_summary
    serving = s["serving"]
    assert serving["definitions"] == DEFINITIONS
    assert serving["offered_rps"] == s["keep_up"]["offered_rps"]
    assert serving["served_rps"] == s["keep_up"]["served_rps"]
    window_s = s["sim_seconds"] - s["warmup_s"]
    assert serving["finished_rps"] == s["requests_per_s"] == s["num_requests"]["finished"] / window_s
    # a short window: most requests are still in service, so finished is far below served --
    # which the summary must not present as a capacity
    assert serving["finished_rps"] < 0.8 * serving["served_rps"]
    row = summary_metrics(s)
    assert row["keep_up.served_rps"] == serving["served_rps"] and row["requests_per_s"] == serving["finished_rps"]


def test_cli_prints_the_three_numbers_with_their_words(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "epsim.cli", "simulate", str(ROOT / "scenarios" / "default.yaml"),
                           "--set", "workload.duration_s=3", "--set", "workload.warmup_s=1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    text = subprocess.run([sys.executable, "-m", "epsim.cli", "simulate", str(ROOT / "scenarios" / "default.yaml"),
                           "--set", "workload.duration_s=3", "--set", "workload.warmup_s=1", "--no-progress"],
                          capture_output=True, text=True, timeout=300).stdout
    line = next(x for x in text.splitlines() if x.startswith("requests"))
    s = data["serving"]
    from epsim.text import brief
    for word, key in (("offered", "offered_rps"), ("served", "served_rps"), ("finished", "finished_rps")):
        assert f"{word} {brief(s[key], 3)}/s" in line
    assert "the window bounds finished, not capacity" in line
    assert "keeps up" in text and f"serves {brief(s['served_rps'], 3)} of" in text


def test_saturated_by_design_is_one_phrase():
    scenario = epsim.load_scenario(ROOT / "scenarios" / "qwen30b_ep_backend.yaml",
                                   {"workload.duration_s": 1.0, "workload.warmup_s": 0.3})
    s = summarize(simulate(scenario))
    keep = s["keep_up"]
    assert keep["saturated_by_design"] and not keep["ok"]
    assert keep["verdict"].startswith(f"{SATURATED_BY_DESIGN}, full batches (serves ")
    assert "overloaded" not in keep["verdict"]
    # the scripts' answers use the same words, from the same function
    row = summary_metrics(s)
    script = margin_and_share(row, saturated=True)
    assert script.startswith(f"keep-up: {keep['verdict']}")


def test_a_run_that_keeps_up_is_not_saturated(default_summary):
    assert default_summary["keep_up"]["ok"] and not default_summary["keep_up"]["saturated_by_design"]


def test_eplb_on_without_a_rebalance_and_high_imbalance_is_cautioned():
    scenario = epsim.load_scenario(ROOT / "scenarios" / "eplb_interval_drift.yaml",
                                   {"workload.duration_s": 3.0, "workload.warmup_s": 1.0})
    s = summarize(simulate(scenario))
    assert s["eplb"]["num_rebalances"] == 0 and s["imbalance_max_over_mean"] > 2
    text = eplb_stale(s)
    assert text.startswith("EPLB is on but no rebalance fell in the measurement window")
    assert "init_expert_location: from_skew" in text
    settled = summarize(simulate(epsim.load_scenario(
        ROOT / "scenarios" / "eplb_interval_drift.yaml",
        {"workload.duration_s": 3.0, "workload.warmup_s": 1.0, "deployment.init_expert_location": "from_skew"})))
    assert settled["imbalance_max_over_mean"] < s["imbalance_max_over_mean"]
    assert eplb_stale(settled) is None or "(from_skew)" in eplb_stale(settled)
