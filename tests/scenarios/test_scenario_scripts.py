"""Every scenario script answers its question at a reduced size (`--quick`), so none can rot;
every scenario file loads and simulates a short while."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import epsim
from epsim.sim import simulate

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
SCRIPTS = sorted(p.stem for p in SCENARIOS.glob("*.py"))
FILES = sorted(p.name for p in SCENARIOS.glob("*.yaml"))


def test_the_library_has_at_least_six_scripts_with_their_scenarios():
    assert len(SCRIPTS) >= 6
    for stem in SCRIPTS:
        text = (SCENARIOS / f"{stem}.py").read_text()
        assert '"""' in text and "--quick" in text, stem
        # a script reads its own YAML (or names the ones it reads)
        assert (SCENARIOS / f"{stem}.yaml").is_file() or "deepseek_v3_" in stem, stem


@pytest.mark.parametrize("stem", SCRIPTS)
def test_script_answers_at_reduced_size(stem, tmp_path):
    proc = subprocess.run([sys.executable, str(SCENARIOS / f"{stem}.py"), "--quick", "--out", str(tmp_path),
                           "--workers", "1", "--no-progress"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = [line for line in proc.stdout.splitlines() if line.startswith("answer: ")]
    assert len(answers) == 1, proc.stdout
    # warnings are `note:` lines, once each, never Python's `file.py:12: XWarning` echo
    assert not re.search(r"\.py:\d+: \w*Warning", proc.stderr + proc.stdout), proc.stderr[-2000:]
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note")]
    assert len(notes) == len(set(notes)), notes
    png = tmp_path / f"planning_{stem}.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", FILES)
def test_scenario_file_loads_and_simulates(name):
    # small prefill chunks so that even a prefill scenario finishes steps in 0.3 simulated seconds
    scenario = epsim.load_scenario(SCENARIOS / name, {"workload.duration_s": 0.3, "workload.warmup_s": 0.1,
                                                      "deployment.chunked_prefill_size": 256})
    result = simulate(scenario)
    assert result.steps["step_us"].size > 0, name
