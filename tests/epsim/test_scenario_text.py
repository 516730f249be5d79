"""`scenario_from_text`: scenario YAML from an upload or an editor, validated as a file is."""

from __future__ import annotations

from pathlib import Path

import pytest

from epsim.errors import SpecError
from epsim.spec import load_scenario, scenario_from_text

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_text_gives_the_files_scenario():
    path = SCENARIOS / "default.yaml"
    assert scenario_from_text(path.read_text(), str(path), path.parent) == load_scenario(path)
    edited = scenario_from_text(path.read_text(), "x.yaml", ".", {"deployment.ep_size": 4})
    assert edited.deployment.ep_size == 4


@pytest.mark.parametrize("text, message", [
    ("model: [\n", r"^up.yaml: not valid YAML at line 2, column 1: "),
    ("- a\n- b\n", r"^up.yaml: \(top level\) \(list\) must be a mapping of scenario fields$"),
    ("model: Qwen3-30B-A3B\nseed: -1\n", r"^up.yaml: seed \(-1\) must be"),
])
def test_bad_text_names_where_and_what(text, message):
    with pytest.raises(SpecError, match=message):
        scenario_from_text(text, "up.yaml")
