"""A recorded validation result: the file a benchmark script writes with `--write`, naming the
command and the machine that made it, written atomically."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path


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
