"""`epsim calibrate`: fit a profile on measured records (`--records`), or measure them first
with the live bench (`--live`, which imports `live/` and torch here and nowhere else)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from epsim.errors import EpsimError

DEFAULT_LIVE_DIR = Path("runs/calibrate")


def _measure(args) -> list[Path]:
    """Run `live.bench` as the options say; returns the records file."""
    try:
        from live.bench import bench_plan_from_args, run_bench, run_eplb_bench
        from live.errors import LiveError
    except ImportError as exc:
        raise EpsimError(f"--live needs the live extra (torch): pip install 'epsim[live]' "
                         f"({exc})") from None
    records = Path(args.records_out or DEFAULT_LIVE_DIR / "records.jsonl")
    args.tokens = args.skews = args.models = args.dtypes = args.iters = None
    try:
        plan = bench_plan_from_args(args)
    except LiveError as exc:
        raise EpsimError(str(exc)) from None
    records.parent.mkdir(parents=True, exist_ok=True)
    records.write_text("")                     # a fresh file: the profile names exactly this run
    print(f"live bench: {plan.num_points} points, {len(plan.cases)} cases on {plan.world_size} "
          f"{'GPUs (nccl)' if plan.dist_backend == 'nccl' else 'CPU ranks (gloo)'} -> {records}",
          file=sys.stderr)
    result = run_bench(plan, records, args.budget_s, progress=not args.no_progress)
    for error in result.errors:
        print(f"epsim calibrate: warning: {error}", file=sys.stderr)
    print(f"live bench: {result.num_records} records from {result.num_points} points in "
          f"{result.seconds:.0f} s ({result.skipped} skipped)", file=sys.stderr)
    if not result.num_records:
        raise EpsimError(f"the live bench measured nothing ({records}); see the warnings above")
    paths = [records]
    if args.eplb:
        eplb = records.parent / "eplb_records.jsonl"          # what live.eplb.bench writes
        eplb.unlink(missing_ok=True)
        print(run_eplb_bench(records.parent, args.quick), file=sys.stderr)
        paths += [eplb] if eplb.is_file() and eplb.stat().st_size else []
    return paths


def _summary(cal) -> str:
    lines = [f"profile {cal.profile.name} (hardware {cal.profile.hardware}): fitted on "
             f"{cal.num_fit} records, {cal.num_held_out} held out "
             f"(rule {cal.holdout.describe()})",
             f"  {'component':<22}{'records':>8}{'fit MAPE %':>12}{'max %':>8}  parameters"]
    for key, comp in sorted(cal.profile.components.items()):
        res = comp.residuals
        params = ", ".join(f"{k}={v:.4g}" for k, v in comp.params.items())
        lines.append(f"  {key:<22}{res.get('num_records', 0):>8.0f}{res.get('mape', 0):>12.1f}"
                     f"{res.get('max_ape', 0):>8.1f}  {params}"
                     + (f"  [{comp.note}]" if comp.note else ""))
    return "\n".join(lines)


def run(args) -> int:
    from epsim.calibrate import Holdout, calibrate

    holdout = Holdout.parse(args.holdout)
    if args.live:
        paths = _measure(args)
        out = Path(args.out or DEFAULT_LIVE_DIR / "profile.json")
    else:
        paths = [Path(p) for p in args.records]
        out = Path(args.out) if args.out else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = calibrate(paths, holdout, name=args.name or "", strict=args.strict,
                        backends=args.backends)
    for w in caught:
        print(f"epsim calibrate: warning: {w.message}", file=sys.stderr)
    print(_summary(cal))
    if out is not None:
        cal.profile.save(out)
        print(f"wrote {out}")
    else:
        print("(no --out: profile not written)")
    return 0
