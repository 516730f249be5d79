"""A plan's results directory: the point cache that makes sweeps resumable, and the tables.

`points.jsonl` holds one line per finished point, `{"key", "metrics", "warnings"}`, appended
and flushed as each point finishes, so an interrupted sweep loses at most the points in flight;
a rerun with the same directory recomputes only points whose key is not there. The results
table (`results.csv`, `results.parquet`) is rewritten from scratch on every run.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Callable

from epsim.io import check_output_dir


CACHE_NAME = "points.jsonl"


class PointCache:
    """Finished points by key; in memory only when `directory` is None."""

    def __init__(self, directory: Path | None, name: str = CACHE_NAME):
        self.path = directory / name if directory is not None else None
        self.entries: dict[str, dict] = {}
        self.num_unreadable = 0
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text(errors="replace").splitlines():  # a cut line may end mid-character
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    self.entries[entry["key"]] = entry
                except (json.JSONDecodeError, KeyError, TypeError):
                    self.num_unreadable += 1      # a line cut short by an interrupted run
        self._fh = None

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
        entry = {"key": key, "metrics": result["metrics"], "warnings": result.get("warnings", [])}
        self.entries[key] = entry
        if self.path is None:
            return
        if self._fh is None:
            self._fh = self.path.open("a")
        # NaN is written as JSON NaN (Python's json reads it back), keeping rows exact
        self._fh.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> "PointCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prepare_dir(out: str | Path | None) -> Path | None:
    if out is None:
        return None
    return check_output_dir(out)


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


def write_csv(rows: list[dict], columns: list[str], path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_text(row.get(name)) for name in columns])


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
    pq.write_table(pa.table(data), path)
    return True

