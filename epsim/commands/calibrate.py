"""`epsim calibrate`: fit a profile on measured records (`--records`), or measure them first
with the live bench (`--live`, which imports `live/` and torch here and nowhere else)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from epsim.calibrate import Holdout, calibrate
from epsim.calibrate.inputs import default_record_paths
from epsim.commands.output import Report, wants_progress
from epsim.errors import EpsimError
from epsim.io import check_output_file
from epsim.io.write import write_text
from epsim.text import number

DEFAULT_LIVE_DIR = Path("runs/calibrate")


COMMUNICATION_NOTE = ("communication (dispatch, combine) needs two or more GPUs: it is taken "
                      "from the shipped records (2x H200, epsim/data/records/h200x2), what they "
                      "do not cover from the datasheet")


def choose_live_bench(num_gpus_visible: int, gpus: int | None, cpu: bool) -> str:
    """Which live bench `--live` runs here; never CPU ranks while a GPU is visible, unless asked.

    Args:
        num_gpus_visible: `torch.cuda.device_count()`; gpus: `--gpus` (None: all visible);
        cpu: `--cpu`.
    Returns:
        "cpu": the EP bench on 2 CPU ranks (gloo) -- `--cpu`, or no GPU visible;
        "components": every single-GPU component on one GPU (`live.bench.components`);
        "ep": the EP bench on `gpus` GPUs (NCCL).
    Raises:
        EpsimError: `--gpus` below 1 or above the GPUs visible (no silent fallback to CPU ranks).
    """
    if cpu:
        return "cpu"
    if gpus is not None and gpus < 1:
        raise EpsimError(f"--gpus ({gpus}) must be >= 1; pass --cpu to measure on CPU ranks")
    if num_gpus_visible == 0:
        if gpus is not None:
            raise EpsimError(f"--gpus ({gpus}) must be <= the 0 GPUs visible; pass --cpu to "
                             f"measure on CPU ranks")
        return "cpu"
    wanted = num_gpus_visible if gpus is None else gpus
    if wanted > num_gpus_visible:
        raise EpsimError(f"--gpus ({gpus}) must be <= the {num_gpus_visible} GPU(s) visible; "
                         f"pass --cpu to measure on CPU ranks instead")
    return "components" if wanted == 1 else "ep"


def _num_gpus_visible() -> int:
    import torch
    return torch.cuda.device_count()


def _say(args, text: str) -> None:
    """Progress of a live run on stderr (the result goes to stdout); nothing with --quiet."""
    if not getattr(args, "quiet", False):
        print(text, file=sys.stderr)


def _measure(args) -> list[Path]:
    """Run the live bench the machine and options call for; returns the record files to fit.

    Raises:
        EpsimError: no live extra, GPUs asked for that are not there, a bad plan (`LiveError`
            is one), or a run that measured nothing.
    """
    try:
        num_gpus = _num_gpus_visible()
    except ImportError as exc:
        raise EpsimError(f"--live needs the live extra (torch): pip install 'epsim[live]' "
                         f"({exc})") from None
    which = choose_live_bench(num_gpus, args.gpus, args.cpu)
    records = Path(args.records_out or DEFAULT_LIVE_DIR / "records.jsonl")
    records.parent.mkdir(parents=True, exist_ok=True)
    if which == "components":
        return _measure_components(args, records)
    from live.bench.sweep import plan_sweep, run_bench, run_eplb_bench

    if which == "cpu" and not args.cpu:
        _say(args, "live bench: no GPU visible: measuring on CPU ranks (gloo), a CPU profile")
    world_size = args.gpus or (2 if which == "cpu" else num_gpus)
    plan = plan_sweep(backends=args.backends, quick=args.quick, cpu=which == "cpu",
                      world_size=world_size)
    _say(args, f"live bench: {plan.num_points} points, {len(plan.cases)} cases on {plan.world_size} "
          f"{'GPUs (nccl)' if plan.dist_backend == 'nccl' else 'CPU ranks (gloo)'} -> {records}")
    _run_live(args, records, plan, run_bench)
    paths = [records]
    if args.eplb:
        eplb = records.parent / "eplb_records.jsonl"          # what live.bench.eplb writes
        eplb.unlink(missing_ok=True)
        _say(args, run_eplb_bench(records.parent, args.quick))
        paths += [eplb] if eplb.is_file() and eplb.stat().st_size else []
    return paths


def _measure_components(args, records: Path) -> list[Path]:
    """One GPU: time every single-GPU component on it; communication from the shipped records."""
    from live.bench.components import plan_components, run_components

    plan = plan_components("cuda", quick=args.quick)
    _say(args, f"live bench: {plan.num_points} points (experts, attention, dense MLP) on 1 GPU, "
          f"device time, host overhead and eager time each -> {records}")
    _say(args, f"live bench: {COMMUNICATION_NOTE}")
    for note in plan.notes[1:]:
        _say(args, f"live bench: {note}")
    _run_live(args, records, plan, run_components)
    # the shipped two-GPU records give communication; the shipped single-GPU ones are left out,
    # so this GPU's own kernel timings are the ones fitted
    return [records] + [p for p in default_record_paths() if "h200_single" not in p.parts]


def _run_live(args, records: Path, plan, run) -> None:
    """Run a live bench's `plan` with its `run` function (`live.bench.sweep.run_bench`,
    `live.bench.components.run_components`) into a fresh `records` file; its problems become
    notes under the result.

    Raises:
        EpsimError: the run measured nothing (naming its first problem).
    """
    write_text(records, "")                    # a fresh file: the profile names exactly this run
    result = run(plan, records, args.budget_s, progress=wants_progress(args))
    if result.problems:                        # one note for all, the list in a file beside
        listing = records.with_name(records.stem + "_skipped.txt")
        write_text(listing, "".join(f"{problem}\n" for problem in result.problems))
        warnings.warn(f"{len(result.problems)} point(s) skipped or failed, listed in {listing} "
                      f"(first: {result.problems[0]})", stacklevel=2)
    _say(args, f"live bench: {result.line()}")
    if not result.num_records:
        first = f"; first problem: {result.problems[0]}" if result.problems else ""
        raise EpsimError(f"the live bench measured nothing ({records}){first}")


def _summary(cal) -> list[str]:
    lines = [f"profile {cal.profile.name} (hardware {cal.profile.hardware}): fitted on "
             f"{cal.num_fit} records, {cal.num_held_out} held out "
             f"(rule {cal.holdout.describe()})",
             f"  {'component':<22}{'records':>8}{'fit MAPE %':>12}{'max %':>8}  parameters"]
    for key, comp in sorted(cal.profile.components.items()):
        res = comp.residuals
        params = ", ".join(f"{k}={number(v)}" for k, v in comp.params.items())
        source = [f"source: {comp.data_source}" + (f" ({', '.join(comp.tables)})"
                                                     if comp.data_source == "aiconfigurator" else "")
                  ] if comp.data_source else []
        lines.append(f"  {key:<22}{res.get('num_records', 0):>8.0f}{res.get('mape', 0):>12.1f}"
                     f"{res.get('max_ape', 0):>8.1f}  {params}"
                     + (f"  [{'; '.join(source + ([comp.note] if comp.note else []))}]"
                        if source or comp.note else ""))
    return lines


def run(args):
    holdout = Holdout.parse(args.holdout)
    if args.live:                 # where results go is checked before minutes of measuring
        out = check_output_file(args.out or DEFAULT_LIVE_DIR / "profile.json")
        check_output_file(args.records_out or DEFAULT_LIVE_DIR / "records.jsonl", "--records-out")
        paths = _measure(args)
    else:                         # files, or `aic:SYSTEM[/FRAMEWORK[/VERSION]]` (epsim.calibrate.aic)
        paths = [p if p.startswith("aic:") else Path(p) for p in args.records]
        out = check_output_file(args.out) if args.out else None
    cal = calibrate(paths, holdout, name=args.name or "", strict=args.strict,
                    backends=args.backends, spread_paths=args.spread_records or (),
                    records_out=None if args.live else args.records_out)
    data = {"profile": cal.profile.model_dump(by_alias=True), "num_fit": cal.num_fit,
            "num_held_out": cal.num_held_out, "holdout": cal.holdout.describe(),
            "records": [str(p) for p in paths]}
    lines = _summary(cal)
    if out is not None:
        cal.profile.save(out)
        return Report(data, lines, files=[out])
    return Report(data, lines, notes=["no --out: profile not written"])
