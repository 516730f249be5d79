"""Legal scenarios at their edges: every one runs or is refused up front in one line. A run that
measured nothing says so in one line and writes complete, figure-safe results; every rank lost
at once is refused at load time; a plan point that measured nothing is never feasible. (The
generated campaign over every axis: test_faults_campaign.py.)"""

from __future__ import annotations

import copy

import pytest

from epsim.cli import main
from epsim.errors import SpecError
from epsim.spec import scenario_from_dict
from tests.epsim.bad_input_cases import SCENARIO
from tests.epsim.extremes_cases import complete_run


def _scenario(**changes) -> dict:
    data = copy.deepcopy(SCENARIO)
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        data[section][key] = value
    return data


@pytest.mark.parametrize("failures, recovery, at", [
    ([{"at_s": 0, "rank": 0, "recover_after_s": 1}], "reload", "1 of ep_size 1 ranks down at 0 s"),
    ([{"at_s": 0, "rank": 0}], "replicas", "1 of ep_size 1 ranks down at 0 s"),
])
def test_every_rank_lost_is_refused_at_load_time(failures, recovery, at):
    data = _scenario(deployment__ep_size=1, deployment__failures=failures,
                     deployment__elastic_recovery=recovery)
    with pytest.raises(SpecError, match=rf"deployment.failures \({at}\) must leave at least one "
                                        rf"rank serving at every moment"):
        scenario_from_dict(data)


def test_overlapping_outages_of_every_rank_are_refused_and_staggered_ones_run():
    both = [{"at_s": 0.0, "rank": 0, "recover_after_s": 0.1},
            {"at_s": 0.05, "rank": 1, "recover_after_s": 0.1}]
    with pytest.raises(SpecError, match=r"\(2 of ep_size 2 ranks down at 0.05 s\)"):
        scenario_from_dict(_scenario(deployment__failures=both, deployment__elastic_recovery="reload"))
    staggered = [dict(both[0]), {**both[1], "at_s": 0.1}]
    scenario_from_dict(_scenario(deployment__failures=staggered, deployment__elastic_recovery="reload"))


def test_yaml_null_is_the_null_disaggregation_mode():
    assert scenario_from_dict(_scenario(deployment__disaggregation_mode=None)).deployment \
        .disaggregation_mode == "null"


def test_a_run_that_measured_nothing_says_so_and_writes_complete_results(tmp_path, capsys):
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(workload__duration_s=0.02, workload__warmup_s=0.01)))
    assert main(["simulate", str(path), "--out", str(tmp_path / "out"), "--timeline",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: nothing measured")]
    assert notes == ["note: nothing measured: no step started in the 0.01-s measurement window "
                     "(warm-up 0.01 s of 0.02 s; 0 step(s) in all): lengthen workload.duration_s "
                     "or shorten workload.warmup_s; the summary holds what the run did"]
    assert complete_run(tmp_path) is None
    assert {p.name for p in (tmp_path / "out").glob("*.png")} == {
        "latency_cdf.png", "time_breakdown.png", "rank_load.png"}


def test_a_point_that_measured_nothing_is_never_feasible(tmp_path):
    import yaml

    from epsim.plan import run_plan
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(workload__duration_s=0.5)))
    result = run_plan(str(path), ["workload.warmup_s=0,0.499"], workers=1, progress=False,
                      plots=False, keep_up=False, require_feasible=False)
    measured, empty = result.rows
    assert measured["num_measured_steps"] > 0 and measured["feasible"] and measured["best"]
    assert empty["num_measured_steps"] == 0 and not empty["feasible"] and not empty["best"]
    from epsim.plan.choice import rejected
    assert rejected(result) == [(1, "nothing measured: no step started in its measurement window")]

