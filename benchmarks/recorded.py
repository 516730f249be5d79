"""A recorded validation result: the file a benchmark script writes with `--write`, naming the
command and the machine that made it, written atomically."""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Callable


def write_recorded(path: Path, title: str, command: str, started: float, body: str) -> None:
    """Write `body` to `path` (via a temporary file) under `title`, with `command` and the
    seconds since `started` (`time.perf_counter()`) on this machine."""
    text = (f"# {title}\n\n`{command}` ({time.perf_counter() - started:.0f} s on "
            f"{platform.node() or 'this machine'}: {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}); what is compared: the "
            f"script's docstring.\n\n{body}\n")
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def recorded_main(argv: list[str] | None, doc: str, path: Path, title: str, command: str,
                  make: Callable[..., str], what_if: tuple[str, str, Callable[[float], str]]
                  | None = None) -> int:
    """A validation script's command line: print what `make()` returns; with `--write` also
    record it in `path` (`write_recorded`). `what_if` = (option, help, check): that option's
    float value V prints `make(V)` instead, never recorded (`check(V)`: an error message, or "")."""
    if what_if is not None:
        option, help_text, check = what_if
        extra = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        extra.add_argument(option, type=float, default=None, help=help_text)
        known, argv = extra.parse_known_args(argv)
        value = getattr(known, option.lstrip("-").replace("-", "_"))
        if value is not None:
            if check(value):
                extra.error(check(value))
            print(make(value))
            return 0
    parser = argparse.ArgumentParser(description=doc.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--write", action="store_true", help=f"record {path.name}")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    body = make()
    print(body)
    if args.write:
        write_recorded(path, title, command, started, body)
        print(f"wrote {path.name}")
    return 0
