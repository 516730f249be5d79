"""Every shipped scenario gives the recorded results, bit for bit, on both engines
(`benchmarks/scenario_hashes.py`): a change that moves a number must re-record the table and
say why in its commit."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks import load_script


def _module():
    return load_script("scenario_hashes")


@pytest.mark.slow
def test_every_shipped_scenario_hashes_as_recorded():
    hashes = _module()
    recorded = json.loads(hashes.RESULT.read_text())
    assert sorted(recorded) == [p.name for p in hashes.scenario_paths()], \
        "a scenario was added or removed: re-record with benchmarks/scenario_hashes.py --write"
    assert hashes.table() == recorded
