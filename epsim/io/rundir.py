"""A results directory (`--out` of simulate, plan, validate) holds one run: a lock while a
command works in it, and `manifest.json`, written last, naming every file of the run with its
size and sha256.

While a command writes its files the manifest says `"complete": false`; an interrupted run
stays marked so, and a reader (`check_complete`: `epsim.plan.load_results`, the app) refuses
it in one line. Files an earlier run left that this run did not write again (old figures,
`timeline.json`, `skipped.csv` of another sweep) are removed when the run finishes, and
listed in the manifest under `removed`. Caches that outlive runs (`points.jsonl`) are named
but not hashed; a second command on the same directory is refused while the first holds it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterable

from epsim.errors import SpecError
from epsim.io.write import remove_temp_files, write_text

MANIFEST = "manifest.json"
LOCK = ".epsim.lock"
_HELD: set[str] = set()          # directories this process holds (a nested RunDir shares it)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(directory: str | Path) -> dict | None:
    """The directory's manifest, None without one (or an unreadable one: `{}`)."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class RunDir:
    """One command's run in a results directory (a context manager holding its lock).

    Args:
        path: the directory (checked writable beforehand: `epsim.io.check_output_dir`).
        command: what writes it (`simulate`, `plan`, ...), for the manifest and messages.
        products: glob patterns of every file the command may write; one matching a pattern
            that this run does not write is stale and removed at `finish`.
        caches: files kept across runs (named in the manifest, not hashed, never removed).
    """

    def __init__(self, path: str | Path, command: str, products: Iterable[str] = (),
                 caches: Iterable[str] = ()):
        self.path = Path(path)
        self.command = command
        self.products = tuple(products)
        self.caches = tuple(caches)
        self._lock_fd: int | None = None
        self._previous: list[str] = []
        self._begun = False

    # -- the lock ---------------------------------------------------------------------------
    def __enter__(self) -> "RunDir":
        self.lock()
        return self

    def __exit__(self, *exc) -> None:
        self.unlock()

    def lock(self) -> None:
        """Hold the directory for this process (released when it exits, even by kill -9).

        Raises:
            SpecError: another command holds it.
        """
        try:
            import fcntl
        except ImportError:                       # not POSIX: no lock
            return
        key = os.path.realpath(self.path)
        if key in _HELD:                          # this process holds it already
            return
        path = self.path / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise SpecError(f"--out ({self.path}) must not be in use by another epsim command "
                            f"(process {holder} is writing there); wait for it, or choose "
                            f"another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} ({self.command})".encode(), 0)
        self._lock_fd = fd
        _HELD.add(key)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)               # closing releases the flock
            self._lock_fd = None
            _HELD.discard(os.path.realpath(self.path))

    # -- the run ----------------------------------------------------------------------------
    def begin(self) -> None:
        """Mark the directory incomplete before the first file of this run is written
        (remembering the previous run's files, so that they are known stale later)."""
        if self._begun:
            return
        old = read_manifest(self.path) or {}
        files = old.get("files", {})
        previous = list(files) if isinstance(files, dict) else []
        previous += [n for n in old.get("previous_files", []) if isinstance(n, str)]
        self._previous = sorted(set(previous))
        write_text(self.path / MANIFEST, json.dumps(
            {"complete": False, "command": self.command, "pid": os.getpid(), "started": _now(),
             "previous_files": self._previous}, indent=1) + "\n")
        self._begun = True

    def stale(self, written: set[str]) -> list[str]:
        """Files of an earlier run that this one did not write."""
        names = set(self._previous)
        try:
            present = os.listdir(self.path)
        except OSError:
            present = []
        names |= {n for n in present if any(fnmatch.fnmatchcase(n, p) for p in self.products)}
        keep = written | set(self.caches) | {MANIFEST, LOCK}
        return sorted(n for n in names if n not in keep and os.path.basename(n) == n)

    def finish(self, files: Iterable[str | Path], extra: dict | None = None) -> list[str]:
        """Remove stale files, then write the manifest (last). Returns the removed names.

        Args:
            files: the files this run wrote (those inside the directory are hashed).
            extra: more manifest fields (the command's own summary of the run).
        """
        self.begin()
        root = self.path.resolve()
        written = {}
        for f in files:
            f = Path(f)
            if f.resolve().parent == root and f.is_file():
                written[f.name] = {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
        removed = []
        for name in self.stale(set(written)):
            try:
                (self.path / name).unlink()
                removed.append(name)
            except FileNotFoundError:
                pass
            except OSError:
                pass                              # a directory, say: not ours to remove
        remove_temp_files(self.path)
        manifest = {"complete": True, "command": self.command, "finished": _now(),
                    "files": written, "caches": [c for c in self.caches if (self.path / c).exists()],
                    "removed": removed, **(extra or {})}
        from epsim import __version__
        manifest["epsim"] = __version__
        write_text(self.path / MANIFEST, json.dumps(manifest, indent=1) + "\n")
        return removed


def check_complete(directory: str | Path, names: Iterable[str] = ()) -> dict | None:
    """Refuse a results directory whose run did not finish, or whose named files changed
    since (sha256 against the manifest). A directory without a manifest (written by hand, or
    by an epsim older than manifests) is taken as it is: None.

    Raises:
        SpecError: one line naming the directory and what is wrong.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest is None:
        return None
    where = directory / MANIFEST
    if manifest.get("complete") is not True:
        who = manifest.get("command", "a command")
        raise SpecError(f"{where}: complete ({manifest.get('complete', 'unreadable')}) must be true: "
                        f"the `epsim {who}` run that writes {directory} did not finish "
                        f"(interrupted, failed, or still running); rerun it")
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for name in names:
        entry = files.get(name)
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: files ({name} missing) must list {name}: it is not from "
                            f"the run the manifest describes; rerun it")
        path = directory / name
        if not path.is_file() or file_sha256(path) != entry.get("sha256"):
            raise SpecError(f"{path}: sha256 must match {MANIFEST}: the file changed after its "
                            f"run finished (edited, cut short or from another run); rerun it")
    return manifest
