"""Measurement records as the fitter and the validator read them: every record keeps the file
and line it came from, so each problem is reported there.

Beyond the schema (`epsim.records`), a record the cost models cannot use is skipped with a
warning naming `<file>:<line>`: a timing below half a microsecond (times must be µs; seconds or
milliseconds were probably written), token-expert pairs that exceed `ep_size x tokens x top_k`
(counts in other units), or counts a component needs that are missing.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable

import numpy as np

from epsim.calibrate.aic_tables import check_calibration_input
from epsim.errors import RecordError
from epsim.records import MeasurementRecord, iter_records

# package data: the records the shipped profile fits -- two H200 over NVLink (communication and
# the 2-GPU block's stages) and one H200 on two machines (experts, attention, dense MLP kernels,
# the block's own ops)
DEFAULT_RECORDS_DIRS = ("records/h200x2", "records/h200_single")
MIN_PLAUSIBLE_US = 0.5
TIMED_KINDS = ("dispatch", "combine", "experts", "moe_layer", "allreduce", "rebalance", "p2p_copy")


class RecordWarning(UserWarning):
    """A record line was skipped or looks wrong; the message names the file and line."""


@dataclass(frozen=True)
class SourcedRecord:
    """A record and where it came from.

    Attributes:
        mean_of_pass_medians_us: for passes merged by `merge_passes`, the mean of the passes'
            medians (µs); None for a single measurement.
    """

    record: MeasurementRecord
    path: str
    line: int
    mean_of_pass_medians_us: float | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def measured_us(self) -> float:
        """The time fits and validation compare with (µs): the record's median, or for merged
        passes the mean of their medians (the expected time over the host's drifting states)."""
        if self.mean_of_pass_medians_us is None:
            return self.record.median_us
        return self.mean_of_pass_medians_us


@dataclass(frozen=True)
class RecordFileInfo:
    """One record file: path as given, sha256 of its bytes, records read from it."""

    path: str
    sha256: str
    num_records: int


def default_record_paths() -> list[Path]:
    """The shipped records (`epsim/data/records/{h200x2,h200_single}/*.jsonl[.gz]`), sorted
    within each folder; empty if none."""
    out = []
    for name in DEFAULT_RECORDS_DIRS:
        folder = Path(str(resources.files("epsim") / "data" / name))
        if folder.is_dir():
            out += sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")])
    return out


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
        # loads sampled by epsim.routing are rounded per expert (single-GPU `experts` records,
        # live.bench.component_ops): up to half a pair per expert above the total, never more
        if pairs > most * (1 + 1e-9) + record.num_experts / 2:
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
        RecordError: no files, an unreadable file, a file that is not a record file (an
            end-to-end result: `aic_tables.check_calibration_input`), or (strict) a bad line.
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
        check_calibration_input(path)    # record files only: end-to-end results are never read
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


_TIMING_FIELDS = ("median_us", "p10_us", "p90_us", "per_rank_median_us", "num_iters", "extra",
                  "provenance")


def config_key(record: MeasurementRecord) -> str:
    """Everything that identifies a measured configuration (not its timings or pass)."""
    return json.dumps(record.model_dump(exclude=set(_TIMING_FIELDS)), sort_keys=True)


def merge_passes(records: list[SourcedRecord]) -> list[SourcedRecord]:
    """Merge the passes of a multi-pass bench run: one record per configuration.

    `live.bench.sweep` sweeps its grid several times in shuffled orders (records carry `extra.pass`)
    because the host's overhead drifts between states that outlast a point. The merged record
    keeps the first pass's counts (routing is seeded, so identical); its `median_us`, `p10_us`
    and `p90_us` are the medians of the passes' (so p10 <= median <= p90 holds as in every
    pass), `extra.pass_medians_us` lists the passes, and the SourcedRecord carries the mean of
    the passes' medians (`mean_of_pass_medians_us`, the expected time over host states: what
    `measured_us` gives the fit and validation). Records without `extra.pass` are kept as they
    are.

    Returns:
        records in first-seen order, where the first line of a merged group names it.
    """
    groups: dict[str, list[SourcedRecord]] = {}
    order: list[tuple[str, SourcedRecord]] = []
    for item in records:
        if "pass" not in item.record.extra:
            order.append(("", item))
            continue
        key = config_key(item.record)
        if key not in groups:
            groups[key] = []
            order.append((key, item))
        groups[key].append(item)
    out = []
    for key, item in order:
        if not key:
            out.append(item)
            continue
        members = [m.record for m in groups[key]]
        if len(members) == 1:
            out.append(item)
            continue
        medians = [m.median_us for m in members]
        extra = {k: v for k, v in members[0].extra.items() if k != "pass"}
        extra.update(passes=len(members), pass_medians_us=medians)
        # medians of per-pass statistics keep their order (p10_i <= median_i <= p90_i for every
        # pass gives the same for the medians), so nothing needs clamping
        merged = members[0].model_copy(update=dict(
            median_us=float(np.median(medians)),
            p10_us=float(np.median([m.p10_us for m in members])),
            p90_us=float(np.median([m.p90_us for m in members])),
            per_rank_median_us=np.median([m.per_rank_median_us for m in members], axis=0).tolist()
            if all(m.per_rank_median_us for m in members) else members[0].per_rank_median_us,
            extra=extra))
        out.append(SourcedRecord(merged, item.path, item.line, float(np.mean(medians))))
    return out
