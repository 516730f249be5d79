"""Writing files atomically: every file a command writes goes to a temporary file in the same
directory, is flushed to disk (fsync), then renamed over the target, so a reader sees the old
file or the new one, never a half-written one, whatever interrupts the writer (a full disk,
Ctrl-C, `kill -9`, a power cut after the rename).

Write errors become one `WriteError` line naming the path and the reason, and leave the previous
file intact: `out/summary.json: cannot write (No space left on device); the previous file is
kept`. Appends (`append_line`) write whole lines, and undo a line cut short by an error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from pathlib import Path
from typing import IO, Iterator

from epsim.errors import WriteError

# `.summary.k3j_x9a2.tmp.json`: hidden, and ends in the target's suffix (matplotlib and
# pyarrow pick the format from it); left behind only by a kill -9 mid-write
TEMP_PATTERN = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp(\.[^.]+)?$")


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def write_error(path: str | Path, exc: OSError, kept: bool = True) -> WriteError:
    """The one-line error for `exc` raised writing `path`."""
    tail = "; the previous file is kept" if kept and Path(path).exists() else ""
    if exc.errno == errno.ENOSPC:
        tail += " (free some space, or choose another --out)"
    return WriteError(f"{path}: cannot write ({_reason(exc)}){tail}")


def _target(path: str | Path) -> Path:
    """The file to replace: a symbolic link's target (the link stays a link).

    Raises:
        WriteError: a directory in the way, or a file this user may not write."""
    path = Path(os.path.realpath(path))
    if path.is_dir():
        raise WriteError(f"{path}: cannot write (a directory is in the way)")
    if path.exists() and not os.access(path, os.W_OK):
        raise WriteError(f"{path}: cannot write (permission denied); the previous file is kept")
    return path


def _mode_for(path: Path) -> int:
    """The new file's permissions: the old file's, else what `open()` would give (0666 - umask)."""
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends normally the temporary file
    (written by name inside the block: `fig.savefig(tmp)`, `pq.write_table(t, tmp)`) is fsynced
    and renamed over `path`. On any error the temporary file is removed and `path` is untouched.

    Raises:
        WriteError: the write, fsync or rename failed (disk full, permission, a directory in
            the way, an immutable file).
    """
    target = _target(path)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=f".tmp{target.suffix}",
                                    dir=target.parent)
    except OSError as exc:
        raise write_error(target, exc) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(target, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


@contextlib.contextmanager
def replacing_file(path: str | Path, mode: str = "w", newline: str | None = None
                   ) -> Iterator[IO]:
    """`replacing` with the temporary file open for writing (`mode` "w" or "wb")."""
    with replacing(path) as tmp:
        encoding = None if "b" in mode else "utf-8"
        with open(tmp, mode, newline=newline, encoding=encoding) as fh:
            yield fh


def write_text(path: str | Path, text: str) -> Path:
    """Replace `path` with `text` (UTF-8) atomically; returns `path`."""
    with replacing_file(path) as fh:
        fh.write(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Replace `path` with `data` atomically; returns `path`."""
    with replacing_file(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def write_figure(fig, path: str | Path, dpi: int = 110, **savefig) -> Path:
    """Save a matplotlib figure atomically (the format from `path`'s suffix; `savefig`: more
    of `Figure.savefig`'s options); returns `path`."""
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=dpi, **savefig)
    return Path(path)


class LineAppender:
    """Appends whole lines to a file (JSON Lines caches and records), each flushed to disk as
    it is written. A line an error cuts short is cut off again, so the file always ends at a
    line's end; a file that does not (a kill -9 of an older writer) gets a newline first, so
    the torn line stays one unreadable line instead of swallowing the next."""

    def __init__(self, path: str | Path, sync: bool = True):
        self.path = Path(path)
        self.sync = sync
        self._fd: int | None = None

    def _open(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        self._fd = fd
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            self._write(b"\n")
        return fd

    def append(self, line: str) -> None:
        """Write `line` (without its newline) and a newline."""
        if self._fd is None:
            self._open()
        self._write(line.encode() + b"\n")

    def _write(self, data: bytes) -> None:
        fd = self._fd
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.sync:
                os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)              # no torn line left behind
            raise write_error(self.path, exc, kept=False) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "LineAppender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def remove_temp_files(directory: str | Path) -> list[str]:
    """Remove the temporary files an interrupted writer left in `directory` (names matching
    `TEMP_PATTERN`); returns their names."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if TEMP_PATTERN.match(entry.name) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed
