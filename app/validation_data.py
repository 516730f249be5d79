"""What the app's Predicted vs measured page shows: validation of a profile on record files and
the extrapolation hold-outs, computed by `epsim.validate` and cached (`st.cache_data`). Uploads
are staged in a temporary folder, files on disk read in place, and messages name the files as
the user gave them. Each long step is said on the page as it starts.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import streamlit as st

from app.data import upload_name
from epsim.errors import EpsimError, RecordError

LOCAL_CALIBRATION_DIR = Path("runs") / "calibrate"      # where `epsim calibrate --live` writes


@dataclass(frozen=True)
class ValidationView:
    """Predicted against measured (`epsim.validate.validate`, without the extrapolation
    hold-outs: `extrapolation_holdouts` judges those when asked).

    Attributes:
        rows: one `epsim.validate.Comparison` per judged record.
        markdown: the error tables `epsim validate` prints.
        warnings: records skipped and extrapolations, one line each.
        measured_on: where the records were measured (device, EP sizes, dates, count).
    """

    rows: list
    markdown: str
    warnings: list
    measured_on: str = ""


@dataclass(frozen=True)
class ExtrapolationView:
    """The extrapolation hold-outs (`epsim.validate.extrapolation`).

    Attributes:
        rows: per axis and component, the model's MAPE next to the two baselines
            (`extrapolation.stats`, as dicts with `skill` and `beats_both`).
        markdown: the table `epsim validate` prints, with what each axis fitted and judged.
    """

    rows: list
    markdown: str


def shipped_validation_files() -> tuple[list[Path], Path | None]:
    """The records and profile that ship with epsim (empty / None before they do)."""
    from epsim.calibrate import default_record_paths
    from epsim.profile import default_profile_path
    profile = default_profile_path()
    return default_record_paths(), profile if profile.is_file() else None


def local_calibration_files() -> tuple[list[Path], Path | None]:
    """What `epsim calibrate --live` last wrote under ./runs/calibrate (empty / None if not)."""
    records = sorted(LOCAL_CALIBRATION_DIR.glob("*.jsonl")) if LOCAL_CALIBRATION_DIR.is_dir() else []
    profile = LOCAL_CALIBRATION_DIR / "profile.json"
    return [p for p in records if p.stat().st_size], profile if profile.is_file() else None


def files_key(files: list[tuple[str, bytes | Path]]) -> str:
    """What identifies record and profile files: the content of uploads, path, size and
    modification time of files on disk (so megabytes of shipped records are not hashed on
    every rerun)."""
    digest = hashlib.sha256()
    for name, content in files:
        if isinstance(content, Path):
            stat = content.stat()
            digest.update(f"{content.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
        else:
            digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    return digest.hexdigest()


def stage_box(what: str):
    """A line on the page saying which step of a long computation runs, with the time so far
    (`epsim.commands.output.stages` for the app); returns (stage function, clear function)."""
    box = st.empty()
    start = time.perf_counter()

    def stage(text: str) -> None:
        box.info(f"{what}: {text} ({time.perf_counter() - start:.0f} s so far; the result is kept "
                 f"for the next visit)", icon=":material/hourglass_top:")
    return stage, box.empty


@contextmanager
def _staged(record_files: tuple, profile_file: tuple | None = None):
    """The files as the user named them, on disk: uploads (bytes) written to a temporary
    folder, files on disk used where they are. Yields (record paths, profile path or None,
    clean: a message with the temporary folders left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        folders = []

        def place(i: int, name: str, content: bytes | Path) -> Path:
            if isinstance(content, Path):
                return content
            folders.append(Path(tmp) / f"upload{i}")       # names may repeat
            folders[-1].mkdir()
            path = folders[-1] / upload_name(name)
            path.write_bytes(content)
            return path

        paths = [place(i, name, content) for i, (name, content) in enumerate(record_files)]
        profile = place(len(paths), *profile_file) if profile_file else None

        def clean(text: str) -> str:
            """A message with the temporary folders left out: it names the files as given."""
            for folder in folders + [Path(tmp)]:
                for form in {str(folder), str(folder.resolve())}:
                    text = text.replace(form + "/", "")
            return text
        yield paths, profile, clean


@st.cache_data(show_spinner=False, max_entries=8)
def validation(key: str, _record_files: tuple, _profile_file: tuple) -> ValidationView:
    """Validate a profile on record files, each (name, bytes or a Path on disk); messages name
    the files. Cached by `key` (`files_key` of all the files). Each step (reading, predicting)
    is said on the page as it starts.

    Raises:
        EpsimError: an unreadable or invalid profile, or no record that can be judged.
    """
    from epsim.calibrate.inputs import load_records
    from epsim.profile import Profile
    from epsim.validate import validate
    names = ", ".join(upload_name(n) for n, _ in _record_files)
    with _staged(_record_files, _profile_file) as (paths, profile_path, clean), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = []                  # every file's problem at once, not the first only
        stage, clear = stage_box("Predicted vs measured")
        stage(f"reading the profile and {len(paths)} record file(s)")
        try:
            profile = Profile.load(profile_path)
        except EpsimError as exc:
            problems.append(clean(str(exc)))
        loaded = None
        try:
            loaded = load_records(paths)
            if not loaded[0]:
                problems.append(f"records ({names}) must hold at least one valid record"
                                + (f" (first problem: {clean(str(caught[0].message))})" if caught else ""))
        except EpsimError as exc:
            problems.append(clean(str(exc)))
        try:
            if problems:
                raise EpsimError("\n\n".join(problems))
            report = validate(profile, paths, plots=False, extrapolate=False, stage=stage,
                              loaded=loaded)
        except EpsimError as exc:
            raise type(exc)(clean(str(exc))) from None
        finally:
            clear()
        messages = [clean(str(w.message)) for w in caught]
        if not report.rows:
            first = f" (first problem: {messages[0]})" if messages else ""
            raise RecordError(f"records ({names}) must hold at least one dispatch, combine, experts "
                              f"or moe_layer record the profile can predict{first}")
        rows = [replace(r, where=clean(r.where)) for r in report.rows]
        from epsim.commands.output import merge_notes
        from epsim.validate.report import describe_measured_on
        return ValidationView(rows, clean(report.markdown), merge_notes(messages),
                              describe_measured_on(report.measured_on))


@st.cache_data(show_spinner=False, max_entries=8)
def extrapolation_holdouts(key: str, _record_files: tuple) -> ExtrapolationView:
    """The extrapolation hold-outs of record files (name, bytes or a Path): each axis refits a
    profile on one side and judges the other (a minute or more; each step said on the page).
    Cached by `key` (`files_key` of the record files)."""
    from epsim.validate import extrapolation
    with _staged(_record_files) as (paths, _, clean), warnings.catch_warnings():
        warnings.simplefilter("ignore")       # the files' notes show with the validation
        stage, clear = stage_box("Extrapolation hold-outs")
        try:
            judged, notes = extrapolation.extrapolation(paths, stage=stage)
        except EpsimError as exc:
            raise type(exc)(clean(str(exc))) from None
        finally:
            clear()
        rows = [dict(e.__dict__, skill=e.skill, beats_both=e.beats_both)
                for e in extrapolation.stats(judged)]
        return ExtrapolationView(rows, clean(extrapolation.markdown(judged, notes)))
