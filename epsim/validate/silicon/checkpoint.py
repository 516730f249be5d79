"""A silicon run's finished rows kept on disk as they finish, so an interrupted run resumes.

The whole in-scope set is close to an hour on two cores; a kill, a lost machine or a run cut off
by a time limit must not throw the finished rows away. With `--out DIR`, every row's entry is
appended to `DIR/silicon_rows.partial.jsonl` the moment it finishes (`epsim.io.write.LineAppender`:
written and fsynced before the next), one line `{"key", "code", "entry"}`:

- `key`: the row's id and the run's flag that changes an entry (`--approximate`);
- `code`: a fingerprint of what priced it: every file of the installed `epsim` package (code,
  profiles, extracted recipes) and the CSV's bytes. A line of other code is never reused.

A rerun with the same `--out` takes the lines of this code and runs only the other rows; the
file is removed once the run's outputs are written. A line cut short by a kill is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import epsim
from epsim.io.write import LineAppender

PARTIAL_NAME = "silicon_rows.partial.jsonl"
_FINGERPRINT_SUFFIXES = (".py", ".json", ".jsonl", ".yaml", ".gz", ".csv")


def code_fingerprint(csv_path: Path) -> str:
    """sha256 (first 16 hex digits) over the `epsim` package's files and the CSV's bytes."""
    digest = hashlib.sha256()
    root = Path(epsim.__file__).resolve().parent
    for path in sorted(p for p in root.rglob("*")
                       if p.suffix in _FINGERPRINT_SUFFIXES and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    digest.update(b"csv\0" + Path(csv_path).read_bytes())
    return digest.hexdigest()[:16]


def row_key(row_id: str, approximate: bool) -> str:
    return f"{row_id}|{'approximate' if approximate else 'as-stated'}"


class Checkpoint:
    """Finished entries of this code by key (read from `directory`'s partial file, when there is
    one), and the appender that keeps new ones. `directory` None: nothing kept."""

    def __init__(self, directory: Path | None, code: str):
        self.code = code
        self.path = directory / PARTIAL_NAME if directory is not None else None
        self.entries: dict[str, dict] = {}
        self.other_code = 0                 # lines a different code wrote (ignored)
        if self.path is not None and self.path.is_file():
            self._load()
        self._out = LineAppender(self.path) if self.path is not None else None

    def _load(self) -> None:
        for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                item = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue                    # cut short by a kill: that row runs again
            if not (isinstance(item, dict) and isinstance(item.get("key"), str)
                    and isinstance(item.get("entry"), dict)):
                continue
            if item.get("code") != self.code:
                self.other_code += 1
                continue
            self.entries[item["key"]] = item["entry"]

    def add(self, key: str, entry: dict) -> None:
        """Keep one finished entry (on disk before this returns)."""
        self.entries[key] = entry
        if self._out is not None:
            self._out.append(json.dumps({"key": key, "code": self.code, "entry": entry},
                                        separators=(",", ":")))

    def finish(self) -> None:
        """The run's outputs are written: the partial file has served."""
        self.close()
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
