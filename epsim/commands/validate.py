"""`epsim validate`: the profile's predictions against measured records, by the hold-out
protocol. Prints a one-screen summary (per backend and kind: held-out MAPE, baselines where the
table has them, fit-set MAPE, the worst case) and writes the full tables (markdown, CSV) and
plots to `--out` (default runs/validate/)."""

from __future__ import annotations

import contextlib
import os
import platform
import warnings
from pathlib import Path

from epsim.calibrate import default_record_paths
from epsim.commands.output import Report, stages, wants_progress
from epsim.errors import EpsimError, RecordError
from epsim.io import check_output_dir, check_output_file
from epsim.io.rundir import RunDir
from epsim.io.write import write_text
from epsim.plan.executors import check_executor, default_workers
from epsim.profile import default_profile_path, load_profile
from epsim.text import table
from epsim.validate import composition_table, published, summary_rows, validate
from epsim.validate.composition import compose_files, default_composition_paths
from epsim.validate.extrapolation import RunPair, default_judged_only, default_run_pairs, stats
from epsim.validate.report import describe_measured_on, read_doc, update_doc
from epsim.validate.silicon import document, peer, peer_cache
from epsim.validate.silicon.checkpoint import Checkpoint, code_fingerprint
from epsim.validate.silicon.rows import default_csv_path, read_rows
from epsim.validate.silicon.scoreboard import Scoreboard, run_rows, select

# Header names for the summary's known columns; any other column of `summary_rows` (a
# baseline, say) is shown under its own name, `_mape` as `... MAPE %`.
COLUMN_NAMES = {"backend": "backend", "kind": "kind", "num": "held out", "mape": "MAPE %",
                "fit_mape": "fit-set MAPE %", "worst": "worst %", "worst_at": "worst at",
                "bias": "bias %"}
FIRST = ("backend", "kind", "num", "mape")
LAST = ("fit_mape", "worst", "worst_at")
HIDDEN = ("bias",)                 # in --json and the full tables; not worth a summary column
# every file `validate --out DIR` may write (`epsim.io.rundir`)
VALIDATE_FILES = ("validation.md", "comparisons.csv", "summary.csv", "skew_effect.csv",
                  "scatter.png", "curves_*.png")


def summary_columns(rows: list[dict]) -> list[str]:
    """The summary's columns: the known first, then whatever else the rows carry, then the
    worst case."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    middle = [k for k in keys if k not in FIRST + LAST + HIDDEN]
    return [k for k in FIRST if k in keys] + middle + [k for k in LAST if k in keys]


def column_name(key: str) -> str:
    if key in COLUMN_NAMES:
        return COLUMN_NAMES[key]
    name = key.replace("_", " ")
    for suffix, unit in ((" mape", " MAPE %"), (" pct", " %")):
        if name.endswith(suffix):
            name = name[:-len(suffix)] + unit
    return name


def summary_lines(report, max_mape: float) -> list[str]:
    rows = summary_rows(report.rows)
    held = sum(r.split == "holdout" for r in report.rows)
    fit = len(report.rows) - held
    lines = [f"measured on  {describe_measured_on(report.measured_on)}",
             f"judged       {held} held-out records (rule {report.holdout.describe()}), "
             f"{fit} fit-set records (in-sample)"]
    if not rows:
        return lines + ["no held-out records: nothing to judge (see --holdout)"]
    columns = summary_columns(rows)

    def cell(row, key):
        value = row.get(key)
        if isinstance(value, float):
            return f"{value:+.1f}" if key == "bias" else f"{value:.1f}"
        return value
    lines.append("")
    lines += table([column_name(k) for k in columns], [[cell(r, k) for k in columns] for r in rows],
                   indent="")
    failed = [f"{b}/{k}" for (b, k), ok in report.passed.items() if not ok]
    lines.append("")
    lines.append(f"held-out MAPE <= {max_mape:g}%: "
                 + (f"all {len(report.passed)} backend/kind pairs" if not failed else
                    f"no for {', '.join(failed)}"))
    return lines


def _run_pairs(args, paths: list[Path]) -> list:
    """Run hold-outs (`extrapolation.RunPair`): `--run-fit`/`--run-judged`, else the defaults
    when the shipped records are judged and the other runs exist under the working directory."""
    if args.run_fit or args.run_judged:
        if not (args.run_fit and args.run_judged):
            raise EpsimError("--run-fit and --run-judged must be given together (the records to "
                             "fit on and another run's records to judge)")
        return [RunPair(tuple(Path(p) for p in args.run_fit),
                        tuple(Path(p) for p in args.run_judged))]
    if args.records:
        return []
    return default_run_pairs(paths)


def run_published(args):
    """`epsim validate --published`: published results against datasheet predictions; the
    table goes to `--out` (a .md file, or published.md in a directory)."""
    out = None
    if args.out:                                 # checked before the work
        out = Path(args.out)
        if out.suffix != ".md":                  # a directory (the default runs/validate)
            out = out / "published.md"
        check_output_file(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # datasheet profiles on purpose: no mismatch noise
        rows = published.published_rows()
    text = published.markdown(rows)
    if out is None:
        return Report(published.rows_json(rows), text.rstrip("\n").splitlines())
    write_text(out, text)
    data = published.rows_json(rows)
    lines = [f"{s['table']}: {s['rows']} rows, MAPE {s['mape_pct']:.1f} %"
             + ("" if s["target_pct"] is None else f" (target {s['target_pct']:g} %, {s['verdict']})")
             for s in data["summary"]]
    return Report(data, lines, files=[out])


def extrapolation_lines(extrapolation: list) -> list[str]:
    """The extrapolation hold-outs as one compact table: a row per component, a column per
    axis, each cell `model MAPE / best baseline MAPE`, `!` where the model does not beat both."""
    if not extrapolation:
        return []
    axes = list(dict.fromkeys(s.label for s in extrapolation))
    components = sorted({s.component for s in extrapolation})
    cell = {(s.label, s.component): f"{s.model_mape:.1f} / {min(s.constant_mape, s.loglog_mape):.1f}"
            + ("  " if s.beats_both else " !") for s in extrapolation}
    flagged = sum(not s.beats_both for s in extrapolation)
    return (["", f"extrapolation hold-outs: MAPE % of the model / of the better baseline (constant, "
                 f"log-log), refitted without the axis's far side; ! = a baseline does as well "
                 f"({flagged} of {len(extrapolation)})"]
            + table(["component", *(f"{a} axis" for a in axes)],
                    [[c, *(cell.get((a, c), "-") for a in axes)] for c in components], indent=""))


def run_composition(args):
    """`epsim validate --composition`: whole layers measured on one GPU against the simulator's
    layer (`epsim.validate.composition`); tables to `--out` (composition.md, composition.csv)
    and to `--doc`'s composition section."""
    paths = [Path(p) for p in args.records] if args.records else default_composition_paths()
    if not paths:
        raise EpsimError("--records (none given) must name whole-layer record files "
                         "(live.bench.layers): none ship in this install")
    out = check_output_dir(args.out) if args.out else None        # checked before the work
    if args.doc:
        read_doc(Path(args.doc), composition_table.DOC_MARKERS)
    profile = load_profile(args.profile)
    comp = compose_files(paths, profile, timing=args.timing, strict=args.strict)
    text = composition_table.markdown(comp)
    files = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "composition.md", text)
        files += [out / "composition.md", composition_table.write_csv(comp, out / "composition.csv")]
    if args.doc:
        update_doc(Path(args.doc), text, composition_table.DOC_MARKERS)
        files.append(Path(args.doc))
    lines = [f"profile      {profile.name or profile.path} (hardware {profile.hardware})",
             *composition_table.summary_lines(comp)]
    if out is not None:
        lines.append(f"full tables (layer, stack, parts) in {out / 'composition.md'}")
    return Report(composition_table.rows_json(comp), lines, files=files)


def _load_average(which: int) -> str:
    """The machine's load average over 1, 5 or 15 minutes (`which` 0, 1, 2), "unknown" where
    the platform has none: what stretched a run's wall time on a shared machine."""
    try:
        return f"{os.getloadavg()[which]:.1f}"
    except (AttributeError, OSError):
        return "unknown"


def run_silicon(args):
    """`epsim validate --silicon [CSV]`: the public silicon sample's in-scope rows, epsim beside
    the peer (docs/silicon.md); `--doc` regenerates that page, `--out` gets the per-row JSON and
    the missing-features table."""
    path = Path(args.silicon) if args.silicon else default_csv_path()
    if path is None:
        raise EpsimError("--silicon (no CSV given) must name a silicon-sample CSV: none is installed "
                         "(pip install 'epsim[peer]' brings aiconfigurator-core's)")
    if args.sample is not None and args.sample < 1:
        raise EpsimError(f"--sample ({args.sample}) must be >= 1 rows")
    check_executor(args.executor, args.workers)
    out = Path(args.out) if args.out else None
    doc = Path(args.doc) if args.doc else None
    if doc is not None:
        read_doc(doc)                            # markers checked before the work
    if out is not None:
        check_output_dir(out)
    rows, scope = select(read_rows(path), args.sample, args.seed)
    use_peer = not args.no_peer and peer.available()
    workers = args.workers or default_workers()
    cache = Path(args.peer_cache) if args.peer_cache else out / peer_cache.CACHE_NAME if out else None
    known = peer_cache.load(cache) if use_peer and cache is not None else {}
    peer_label = f"AIConfigurator {peer.version()}" if use_peer else None
    replayed = not use_peer and not args.no_peer and args.peer_cache is not None
    if replayed:           # the peer's answers from a machine that had it (peer_cache.replay)
        peer_label, known = peer_cache.replay(cache, [peer.row_key(row) for row in rows])
    # rows finished by an earlier, interrupted run of this code in --out are not run again
    kept = Checkpoint(out, code_fingerprint(path) if out is not None else "")
    load_start = _load_average(0)
    try:
        entries, wall_s, resumed = run_rows(rows, args.approximate, use_peer or replayed,
                                            args.executor, workers, wants_progress(args),
                                            args.ray_address, peer_known=known, checkpoint=kept)
    finally:
        kept.close()
    if use_peer and cache is not None:
        peer_cache.save(cache, known)
    board = Scoreboard(entries, scope, str(path), args.approximate, peer_label, workers, wall_s,
                       sample=f"--sample {args.sample} --seed {args.seed}" if args.sample else "",
                       extra={"csv_given": bool(args.silicon), "resumed": resumed,
                              "machine": f"{default_workers()} CPUs ({platform.machine()}), Python "
                                         f"{platform.python_version()}, load average "
                                         f"{load_start} at the start, {_load_average(2)} over "
                                         f"the last 15 min"})
    notes = [] if use_peer or replayed or args.no_peer else [
        "the peer was not run: AIConfigurator is not installed (pip install 'epsim[peer]')"]
    report = Report(document.rows_json(board), document.headline_lines(board), notes=notes)
    if doc is not None:
        document.write_doc(doc, document.section(board))
        report.files.append(doc)
    if out is not None:
        document.write_rows(board, out / "silicon_rows.json.gz")
        write_text(out / "silicon_features.md", document.features_markdown(board))
        report.files += [out / "silicon_rows.json.gz", out / "silicon_features.md"]
    if use_peer and cache is not None:
        report.files.append(cache)
    if resumed:
        report.notes.append(f"{resumed} of {len(entries)} rows resumed from {kept.path} (an earlier "
                            f"run of this code that did not finish)")
    if kept.other_code:
        report.notes.append(f"{kept.other_code} rows in {kept.path} came from other code or "
                            f"another CSV: run again")
    kept.finish()
    return report


def run(args):
    if getattr(args, "silicon", None) is not None:
        return run_silicon(args)
    if getattr(args, "published", False):
        return run_published(args)
    if getattr(args, "composition", False):
        return run_composition(args)
    if args.profile is None and not default_profile_path().is_file():
        raise EpsimError("--profile (none given) must name a profile JSON: no measured profile "
                         "ships in this install")
    profile = load_profile(args.profile)
    paths = [Path(p) for p in args.records] if args.records else default_record_paths()
    if not paths:
        raise EpsimError("--records (none given) must name record files: no records ship in this "
                         "install")
    max_mape = args.max_mape if args.max_mape is not None else 10.0
    if not 0 <= max_mape < float("inf"):
        raise EpsimError(f"--max-mape ({max_mape}) must be a finite percentage >= 0")
    out = check_output_dir(args.out) if args.out else None
    with RunDir(out, "validate", VALIDATE_FILES) if out else contextlib.nullcontext() as rundir:
        if rundir is not None:
            rundir.begin()
        report = validate(profile, paths, args.holdout, out, args.doc, plots=not args.no_plots,
                          max_mape=max_mape, strict=args.strict,
                          extrapolate=not args.no_extrapolation, run_pairs=_run_pairs(args, paths),
                          judged_only=[] if args.records else default_judged_only(),
                          stage=stages("validate", wants_progress(args)))
        if rundir is not None:
            rundir.finish(report.files)
    extrapolation = stats(report.extrapolation)
    if not report.rows:
        raise RecordError(f"--records ({', '.join(str(p) for p in paths)[:200]}) must hold at least one "
                          f"dispatch, combine, experts or moe_layer record the profile can predict")
    data = {"profile": profile.name or str(profile.path), "holdout": report.holdout.describe(),
            "measured_on": report.measured_on, "max_mape": max_mape,
            "passed": {f"{b}/{k}": ok for (b, k), ok in report.passed.items()},
            "summary": summary_rows(report.rows),
            "rows": [dict(r.__dict__, error_pct=r.error_pct) for r in report.rows],
            # extrapolation hold-outs (tokens, shape, run) against the two baselines
            "extrapolation": [dict(s.__dict__, skill=s.skill, beats_both=s.beats_both)
                              for s in extrapolation]}
    lines = [f"profile      {data['profile']} (hardware {profile.hardware})", *summary_lines(report, max_mape)]
    lines += extrapolation_lines(extrapolation)
    if out is not None:
        lines.append(f"full tables (by skew, tokens per rank, shape; skew effect) in "
                     f"{out / 'validation.md'}")
    failed = [f"{b}/{k}" for (b, k), ok in report.passed.items() if not ok]
    if args.max_mape is not None and failed:                 # the check --max-mape asked for
        return Report(data, lines, files=report.files, exit_code=1,
                      error=f"held-out MAPE above {max_mape:g}% for {', '.join(failed)}")
    return Report(data, lines, files=report.files)
