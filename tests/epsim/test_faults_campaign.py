"""The second campaign (issue #42): valid extremes and faults. Legal scenarios at the edges of
every axis run or are refused up front, and leave complete results (`extremes_cases.py`); full
disks, signals at random moments, dead workers, torn and tampered caches, edited referenced
files and shared results directories leave 0 tracebacks, 0 hangs, 0 stale answers, 0 lost
files, and every interrupted run complete or marked incomplete (`faults_campaign.py`).

CI runs a subset of each (`slow`: a minute or two each on 2 cores; the README's
`python -m pytest -q` runs them). The whole campaigns take longer than CI should and are
commands, their counts recorded in docs/bad_input.md:

    python -m tests.epsim.bad_input_runner --campaign --cases tests.epsim.extremes_cases
    python -m tests.epsim.faults_campaign --full --seed 1
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.epsim import faults_campaign
from tests.epsim.bad_input_runner import FAILURES, run_campaign, summary


def _extremes(tmp_path, cases: str) -> None:
    results = run_campaign(tmp_path, num_workers=2, cases_module=cases)
    print(summary(results))
    failed = [r for r in results if r["outcome"] in FAILURES]
    assert not failed, "\n".join(f"{r['outcome']}: {r['name']}: {r['error']} {r.get('traceback') or ''}"
                                 for r in failed[:20])
    outcomes = Counter(r["outcome"] for r in results)
    assert outcomes["refused"] >= 4 and outcomes["accepted"] >= 10, outcomes


@pytest.mark.slow
def test_valid_extremes_subset(tmp_path):
    _extremes(tmp_path, "tests.epsim.extremes_cases:ci_cases")


@pytest.mark.slow
def test_faults_subset(tmp_path):
    campaign = faults_campaign.run(tmp_path, full=False)
    print(faults_campaign.report(campaign))
    assert not campaign.problems, faults_campaign.report(campaign)
    assert sum(campaign.cases.values()) >= 15
