"""Recorded benchmark results regenerate from the committed code: each script is run here (at its
reduced size where the full run is long) and its output must equal the committed result, number
for number, except host wall times (which no two machines share; each result names them).

Covered here: `eplb_gain.py --quick` (benchmarks/results/quick/eplb_gain.json);
`network_terms.py` and `validation_ablations.py` (their results at full size: seconds);
`eplb_over_time.py`, all of its redundancy part at full size, the sweep's longest intervals and
the speed part's counts (its elastic part, three 40-s runs at EP 64, is not rerun here);
`plan_sweep.py --quick` and `screen_vs_sim.py --quick` (benchmarks/results/quick/: timed results,
so every number but the times; their full results must have the quick ones' table structure);
`exact_draws.py --quick` (its agreement table; the full table must support the shipped threshold);
`lmsys_decode_stages.py`, `deepseek_b200_decode_stages.py` and `lmsys_mtp_stages.py` (their
tables; they need aiconfigurator-core's op tables).
The scaling predictions regenerate in tests/epsim/validate/test_scaling.py.
"""

from __future__ import annotations

import json
import os
import re
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


@pytest.mark.parametrize("script, result", [("network_terms.py", "network_terms.md"),
                                            ("validation_ablations.py", "validation_ablations.md")])
def test_markdown_results_regenerate(script, result):
    printed = _run(f"benchmarks/{script}").stdout
    committed = (RESULTS / result).read_text()
    body = committed.split("-->\n\n", 1)[1] if committed.startswith("<!--") else committed
    assert printed == body


def test_lmsys_decode_stages_regenerate(tmp_path):
    """The decode step's stages against aiconfigurator-core's H100 tables: the table (every
    line but the header's date and machine) regenerates; skipped without the package."""
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / "stages.md"
    _run("benchmarks/lmsys_decode_stages.py", "--out", str(out))
    rows = lambda text: [line for line in text.splitlines() if line.startswith("|")]  # noqa: E731
    committed = rows((RESULTS / "lmsys_decode_stages.md").read_text())
    assert len(committed) == 14 and rows(out.read_text()) == committed


def test_deepseek_b200_decode_stages_regenerate(tmp_path):
    """A DeepSeek-R1 B200 decode step's stages against AIC's tables: every table row and every
    step line regenerates (not the header's date and machine); skipped without the package."""
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / "stages.md"
    _run("benchmarks/deepseek_b200_decode_stages.py", "--out", str(out))
    body = lambda text: [line for line in text.splitlines()   # noqa: E731
                         if line.startswith(("|", "##", "epsim's step"))]
    committed = body((RESULTS / "deepseek_b200_decode_stages.md").read_text())
    assert len(committed) == 7 * 17 and body(out.read_text()) == committed


def test_lmsys_mtp_stages_regenerate(tmp_path):
    """LMSYS's MTP case study's decode step against AIC's H200 tables: every table row and
    every step line regenerates (not the header's date and machine); skipped without the
    package."""
    pytest.importorskip("aiconfigurator_core")
    out = tmp_path / "stages.md"
    _run("benchmarks/lmsys_mtp_stages.py", "--out", str(out))
    body = lambda text: [line for line in text.splitlines()   # noqa: E731
                         if line.startswith(("|", "##", "epsim's step", "AIC's stages",
                                             "The published"))]
    committed = body((RESULTS / "lmsys_mtp_stages.md").read_text())
    assert len(committed) == 42 and body(out.read_text()) == committed


# -- timed results: everything but the times ------------------------------------------------------
def _section(text: str, heading: str) -> list[str]:
    """The lines of the `## heading...` section of a result, up to its `(part: N s wall)` line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {heading}"))
    end = next(i for i in range(start, len(lines)) if lines[i].endswith(" s wall)"))
    return [line for line in lines[start:end] if line.strip()]


def _cells(row: str, columns: tuple[int, ...]) -> list[str]:
    """The named columns of a markdown table row (`| a | b |`)."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    return [cells[i] for i in columns]


def test_eplb_over_time_regenerates_but_for_wall_times():
    committed = (RESULTS / "eplb_over_time.md").read_text()
    redundancy = _run("benchmarks/eplb_over_time.py", "--only", "redundancy").stdout
    assert _section(redundancy, "32 redundant") == _section(committed, "32 redundant")

    # the sweep's rows are independent runs: its longest intervals and no EPLB, in seconds
    sweep = _run("benchmarks/eplb_over_time.py", "--only", "sweep", "--intervals", "400,800",
                 "--workers", "1").stdout
    def rows(text):
        table = [line.replace("<- best", "").rstrip() for line in _section(text, "Rebalance")]
        return {line.split()[0]: line for line in table if re.match(r"\s+(\d+|no EPLB)\s", line)}
    again, recorded = rows(sweep), rows(committed)
    assert set(again) == {"400", "800", "no"} and len(recorded) == 9
    assert all(again[k] == recorded[k] for k in again)

    # speed: the steps and rebalances of each case (one timing instead of the fastest of 3)
    speed = _run("benchmarks/eplb_over_time.py", "--only", "speed", "--repeats", "1").stdout
    def counts(text):
        return [_cells(line, (0, 1, 2)) for line in _section(text, "Speed")
                if line.startswith("| ") and line[2:5] in ("off", "on,")]
    assert len(counts(committed)) == 3 and counts(speed) == counts(committed)


def _masked(text: str, timed: dict[str, tuple[int, ...]], drop: tuple[str, ...]) -> list[str]:
    """A timed result's lines with the times taken out: lines starting with a `drop` prefix go;
    table rows whose first cell starts with a `timed` key keep only those columns; `(… s)` and
    `its N s is` wall times are masked."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(drop):
            continue
        for label, columns in timed.items():
            if line.startswith("| ") and _cells(line, (0,))[0].startswith(label):
                line = " | ".join(_cells(line, columns))
        out.append(re.sub(r"\(\d+ s\)|its \d+ s is", "(wall)", line))
    return out


def _structure(text: str) -> list[str]:
    """Headings and table headers of a result, numbers masked, and its tables' first cells."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or line.startswith("| quantity") or line.startswith("| variant") \
                or line.startswith("| configurations"):
            out.append(re.sub(r"\d[\d,]*", "#", line))
        elif line.startswith("| ") and not line.startswith("|--"):
            first = _cells(line, (0,))[0]
            out.append("row: " + ("#" if re.fullmatch(r"[\d.]+", first) else first))
    return out


PLAN_SWEEP_TIMED = {"reference engine": (0, 1), "fast engine": (0, 1), "two tiers": (0, 1)}
PLAN_SWEEP_DROP = ("Recorded by", "- machine:")


def test_plan_sweep_quick_regenerates_but_for_times(tmp_path):
    pytest.importorskip("ray")                      # one variant runs on a local Ray runtime
    committed = (RESULTS / "quick" / "plan_sweep.md").read_text()
    assert "Recorded by `python benchmarks/plan_sweep.py --quick --write`" in committed
    again = _run("benchmarks/plan_sweep.py", "--quick", "--out", str(tmp_path)).stdout
    again = again[again.index("# `epsim plan`"):]          # after the per-variant progress lines
    assert _masked(again, PLAN_SWEEP_TIMED, PLAN_SWEEP_DROP) == \
        _masked(committed, PLAN_SWEEP_TIMED, PLAN_SWEEP_DROP)
    assert _structure((RESULTS / "plan_sweep.md").read_text()) == _structure(committed)


SCREEN_DROP = ("Recorded with", "Load average")


def test_screen_vs_sim_quick_regenerates_but_for_times(tmp_path):
    committed = (RESULTS / "quick" / "screen_vs_sim.md").read_text()
    assert "Recorded with `python benchmarks/screen_vs_sim.py --quick --write`" in committed
    again = _run("benchmarks/screen_vs_sim.py", "--quick", "--out", str(tmp_path)).stdout
    def masked(text):                     # the printed report is the file less its title
        lines = _masked(text[text.index("## Speed"):], {}, SCREEN_DROP)
        speed_row = next(i for i, line in enumerate(lines) if line.startswith("|---:")) + 1
        lines[speed_row] = " | ".join(_cells(lines[speed_row], (0, 1)))   # counts, not times
        return lines
    assert masked(again) == masked(committed)
    assert _structure((RESULTS / "screen_vs_sim.md").read_text()) == _structure(committed)


# -- where exact load draws are needed ------------------------------------------------------------
def test_exact_draws_quick_regenerates():
    committed = (RESULTS / "quick" / "exact_draws.md").read_text()
    assert "Recorded with `python benchmarks/exact_draws.py --quick --write`" in committed
    assert _run("benchmarks/exact_draws.py", "--quick").stdout == committed


def test_the_recorded_agreement_supports_the_shipped_exact_threshold():
    """The threshold below which loads are drawn exactly is the one the full recorded table
    supports: recomputed here from its printed rows, with the benchmark's tolerances."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import exact_draws
    finally:
        sys.path.pop(0)
    from epsim.routing.sampling import EXACT_BELOW_SLOTS_PER_EXPERT
    text = (RESULTS / "exact_draws.md").read_text()
    assert "Recorded with `python benchmarks/exact_draws.py --write`" in text
    rows = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        name, level, _, mean, _, sd, p99 = [c.strip() for c in line.strip("|").split("|")]
        # each printed diff (normal against exact, %) as the pair whose ratio gives it
        diff = lambda cell: (100.0, 100.0 + float(cell.split()[0]))
        rows.append({"scenario": name.strip("`"), "level": int(level), "mean": diff(mean),
                     "sd": diff(sd), "p99": diff(p99)})
    assert {r["scenario"] for r in rows} == set(exact_draws.SCENARIOS)
    assert {r["level"] for r in rows} == set(exact_draws.LEVELS)
    supported = exact_draws.supported_threshold(rows)
    assert supported == EXACT_BELOW_SLOTS_PER_EXPERT
    assert f"**{supported}** slots per expert; shipped threshold" in text
    below = [r for r in rows if r["level"] < supported]
    assert below and exact_draws.supported_threshold(below) is None   # where exact draws matter


def test_the_recorded_alias_speed_supports_the_shipped_alias_threshold():
    """Below the shipped `ALIAS_BELOW_SLOTS_PER_EXPERT` the alias table is the faster exact draw
    at every level, model and block size of the recorded table, and its draws have the
    multinomial's moments there (benchmarks/alias_draws.py)."""
    from epsim.routing.sampling import ALIAS_BELOW_SLOTS_PER_EXPERT
    text = (RESULTS / "alias_draws.md").read_text()
    assert "`python benchmarks/alias_draws.py --write`" in text
    speed = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
             if line.startswith("| DeepSeek") or line.startswith("| Qwen")]
    below = [float(row[-1].rstrip("x")) for row in speed if float(row[3]) < ALIAS_BELOW_SLOTS_PER_EXPERT]
    assert len(below) == 20 and min(below) > 1.0          # 5 levels x 2 models x 2 blocks
    moments = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
               if line.startswith("| ") and "| alias |" in line]
    assert len(moments) == 3
    for level, _, chi2, var, zero in moments:
        assert float(level) < ALIAS_BELOW_SLOTS_PER_EXPERT
        assert 0.85 < float(chi2) < 1.15 and abs(float(var) - 1.0) < 0.02 and zero == "0"
