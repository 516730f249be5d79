"""A plan's results directory: the point cache that makes sweeps resumable, and the tables.

`points.jsonl` holds one line per finished point, `{"key", "metrics", "warnings"}`, appended
and flushed to disk as each point finishes (`epsim.io.write.LineAppender`), so an interrupted
sweep loses at most the points in flight; a rerun with the same directory recomputes only
points whose key is not there. A damaged line (cut short by a kill, edited, metrics missing or
not numbers) is never counted as done: it is reported in one line, dropped from the file and
its point recomputed. The results table (`results.csv`, `results.parquet`) is rewritten from
scratch on every run, atomically.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

from epsim.io import check_output_dir
from epsim.io.rundir import RunDir
from epsim.io.write import LineAppender, replacing, replacing_file, write_text
from epsim.plan.columns import METRIC_COLUMNS

CACHE_NAME = "points.jsonl"
SCREEN_CACHE = "screen.jsonl"
# every file a plan (also --max-rate, --fleet) may write in its results directory
# (`epsim.io.rundir`: one this run did not write again is stale and removed)
PLAN_FILES = ("results.csv", "results.parquet", "skipped.csv", "plan.json", "pareto.png",
              "sweep.png", "max_rate.json", "fleet.json", "pools.csv")


def entry_problem(entry: Any, required: Iterable[str] = ()) -> str | None:
    """Why a cache line's value is not a finished point, or None.

    A finished point is `{"key": str, "metrics": {name: number or null}, "warnings": [str]}`
    holding every `required` metric."""
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__}, not an object"
    if not isinstance(entry.get("key"), str) or not entry["key"]:
        return "no key"
    metrics = entry.get("metrics")
    if not isinstance(metrics, dict) or not metrics:
        return "no metrics" if not metrics else f"metrics are a {type(metrics).__name__}"
    bad = [k for k, v in metrics.items()
           if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))]
    if bad:
        return f"metric {bad[0]} is not a number"
    missing = [name for name in required if name not in metrics]
    if missing:
        return f"{len(missing)} metric(s) missing ({missing[0]}, ...)"
    if not isinstance(entry.get("warnings", []), list):
        return "warnings are not a list"
    return None


class PointCache:
    """Finished points by key; in memory only when `directory` is None.

    Args:
        required: metric names every cached point must hold (others are damaged).
    """

    def __init__(self, directory: Path | None, name: str = CACHE_NAME, required: Iterable[str] = ()):
        self.path = directory / name if directory is not None else None
        self.entries: dict[str, dict] = {}
        self.damaged: list[str] = []            # `line N: why` of each line dropped
        if self.path is not None and self.path.is_file():
            self._load(tuple(required))
        self._out = LineAppender(self.path) if self.path is not None else None

    def _load(self, required: tuple[str, ...]) -> None:
        raw = self.path.read_bytes()
        good: list[str] = []
        for lineno, line in enumerate(raw.decode("utf-8", errors="replace").split("\n"), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                problem = entry_problem(entry, required)
            except (json.JSONDecodeError, RecursionError):
                problem = "not valid JSON (a line cut short?)"
            if problem:
                self.damaged.append(f"line {lineno}: {problem}")
                continue
            self.entries[entry["key"]] = entry
            good.append(line)
        if self.damaged:
            # the file keeps only whole, valid points: a resumed point is never appended onto
            # a torn line, and the damage is reported once
            write_text(self.path, "".join(f"{line}\n" for line in good))
            more = f" and {len(self.damaged) - 1} more" if len(self.damaged) > 1 else ""
            warnings.warn(f"{self.path}: {len(self.damaged)} damaged line(s) dropped "
                          f"({self.damaged[0]}{more}); their points are recomputed", stacklevel=2)

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def split(self, points: list, value: Callable[[dict], Any] = lambda entry: entry
              ) -> tuple[dict[str, Any], list]:
        """(`value` of each cached entry by key, the points to compute: not cached, each
        distinct `point.key` once, in order)."""
        results: dict[str, Any] = {}
        todo: dict[str, Any] = {}
        for point in points:
            entry = self.entries.get(point.key)
            if entry is not None:
                results[point.key] = value(entry)
            else:
                todo.setdefault(point.key, point)
        return results, list(todo.values())

    def add(self, key: str, result: dict) -> None:
        """Keep a finished point (on disk at once: written and fsynced before this returns).

        Raises:
            WriteError: the line could not be written (the file keeps its earlier lines)."""
        entry = {"key": key, "metrics": result["metrics"], "warnings": result.get("warnings", [])}
        self.entries[key] = entry
        if self._out is not None:
            # NaN is written as JSON NaN (Python's json reads it back), keeping rows exact
            self._out.append(json.dumps(entry, separators=(",", ":")))

    def close(self) -> None:
        if self._out is not None:
            self._out.close()

    def __enter__(self) -> "PointCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_dir(out: str | Path | None) -> Path | None:
    if out is None:
        return None
    return check_output_dir(out)


def plan_dir(out_dir: Path | None, command: str = "plan"):
    """The results directory as a `RunDir` (held while the plan runs; `begin`/`finish` around
    its files), or a null context yielding None without one."""
    if out_dir is None:
        return contextlib.nullcontext()
    return RunDir(out_dir, command, PLAN_FILES, caches=(CACHE_NAME, SCREEN_CACHE))


def point_cache(out_dir: Path | None) -> PointCache:
    """The simulated points' cache (`points.jsonl`): every entry must hold every metric."""
    return PointCache(out_dir, CACHE_NAME, METRIC_COLUMNS)


def cell(value: Any) -> Any:
    """A table cell: lists and mappings as JSON text, everything else as is."""
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, sort_keys=True)
    return value


def _csv_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)        # round-trips exactly
    return str(value)


def write_csv(rows: list[dict], columns: list[str], path: Path) -> Path:
    """A table as CSV (NaN and None empty, floats exact), written atomically."""
    with replacing_file(path, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_text(row.get(name)) for name in columns])
    return path


def write_parquet(rows: list[dict], columns: list[str], path: Path) -> bool:
    """Write Parquet with pyarrow; False (nothing written) when pyarrow is not installed."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    data = {}
    for name in columns:
        values = [row.get(name) for row in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds == {int, float}:
            values = [None if v is None else float(v) for v in values]   # one numeric type
        elif len(kinds) > 1:
            values = [None if v is None else str(v) for v in values]     # mixed: as text
        data[name] = values
    table = pa.table(data)
    with replacing(path) as tmp:
        pq.write_table(table, tmp)
    return True

