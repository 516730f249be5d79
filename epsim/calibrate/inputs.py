"""Measurement records as the fitter and the validator read them: every record keeps the file
and line it came from, so each problem is reported there.

Beyond the schema (`epsim.records`), a record the cost models cannot use is skipped with a
warning naming `<file>:<line>`: a timing below half a microsecond (times must be µs; seconds or
milliseconds were probably written), token-expert pairs that exceed `ep_size x tokens x top_k`
(counts in other units), or counts a component needs that are missing.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable

from epsim.errors import RecordError
from epsim.records import MeasurementRecord, iter_records

DEFAULT_RECORDS_DIR = "records/h200x2"     # package data: the records the shipped profile fits
MIN_PLAUSIBLE_US = 0.5
TIMED_KINDS = ("dispatch", "combine", "experts", "moe_layer", "allreduce", "rebalance", "p2p_copy")


class RecordWarning(UserWarning):
    """A record line was skipped or looks wrong; the message names the file and line."""


@dataclass(frozen=True)
class SourcedRecord:
    """A record and where it came from."""

    record: MeasurementRecord
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class RecordFileInfo:
    """One record file: path as given, sha256 of its bytes, records read from it."""

    path: str
    sha256: str
    num_records: int


def default_record_paths() -> list[Path]:
    """The shipped records (`epsim/data/records/h200x2/*.jsonl`), sorted; empty if none ship."""
    folder = Path(str(resources.files("epsim") / "data" / DEFAULT_RECORDS_DIR))
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def _display(path: Path) -> str:
    """A path relative to the working directory when it lies inside it (stable in provenance)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def plausibility_problem(record: MeasurementRecord) -> str:
    """Why a schema-valid record cannot be fitted or judged ("" when it can)."""
    if record.kind in TIMED_KINDS and record.median_us < MIN_PLAUSIBLE_US:
        return (f"median_us ({record.median_us:g}) must be >= {MIN_PLAUSIBLE_US} µs for a "
                f"{record.kind} record; times are microseconds (seconds or ms written?)")
    if record.kind in ("dispatch", "combine", "experts", "moe_layer") and record.top_k:
        pairs = sum(record.expert_tokens_per_rank) or sum(sum(r) for r in record.local_expert_tokens)
        most = record.ep_size * record.num_tokens_per_rank * record.top_k
        if pairs > most * (1 + 1e-9):
            return (f"token-expert pairs ({pairs:g}) must be <= ep_size x tokens x top_k "
                    f"({most}); counts in other units?")
    return ""


def load_records(paths: Iterable[str | Path], strict: bool = False
                 ) -> tuple[list[SourcedRecord], list[RecordFileInfo]]:
    """Read record files; bad or implausible lines are skipped with a RecordWarning (or raise).

    Args:
        strict: raise RecordError on the first bad line instead of warning.
    Returns:
        (records in file order, one RecordFileInfo per file).
    Raises:
        RecordError: no files, an unreadable file, or (strict) a bad line.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise RecordError("records (none given) must name at least one JSONL file")
    out: list[SourcedRecord] = []
    files: list[RecordFileInfo] = []
    for path in paths:
        shown = _display(path)
        if not path.is_file():
            raise RecordError(f"{shown}: no such record file")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            numbered = list(iter_records(path, strict=strict))
        for w in caught:
            warnings.warn(str(w.message), RecordWarning, stacklevel=2)
        count = 0
        for line, record in numbered:
            problem = plausibility_problem(record)
            if problem:
                message = f"{shown}:{line}: {problem}"
                if strict:
                    raise RecordError(message)
                warnings.warn(message + " -- skipped", RecordWarning, stacklevel=2)
                continue
            out.append(SourcedRecord(record, shown, line))
            count += 1
        files.append(RecordFileInfo(shown, hashlib.sha256(path.read_bytes()).hexdigest(), count))
    return out, files
