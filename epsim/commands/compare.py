"""`epsim compare RUN_A RUN_B`: two runs side by side with the deltas (`epsim.report.compare`).
A run is a results directory of `epsim simulate --out`, its `summary.json`, or a scenario YAML
(simulated here, with `--set-a` / `--set-b` changes)."""

from __future__ import annotations

from pathlib import Path

from epsim.commands.output import Report, json_safe, wants_progress
from epsim.errors import SpecError
from epsim.io import load_json
from epsim.report import summarize
from epsim.report.compare import cell, comparison, delta_cell, layer_rows, metric_rows
from epsim.sim import simulate
from epsim.spec import load_scenario
from epsim.text import table


def load_run(given: str, overrides: list[str], progress: bool) -> tuple[dict, str]:
    """(summary, what it is) of a run directory, a summary.json or a scenario YAML.

    Raises:
        SpecError: none of these, or a summary without the keys a comparison reads.
    """
    path = Path(given)
    if path.is_dir():
        path = path / "summary.json"
    if path.suffix in (".yaml", ".yml"):
        summary = summarize(simulate(load_scenario(path, overrides), progress=progress))
        return summary, f"{given} simulated" + (f" with {', '.join(overrides)}" if overrides else "")
    if overrides:
        raise SpecError(f"--set-a/--set-b ({overrides[0]!r}) change a scenario YAML; {given} is a "
                        f"finished run")
    if path.suffix != ".json":
        raise SpecError(f"run ({given!r}) must be a results directory of `epsim simulate --out`, "
                        f"its summary.json, or a scenario YAML")
    summary = load_json(path, "run summary")
    if not isinstance(summary, dict) or "tpot_ms" not in summary or "scenario" not in summary:
        raise SpecError(f"{path}: must be the summary.json of `epsim simulate --out` (tpot_ms and "
                        f"scenario missing)")
    return summary, str(path)


def run(args):
    a, where_a = load_run(args.run_a, args.set_a, wants_progress(args))
    b, where_b = load_run(args.run_b, args.set_b, wants_progress(args))
    data = comparison(a, b)
    lines = [f"A          {data['a']}  ({where_a})", f"B          {data['b']}  ({where_b})"]
    differs = data["differs"]
    lines.append("differs    " + ("; ".join(f"{d['field']}: {d['a']} -> {d['b']}" for d in differs[:8])
                                  + (f"; {len(differs) - 8} more" if len(differs) > 8 else "")
                                  if differs else "nothing in the scenarios (same run twice?)"))
    rows = metric_rows(a, b) + layer_rows(a, b)
    lines += [""] + table(["", "unit", "A", "B", "B - A"],
                          [[r.label, r.unit, cell(r.a), cell(r.b), delta_cell(r)] for r in rows],
                          indent="")
    lines += ["", f"why        {data['why']}"]
    keep = [f"{name}: {s['keep_up']['verdict']}" for name, s in (("A", a), ("B", b))]
    lines += [f"keep-up    {keep[0]}", f"           {keep[1]}"]
    return Report(json_safe({**data, "a_source": where_a, "b_source": where_b}), lines)
