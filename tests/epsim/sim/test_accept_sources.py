"""The published acceptance a speculative run takes by its workload's prompt kind, the chain it
is held as, and where a run says it came from."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from epsim.errors import SpecError
from epsim.report import summarize
from epsim.report.table import format_table
from epsim.sim import simulate
from epsim.sim.accept_sources import (DEEPSEEK_ACCEPT_RATE, PR649_CHAT_MEAN, PR649_RAW_MEAN,
                                      PR649_STEPS, SOURCES, chain_mean, chain_rate)
from epsim.sim.speculative import Acceptance
from epsim.spec.scenario import scenario_from_dict
from epsim.spec.workload import WorkloadSpec
from tests.epsim.sim.test_engine import tiny_scenario


def test_chain_rate_inverts_chain_mean_and_caps_at_every_draft_accepted():
    for steps, mean in ((1, 1.5), (2, 2.18), (3, 2.5), (5, 4.0)):
        rate = chain_rate(mean, steps)
        assert 0.0 < rate < 1.0
        assert chain_mean(rate, steps) == pytest.approx(mean, rel=1e-12)
    assert chain_rate(3.0, 2) == 1.0 and chain_rate(1.0, 3) == pytest.approx(0.0, abs=1e-15)


def test_every_prompt_kind_has_one_source_holding_its_published_figure():
    kinds = typing.get_args(WorkloadSpec.model_fields["prompt_kind"].annotation)
    assert set(kinds) == set(SOURCES)
    assert SOURCES["natural"].rate == DEEPSEEK_ACCEPT_RATE
    # InferenceX #649's means come back at the depth they are read at
    assert chain_mean(SOURCES["random_chat"].rate, PR649_STEPS) == pytest.approx(PR649_CHAT_MEAN)
    assert chain_mean(SOURCES["random"].rate, PR649_STEPS) == pytest.approx(PR649_RAW_MEAN)
    # the raw-random mean needs the depth it is read at: 2 steps cap a mean at 3
    assert PR649_RAW_MEAN > 2 + 1 and PR649_RAW_MEAN <= PR649_STEPS + 1
    for kind in ("random_chat", "random"):     # a read-off rate says its value and depth
        assert f"a = {SOURCES[kind].rate:.3f}" in SOURCES[kind].text
        assert f"read at {PR649_STEPS} steps" in SOURCES[kind].text


def test_the_prompt_kind_sets_the_rate_and_a_stated_length_overrides_it():
    chat = Acceptance(2, None, seed=0, prompt_kind="random_chat")
    assert chat.rate == SOURCES["random_chat"].rate
    assert chat.mean == pytest.approx(chain_mean(chat.rate, 2))
    assert chat.source == SOURCES["random_chat"].text
    assert Acceptance(2, None, seed=0).rate == DEEPSEEK_ACCEPT_RATE        # natural by default
    stated = Acceptance(2, 2.18, seed=0, prompt_kind="random_chat")
    assert stated.mean == pytest.approx(2.18) and "stated" in stated.source


def test_natural_prompts_are_written_as_before_and_others_are_kept():
    assert "prompt_kind" not in WorkloadSpec().model_dump()
    assert WorkloadSpec(prompt_kind="random_chat").model_dump()["prompt_kind"] == "random_chat"
    scenario = tiny_scenario(workload={"prompt_kind": "random"})
    assert scenario.workload.prompt_kind == "random"


def test_an_unknown_prompt_kind_names_the_field():
    data = tiny_scenario().model_dump(mode="json")
    data["workload"]["prompt_kind"] = "sharegpt"
    with pytest.raises(SpecError, match=r"workload\.prompt_kind"):
        scenario_from_dict(data)


def test_a_run_measures_its_source_s_length_and_says_where_it_came_from():
    def run(kind):
        scenario = tiny_scenario(
            deployment={"disaggregation_mode": "decode", "speculative_algorithm": "NEXTN",
                        "speculative_num_steps": 2},
            workload={"arrivals": {"kind": "concurrency", "clients": 4},
                      "input_len": {"kind": "fixed", "value": 64},
                      "output_len": {"kind": "fixed", "value": 400}, "duration_s": 1.5,
                      "warmup_s": 0.0, "prompt_kind": kind})
        summary = summarize(simulate(scenario, seed=3))
        assert f"acceptance     {SOURCES[kind].text}" in format_table(summary).splitlines()
        return summary["bench_serving"]
    chat, natural = run("random_chat"), run("natural")
    assert chat["accept_source"] == SOURCES["random_chat"].text
    assert natural["accept_source"] == SOURCES["natural"].text
    # long outputs: the measured length sits near the chain's mean (a request's last verify
    # yields only what it still needs, so a little below)
    assert chat["accept_length"] == pytest.approx(chain_mean(SOURCES["random_chat"].rate, 2), rel=0.05)
    assert natural["accept_length"] == pytest.approx(chain_mean(DEEPSEEK_ACCEPT_RATE, 2), rel=0.05)


def test_the_cli_refuses_an_unknown_prompt_kind_in_one_line(tmp_path):
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-m", "epsim.cli", "simulate",
                           str(root / "scenarios" / "default.yaml"), "--set",
                           "workload.prompt_kind=bogus", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "workload.prompt_kind ('bogus') must be one of" in lines[0]
    assert not (tmp_path / "o").exists()
