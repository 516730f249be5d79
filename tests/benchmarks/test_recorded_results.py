"""Recorded benchmark results regenerate from the committed code: each script is run here (at its
reduced size where the full run is long) and its output must equal the committed result, number
for number, except host wall times (which no two machines share; each result names them).

Covered here: `eplb_gain.py --quick` (benchmarks/results/quick/eplb_gain.json) and
`network_terms.py` (benchmarks/results/network_terms.md, full size: seconds). The scaling
predictions regenerate in tests/epsim/validate/test_scaling.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _without(value, names: tuple[str, ...]):
    """`value` with every dict key in `names` dropped, recursively."""
    if isinstance(value, dict):
        return {k: _without(v, names) for k, v in value.items() if k not in names}
    if isinstance(value, list):
        return [_without(v, names) for v in value]
    return value


def test_eplb_gain_quick_regenerates(tmp_path):
    committed = json.loads((RESULTS / "quick" / "eplb_gain.json").read_text())
    assert committed["meta"]["command"] == ("python benchmarks/eplb_gain.py --quick "
                                            "--out benchmarks/results/quick")
    _run("benchmarks/eplb_gain.py", "--quick", "--out", str(tmp_path))
    again = json.loads((tmp_path / "eplb_gain.json").read_text())
    host = tuple(committed["meta"]["host_time_fields"]) + ("command",)
    assert host == ("algorithm_wall_s", "command")
    assert _without(again, host) == _without(committed, host)
    assert (tmp_path / "eplb_gain.csv").read_text().splitlines()[0] == \
        (RESULTS / "quick" / "eplb_gain.csv").read_text().splitlines()[0]


def test_eplb_gain_full_result_names_its_command_and_shape():
    """The full result (too long to rerun here: ~1 minute) was written by the same code path
    with 3 seeds over seven skews; its summary has one row per skew and algorithm."""
    full = json.loads((RESULTS / "eplb_gain.json").read_text())
    assert full["meta"]["command"] == "python benchmarks/eplb_gain.py --plots"
    assert full["meta"]["seeds"] == 3 and len(full["summary"]) == 7 * 3
    quick = json.loads((RESULTS / "quick" / "eplb_gain.json").read_text())
    by_key = {(r["skew"], r["algorithm"], r["seed"]): r for r in full["rows"]}
    for row in quick["rows"]:                      # the quick run is a slice of the full one
        assert _without(by_key[(row["skew"], row["algorithm"], row["seed"])],
                        ("algorithm_wall_s",)) == _without(row, ("algorithm_wall_s",))


@pytest.mark.parametrize("script, result", [("network_terms.py", "network_terms.md")])
def test_markdown_results_regenerate(script, result):
    printed = _run(f"benchmarks/{script}").stdout
    committed = (RESULTS / result).read_text()
    body = committed.split("-->\n\n", 1)[1] if committed.startswith("<!--") else committed
    assert printed == body
