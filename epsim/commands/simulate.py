"""`epsim simulate`: run a scenario, print a summary table, write results to `--out`."""

from __future__ import annotations

import contextlib
from pathlib import Path

from epsim.budget import check_run
from epsim.commands.output import Report, json_safe, wants_progress
from epsim.errors import SpecError
from epsim.io import check_output_dir
from epsim.io.rundir import MANIFEST, RunDir
from epsim.profile import load_profile
from epsim.report import RUN_FILES, format_table, summarize, write_summary, write_timeseries
from epsim.report.cautions import cautions
from epsim.report.figures import write_figures
from epsim.report.timeline import write_timeline
from epsim.sim import simulate
from epsim.spec import load_scenario

DEFAULT_SCENARIO = Path("scenarios") / "default.yaml"


def resolve_scenario_path(given: str | None) -> Path:
    """The scenario file: as given, else `scenarios/default.yaml` under the current directory."""
    if given:
        return Path(given)
    if DEFAULT_SCENARIO.is_file():
        return DEFAULT_SCENARIO
    raise SpecError(f"scenario (not given) must be a YAML file; {DEFAULT_SCENARIO} does not exist "
                    f"under {Path.cwd()} (run from the repository root or pass SCENARIO.yaml)")


def run(args):
    path = resolve_scenario_path(args.scenario)
    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    scenario = load_scenario(path, overrides)      # a bad file fails before anything runs
    if not args.no_budget_check:
        check_run(scenario, str(path))

    profile = load_profile(args.profile) if args.profile else None
    out = check_output_dir(args.out) if args.out else None
    # held from before the run: a second command writing to the same --out is refused up front
    with RunDir(out, "simulate", RUN_FILES) if out else contextlib.nullcontext() as rundir:
        result = simulate(scenario, profile=profile, progress=wants_progress(args))
        summary = summarize(result)
        report = Report(json_safe(summary), format_table(summary).splitlines(),
                        notes=cautions(summary))
        if out is None:
            return report
        report.files += write_run(result, summary, out, rundir, plots=not args.no_plots,
                                  timeline=args.timeline)
    report.lines.append("")
    return report


def write_run(result, summary: dict, out: Path, rundir, plots: bool = True,
              timeline: bool = False) -> list[Path]:
    """A run's files in `out` (summary.json, timeseries.csv, figures, timeline.json), each
    written atomically, then the manifest (`epsim.io.rundir`): returns the files written, the
    manifest last."""
    rundir.begin()
    files = [write_summary(summary, out / "summary.json"),
             write_timeseries(result, out / "timeseries.csv")]
    if plots:
        files += write_figures(result, out)
    if timeline and result.last_step is not None:
        files.append(write_timeline(result.last_step.cost, out / "timeline.json",
                                    result.scenario.deployment.enable_two_batch_overlap))
    rundir.finish(files)
    return files + [out / MANIFEST]
