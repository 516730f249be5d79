"""`validate()`: record files and a profile in, the error tables, CSVs and figures out.

The hold-out rule defaults to the one the profile was fitted with (its provenance), so the
records the fit never saw are the ones judged. `--doc` rewrites the part of a markdown file
between `DOC_BEGIN` and `DOC_END` with the generated tables: docs/validation.md regenerates
from the shipped records and profile with one command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from epsim.calibrate.holdout import Holdout
from epsim.calibrate.inputs import load_records, merge_passes
from epsim.errors import ProfileError
from epsim.io import check_output_dir, check_output_file, read_text
from epsim.io.write import write_text
from epsim.profile import Profile
from epsim.validate import extrapolation
from epsim.validate.compare import Comparison, compare
from epsim.validate.plots import write_plots
from epsim.validate.table import markdown, skew_effects, verdict, write_csv

DOC_BEGIN = "<!-- BEGIN epsim validate (generated; do not edit by hand) -->"
DOC_END = "<!-- END epsim validate -->"


@dataclass
class ValidationReport:
    """Result of `validate`.

    Attributes:
        rows: one Comparison per judged record.
        markdown: the tables (the text `--doc` inserts).
        passed: (backend, kind) -> held-out MAPE within the bound.
        files: what was written.
        measured_on: where the records were measured, one dict per device (`device`,
            `ep_sizes`, `first_date`, `last_date`, `num_records`).
    """

    rows: list[Comparison]
    markdown: str
    passed: dict[tuple[str, str], bool]
    holdout: Holdout
    files: list[Path] = field(default_factory=list)
    measured_on: list[dict] = field(default_factory=list)
    extrapolation: list = field(default_factory=list)   # epsim.validate.extrapolation.Judged


def measured_on(records) -> list[dict]:
    """Devices, EP sizes and dates of `SourcedRecord`s, one dict per device (sorted)."""
    by_device: dict[str, list] = {}
    for s in records:
        by_device.setdefault(s.record.provenance.device or "unknown device", []).append(s.record)
    out = []
    for device in sorted(by_device):
        recs = by_device[device]
        dates = sorted(r.provenance.timestamp[:10] for r in recs if r.provenance.timestamp)
        out.append({"device": device, "ep_sizes": sorted({r.ep_size for r in recs}),
                    "first_date": dates[0] if dates else None,
                    "last_date": dates[-1] if dates else None, "num_records": len(recs)})
    return out


def describe_measured_on(where: list[dict]) -> str:
    """`2x NVIDIA H200, EP 2, 2026-11-28 to 2026-11-30 (4336 records)`; `; ` between devices."""
    parts = []
    for w in where:
        dates = (w["first_date"] if w["first_date"] == w["last_date"] else
                 f"{w['first_date']} to {w['last_date']}") if w["first_date"] else "undated"
        parts.append(f"{w['device']}, EP {', '.join(map(str, w['ep_sizes']))}, {dates} "
                     f"({w['num_records']} records)")
    return "; ".join(parts)


def holdout_of(profile: Profile, rule: str | None) -> Holdout:
    """The rule given, else the profile's own fit rule, else the default."""
    if rule is not None:
        return Holdout.parse(rule)
    return Holdout.parse(profile.provenance.holdout.get("rule"))


def read_doc(path: Path, markers: tuple[str, str] = (DOC_BEGIN, DOC_END)) -> tuple[str, int, int]:
    """The markdown text of `--doc` and where its generated part (between `markers`) begins
    and ends.

    Raises:
        SpecError / ProfileError: not a writable text file, or the markers missing.
    """
    check_output_file(path, "--doc", must_exist=True)
    doc = read_text(path, "--doc file", error=ProfileError)
    begin, end = doc.find(markers[0]), doc.find(markers[1])
    if begin < 0 or end < begin:
        raise ProfileError(f"{path}: markers ({markers[0]!r} ... {markers[1]!r}) must enclose "
                           f"the generated tables")
    return doc, begin, end


def update_doc(path: Path, text: str, markers: tuple[str, str] = (DOC_BEGIN, DOC_END)) -> None:
    """Replace the generated part of a markdown file (between the two markers), atomically."""
    doc, begin, end = read_doc(path, markers)
    write_text(path, doc[:begin + len(markers[0])] + "\n\n" + text + "\n" + doc[end:])


def validate(profile: Profile, paths: Iterable[str | Path], rule: str | None = None,
             out: str | Path | None = None, doc: str | Path | None = None, plots: bool = True,
             max_mape: float = 10.0, strict: bool = False, extrapolate: bool = True,
             run_pairs: Sequence = (), judged_only: Sequence = (),
             stage: Callable[[str], None] | None = None, loaded: tuple | None = None
             ) -> ValidationReport:
    """Judge `profile` on record files; `stage` hears each step as it starts (a minute or more
    in all with the extrapolation hold-outs).

    Args:
        rule: hold-out rule (default: the profile's own).
        out: directory for validation.md, comparisons/summary/skew_effect CSVs and PNGs.
        doc: a markdown file whose generated section is replaced by the tables.
        max_mape: the bound the verdict column checks (percent).
        extrapolate: also judge the extrapolation axes (`epsim.validate.extrapolation`): tokens
            and shape on `paths` (plus the judged side of `judged_only`, never fitted), run on
            each of `run_pairs` (`extrapolation.RunPair`).
        loaded: `load_records(paths, strict)` when the caller has read them already (the app
            reads once to report every bad file together), so they are not read again.
    Raises:
        EpsimError: bad records, rule, `out` or `doc` (these two checked before any work).
    """
    if out is not None:
        check_output_dir(out)
    if doc is not None:
        read_doc(Path(doc))
    stage = stage or (lambda text: None)
    holdout = holdout_of(profile, rule)
    if loaded is None:
        stage("reading the records")
    records, files = loaded if loaded is not None else load_records(paths, strict=strict)
    where = measured_on(records)
    records = merge_passes(records)
    stage(f"predicting {len(records)} records with profile {profile.name or profile.path}")
    rows = compare(records, profile, holdout)
    prov = profile.provenance
    header = {
        "profile": f"{profile.name or profile.path} (hardware {profile.hardware}; records sha256 "
                   f"{prov.records_sha256[:12] or 'n/a'})",
        "records": ", ".join(f"{f.path} ({f.num_records}, sha256 {f.sha256[:12]})" for f in files),
        "measured on": describe_measured_on(where),
        "hold-out rule": holdout.describe(),
        "judged": f"{sum(r.split == 'holdout' for r in rows)} held-out and "
                  f"{sum(r.split == 'fit' for r in rows)} fit-set records",
    }
    text = markdown(rows, header, max_mape)
    judged = []
    if extrapolate:
        judged, notes = extrapolation.extrapolation(paths, run_pairs, judged_only, stage)
        text = extrapolation.markdown(judged, notes, max_mape) + "\n" + text
    report = ValidationReport(rows, text, verdict(rows, max_mape), holdout, measured_on=where,
                              extrapolation=judged)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "validation.md", text)
        report.files.append(out / "validation.md")
        report.files += write_csv(rows, skew_effects(rows), out)
        if plots:
            stage("drawing the plots")
            report.files += write_plots(rows, out)
    if doc is not None:
        update_doc(Path(doc), text)
        report.files.append(Path(doc))
    return report
