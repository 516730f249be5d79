"""benchmarks/sim_speed.py and its parts (`benchmarks/sim_speed_*.py`): `--against`'s worker
processes that take turns, the instruction counts, the stage timing, the block table, the
speculation depths and the command line."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _part(name: str):
    """`benchmarks/sim_speed_NAME.py`, imported as the script imports it (its folder on the path;
    appended, so it shadows nothing)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    return importlib.import_module(f"sim_speed_{name}")


def test_against_times_both_checkouts_run_by_run():
    scenario = ROOT / "scenarios" / "qwen235b_pd_fleet.yaml"          # a short run
    rows = _part("checkouts").against_rows({"then": ROOT, "now": ROOT}, [scenario], rounds=2)
    assert len(rows) == 1
    cells = [c.strip().strip("*`") for c in rows[0].strip("|").split("|")]
    name, steps, then_us, now_us, then_speed, now_speed, ratio = cells
    assert name == scenario.stem and int(steps) > 0
    assert all(float(x) > 0 for x in (then_us, now_us, then_speed, now_speed, ratio))
    assert re.fullmatch(r"\d+\.\d\d", ratio)


def test_bad_arguments_stop_before_any_timing(tmp_path):
    """A wrong `--against`, `--repeats`, `--instructions` or `--speculation` is named on one
    line, exit 2, before minutes of runs."""
    for args, field in ((["--against", str(tmp_path)], "--against"), (["--repeats", "0"], "--repeats"),
                        (["--instructions"], "--instructions"),
                        (["--speculation", "no_such_scenario"], "--speculation")):
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_speed.py"), *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1].startswith(f"sim_speed.py: error: {field} (")
        assert not done.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_instruction_counts_of_one_checkout_against_itself_agree():
    """`--instructions` counts one warm run per checkout under callgrind (counting switched on
    for that run only): the same checkout twice gives the same count to well under a percent
    (80,150,408 and 80,150,928 of 17 steps on this machine), so a ratio away from 1 is the
    code's doing."""
    scenario = ROOT / "scenarios" / "qwen235b_pd_fleet.yaml"          # a short run
    rows = _part("checkouts").instruction_rows({"then": ROOT, "now": ROOT}, [scenario])
    name, steps, then_k, now_k, ratio = [c.strip().strip("*`") for c in rows[0].strip("|").split("|")]
    assert name == scenario.stem and int(steps) > 0 and float(then_k) > 0
    assert abs(float(then_k) / float(now_k) - 1.0) < 0.003 and ratio == "1.00"


def test_a_neighbouring_batch_shape_moves_the_moe_time_beyond_the_draws_spread():
    """The recorded reason an unsaturated step prices its own pool: the MoE time at the batch
    a few steps later differs from the step's own by more than the draw-to-draw spread."""
    rows = _part("stages").shape_effect_rows()
    ratios = [float(r.strip("|").split("|")[-1]) for r in rows]
    assert len(rows) >= 8 and sum(r > 1.0 for r in ratios) > len(rows) / 2


def test_speculation_depths_match_a_step_by_step_count():
    """`--speculation`: from each step, the steps until an arrival falls between a guessed step
    start (each step as long as the one before the first) and the actual one, as a plain loop
    over steps counts them; the same seed gives the same depths."""
    from epsim.sim import simulate
    from epsim.spec import load_scenario
    speculation = _part("speculation")
    name = "qwen30b_ep_backend"                     # a short run with arrivals
    depths = speculation.speculation_depths(name)
    result = simulate(load_scenario(ROOT / "scenarios" / f"{name}.yaml"), engine="fast")
    start = result.steps["start_us"] * 1e-6
    step = result.steps["step_us"] * 1e-6
    arrivals = [t for t, initial in zip(result.arrival_s, result.is_initial) if not initial]
    cap = speculation.SPECULATION_CAP
    expected = []
    for k in range(1, len(start) - cap):
        held = 0
        while held < cap:
            guessed, actual = start[k] + (held + 1) * step[k - 1], start[k + held + 1]
            lo, hi = min(guessed, actual), max(guessed, actual)
            if any(lo < t <= hi for t in arrivals):
                break
            held += 1
        expected.append(held)
    assert depths.tolist() == expected
    assert 0 < depths.mean() < cap and depths.min() < depths.max()     # neither trivial end
    assert np.array_equal(speculation.speculation_depths(name), depths)


def test_stage_times_add_up_within_the_run_and_leave_the_engine_as_it_was():
    """The recorded stage breakdown: every stage is timed in a run with EPLB on, none inside
    another (`stage_times` stops if one is), so they add up to less than the whole run, and
    the timers are gone after."""
    stages = _part("stages")
    wall_s, steps, sim_s, spent = stages.stage_times("redundant_experts", repeats=1)
    assert steps > 0 and sim_s > 0 and len(spent) == len(stages.STAGES)
    assert all(t > 0 for t in spent) and sum(spent) < wall_s
    for _, module, owner, attr in stages.STAGES:
        function = getattr(getattr(importlib.import_module(module), owner), attr)
        assert function.__qualname__ == f"{owner}.{attr}"


def test_a_stage_inside_another_stops_the_timing_and_the_timers_still_go():
    nested = (("a step priced", "epsim.sim.stepper", "PoolStepper", "price"),
              ("its non-MoE part", "epsim.cost.model", "CostModel", "step"))
    with pytest.raises(RuntimeError, match="stage step runs inside stage price"):
        _part("stages").stage_times("qwen30b_ep_backend", repeats=1, stages=nested)
    for _, module, owner, attr in nested:
        function = getattr(getattr(importlib.import_module(module), owner), attr)
        assert function.__qualname__ == f"{owner}.{attr}"


def test_block_rows_time_each_block_size_once_per_row_and_give_the_least_per_draw():
    stages = _part("stages")
    rows, least_us = stages.block_rows("qwen30b_ep_backend", calls=2)
    cells = [[float(c) for c in r.strip("|").split("|")] for r in rows]
    assert [int(c[0]) for c in cells] == list(stages.BLOCK_DRAWS)
    assert all(c[1] > 0 and abs(c[2] - c[1] / c[0]) <= 1 for c in cells)   # per draw = per call / n
    assert cells[0][3] == 1.0
    assert all(c[4] > 0 and abs(c[5] - (c[2] + c[4])) <= 1 for c in cells)  # both = priced + drawn
    assert abs(least_us - min(c[5] for c in cells)) <= 0.5
