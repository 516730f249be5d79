"""Reading files with a size cap (also after gzip decompression) as UTF-8 text, and checking
the paths a command will write before it starts working.

Caps are generous for what epsim reads (a scenario is kilobytes, the shipped records ~6 MB
uncompressed) and small next to a machine's memory: `/dev/zero` or a 10 GB file is refused
after reading at most the cap, never read to the end.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from epsim.errors import EpsimError, SpecError

MAX_TEXT_BYTES = 256 * 2**20       # JSON / JSONL / CSV text (records, loads, traces, profiles)
MAX_YAML_BYTES = 4 * 2**20         # scenario YAML (pure-Python parser: keep it seconds)
MAX_BINARY_BYTES = 1024 * 2**20    # .npy arrays and SGLang .pt dumps


def _read_capped(fh, max_bytes: int) -> bytes | None:
    """At most `max_bytes`; None if the stream holds more."""
    data = fh.read(max_bytes + 1)
    return None if len(data) > max_bytes else data


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES,
               error: type[EpsimError] = SpecError) -> bytes:
    """A file's bytes, decompressed when it ends in `.gz`, at most `max_bytes` of either.

    Args:
        what: what the file is, for messages ("scenario file", "records").
    Raises:
        error: missing or unreadable file, a directory, over the cap, corrupt gzip (one line).
    """
    path = Path(path)
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):       # open() would wait for a writer forever
            raise error(f"{path}: {what} must be a regular file, not a named pipe")
        with open(path, "rb") as fh:
            data = _read_capped(fh, max_bytes)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or type(exc).__name__})") from None
    if data is None:
        raise error(f"{path}: {what} must be at most {max_bytes // 2**20} MiB (it is larger)")
    if path.suffix == ".gz":
        import gzip
        import io
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
                data = _read_capped(fh, max_bytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise error(f"{path}: {what} must be a valid gzip file ({_first_line(exc)})") from None
        if data is None:
            raise error(f"{path}: {what} must decompress to at most {max_bytes // 2**20} MiB")
    return data


def decode_text(data: bytes, where: str, what: str, error: type[EpsimError] = SpecError) -> str:
    """UTF-8 text of `data` (a leading BOM dropped).

    Raises:
        error: UTF-16 (BOM or NUL bytes), NUL bytes, or bytes that are not UTF-8, naming the
            offset and how to fix it.
    """
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise error(f"{where}: {what} must be UTF-8 text; it is UTF-16 (save it as UTF-8)")
    nul = data.find(b"\0")
    if nul >= 0:
        raise error(f"{where}: {what} must be UTF-8 text; byte {nul} is NUL (a binary or UTF-16 file?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: {what} must be UTF-8 text; byte {exc.start} (0x{data[exc.start]:02x}) "
                    f"is not (Latin-1 or another encoding? save it as UTF-8)") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES,
              error: type[EpsimError] = SpecError) -> str:
    """`read_bytes` then `decode_text`: a text file (gzipped or not) as a str."""
    return decode_text(read_bytes(path, what, max_bytes, error), str(path), what, error)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:120] if text else type(exc).__name__


def _dir_problem(path: Path) -> str | None:
    """Why `path` cannot be (made) a writable directory, or None (it exists afterwards)."""
    if path.exists() and not path.is_dir():
        return "it exists and is not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if not os.access(path, os.W_OK | os.X_OK):
        return "permission denied"
    return None


def check_output_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create the directory a command will write to, and check it is writable, before any work.

    Raises:
        SpecError: `--out ('/dev/null/x') must be a writable directory (Not a directory)`.
    """
    path = Path(path)
    problem = _dir_problem(path)
    if problem:
        raise SpecError(f"{flag} ({str(path)!r}) must be a writable directory ({problem})")
    return path


def check_output_file(path: str | Path, flag: str = "--out", must_exist: bool = False) -> Path:
    """Check a file a command will write (creating its folder): not a directory, writable.

    Args:
        must_exist: the file is updated in place (`validate --doc`): it must exist and be readable.
    Raises:
        SpecError: one line naming the flag, the path and why.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{flag} ({str(path)!r}) must be a file, not a directory")
    if must_exist and not path.is_file():
        raise SpecError(f"{flag} ({str(path)!r}) must be an existing file")
    problem = _dir_problem(path.parent)
    if problem:
        raise SpecError(f"{flag} ({str(path)!r}) must be in a writable directory "
                        f"({path.parent}: {problem})")
    if path.exists() and not os.access(path, os.W_OK | (os.R_OK if must_exist else 0)):
        raise SpecError(f"{flag} ({str(path)!r}) must be a writable file (permission denied)")
    return path
