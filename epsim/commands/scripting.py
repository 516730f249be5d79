"""What the scenario scripts in `scenarios/` share: their command line and figure saving.

Every script accepts `--quick` (or `EPSIM_QUICK=1`): a reduced size that runs in seconds, which
the tests use so that no script can rot; `--out DIR` for its PNG and plan directory; and
`--workers` / `--executor` for its sweeps.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from epsim.commands.output import defer_warnings_to_exit
from epsim.io.write import write_figure
from epsim.plan.answers import workload_text
from epsim.plan.executors import executor_options
from epsim.report.keep_up import unsettled_text
from epsim.report.serving import saturated_text
from epsim.sim import Simulation
from epsim.spec.scenario import scenario_from_dict


def script_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    """Parse a scenario script's command line.

    Returns:
        Namespace with `quick`, `lite` (bool), `out` (Path, created), `workers`, `executor`,
        `progress` (bool), `size` ("quick", "lite" or "full").
    """
    parser = argparse.ArgumentParser(description=description.strip().splitlines()[0],
                                     allow_abbrev=False)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="reduced size, seconds not minutes (also EPSIM_QUICK=1); its answer "
                           "says so")
    size.add_argument("--lite", action="store_true",
                      help="full-lite: the full question (model, EP sizes, load) over a shorter "
                           "simulated time; its answer says so")
    parser.add_argument("--out", default=".", help="directory for the PNG and the plan results")
    executor_options(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    args = parser.parse_args(argv)
    defer_warnings_to_exit()            # warnings as `note:` lines under the result, once each
    args.quick = args.quick or (not args.lite and os.environ.get("EPSIM_QUICK", "") not in ("", "0"))
    args.size = "quick" if args.quick else "lite" if args.lite else "full"
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


SIZE_LABELS = {"quick": "[quick: reduced size, not the full answer] ",
               "lite": "[full-lite: the full question over a shorter simulated time] ", "full": ""}


def answer(args, text: str, row: dict | None = None, workload=None, saturated: bool = False) -> str:
    """Print and return the script's answer line: `answer: `, for a reduced size a label saying
    so (a quick answer must never pass for the full one), the text, then what every answer
    states: its workload (a `WorkloadSpec`), and from its plan row the keep-up margin and the
    share of step time that is measured (`margin_and_share`)."""
    extra = ([f"workload: {workload_text(workload)}"] if workload is not None else []) + \
        ([margin_and_share(row, saturated)] if row is not None else [])
    line = f"answer: {SIZE_LABELS[args.size]}{text}" + "".join(f" [{e}]" for e in extra)
    print(line)
    return line


def margin_and_share(row: dict, saturated: bool = False) -> str:
    """`keep-up: serves 198 of 198 req/s (100.2 %); step time 40 % measured, ...` of a plan row
    (`epsim.plan.summary_metrics` keys): what every answer states besides its number.

    Args:
        saturated: the scenario keeps every rank's batch full on purpose (arrivals outpace
            completions): its answer is throughput at a full batch, not a serving rate.
    """
    served, offered = row.get("keep_up.served_rps"), row.get("keep_up.offered_rps")
    if not offered or math.isnan(offered):
        keep = "keep-up: no arrivals in the window"
    elif saturated:
        keep = f"keep-up: {saturated_text(served, offered)}"
    else:
        keep = (f"keep-up: serves {served:.4g} of {offered:.4g} req/s ({row['keep_up.served_frac'] * 100:.1f} %"
                f"{'' if row.get('keep_up.ok') == 1.0 else ', overloaded'})")
        if row.get("keep_up.settled") == 0.0:
            keep += "; " + unsettled_text(row["keep_up.running_growth_rps"], offered)
    measured = row.get("provenance.measured_share")
    if measured is None or math.isnan(measured):
        return keep
    return (f"{keep}; step time {measured * 100:.0f} % measured, "
            f"{row['provenance.extrapolated_share'] * 100:.0f} % extrapolated, "
            f"{row['provenance.datasheet_share'] * 100:.0f} % datasheet")


def save_figure(fig, out: Path, stem: str, title: str) -> Path:
    """Title and lay out `fig`, save it as `out/planning_<stem>.png` (the name docs/planning.md
    links) and close it."""
    import matplotlib.pyplot as plt
    fig.suptitle(title)
    fig.tight_layout()
    try:
        path = write_figure(fig, Path(out) / f"planning_{stem}.png")
    finally:
        plt.close(fig)
    print(f"plot: {path}")
    return path


def use_agg() -> None:
    """Headless matplotlib (scripts run in CI and over SSH)."""
    import matplotlib
    matplotlib.use("Agg")


def settled_eplb_simulation(scenario, profile=None):
    """A `Simulation` of `scenario` starting from the placement EPLB settles on when popularity
    holds still: `deployment.init_expert_location: from_skew` (`epsim.sim.initial_placement`).

    Returns:
        (simulation, expected balancedness: mean over layers of mean/max GPU load of the skew's
        expected loads under the scenario's replica selection).
    """
    data = scenario.model_dump()
    data["deployment"]["init_expert_location"] = "from_skew"
    settled = scenario_from_dict(data, where=scenario.name, base_dir=scenario.base_dir)
    sim = Simulation(settled, profile=profile)
    placement = sim.placement.placement
    popularity = sim.skew.mean_popularity()                                   # [layers, experts]
    d = settled.deployment
    return sim, float(placement.balancedness(popularity, d.ep_dispatch_algorithm).mean())


def log2_axis(ax) -> None:
    """A base-2 log x axis labelled with plain numbers (8, 16, 32 rather than 2^3, 2^4, 2^5)."""
    from matplotlib.ticker import ScalarFormatter
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
