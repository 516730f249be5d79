"""How every `epsim` command speaks: one convention, here and nowhere else.

A command's `run(args)` returns a `Report`: `data` (what `--json` prints: a JSON object whose
keys are the command's stable contract, plus `notes` and `files`), `lines` (the human summary,
aligned tables, SI units, no scientific notation, `-` for a missing value: `epsim.text`) and
`files` written.
`emit` prints it: the summary on stdout, then `wrote ...`, then every warning raised during
the run as one `note:` line under the result, each distinct message once (messages that differ
only in the values in parentheses, like the EP sizes of a plan, merge into one line).
`--json` prints the object alone; `--quiet` prints nothing but errors (files are still written).
"""

from __future__ import annotations

import atexit
import json
import math
import re
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

_PAREN = re.compile(r"\(([^()]*)\)")


@dataclass
class Report:
    """What a command produced.

    Attributes:
        data: the `--json` object (stable keys; `notes` and `files` are added by `emit`).
        lines: the human summary, one string per line.
        files: paths written (listed as `wrote ...` under the summary).
        exit_code: 0 done, 1 a run that finished but failed its check.
        notes: messages for the reader besides the warnings caught during the run.
        error: the run finished but its answer is an error or a failed check (printed after
            the summary on stderr as `epsim CMD: error: ...`; exit code 2 unless `exit_code`
            says otherwise).
    """

    data: dict
    lines: list[str]
    files: list[Path] = field(default_factory=list)
    exit_code: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def add_options(parser) -> None:
    """`--json`, `--quiet` and `--no-progress`, the same on every command (a command that
    draws no progress accepts it too, so scripts can pass it everywhere)."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (stable keys, warnings under 'notes') instead "
                             "of the summary")
    parser.add_argument("--quiet", action="store_true",
                        help="print nothing but errors (files are still written; the exit code "
                             "tells the outcome)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar or stage lines on stderr")


def wants_progress(args) -> bool:
    """A progress bar only for a person reading the summary (not with --json or --quiet)."""
    return not (getattr(args, "no_progress", False) or getattr(args, "json", False)
                or getattr(args, "quiet", False))


def stages(command: str, show: bool):
    """For work that has steps but no count to show: a function that prints each step as it
    starts on stderr, with the time so far (`epsim validate: predicting 2431 records (3 s)`);
    silent when not `show` (`wants_progress`) or when stderr is not a terminal (a log or a
    caller reading stderr for the error line wants none)."""
    start = time.perf_counter()
    show = show and sys.stderr.isatty()

    def stage(text: str) -> None:
        if show:
            print(f"epsim {command}: {text} ({time.perf_counter() - start:.0f} s)", file=sys.stderr,
                  flush=True)
    return stage


# -- notes -------------------------------------------------------------------------------------
def merge_notes(messages: Iterable[str]) -> list[str]:
    """Distinct messages in first-seen order; messages equal but for the text inside
    parentheses merge into one, the distinct values joined (`ep_size (8, 16) outside ...`)."""
    groups: dict[str, list[list[str]]] = {}
    for message in messages:
        message = " ".join(str(message).split())              # one line
        template = _PAREN.sub("()", message)
        values = _PAREN.findall(message)
        groups.setdefault(template, [])
        if values not in groups[template]:
            groups[template].append(values)
    out = []
    for template, variants in groups.items():
        merged = []
        for i in range(len(variants[0])):
            distinct = list(dict.fromkeys(v[i] for v in variants))
            merged.append(", ".join(distinct))
        parts = template.split("()")
        out.append(parts[0] + "".join(f"({m}){p}" for m, p in zip(merged, parts[1:])))
    return out


def without_category(message: str) -> str:
    """`ExtrapolationWarning: profile ...` -> `profile ...` (a note says what, not which class;
    worker processes report their warnings with the class in front)."""
    head, _, rest = message.partition(": ")
    return rest if rest and head.endswith("Warning") and " " not in head else message


@contextmanager
def caught_warnings() -> Iterator[list[str]]:
    """Collect every warning raised inside as its message (nothing printed): the list fills
    when the block ends."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield messages
        finally:
            messages += [str(w.message) for w in caught]


def defer_warnings_to_exit() -> None:
    """For scripts: warnings become `note:` lines printed once each when the script ends
    (under its result), never Python's file/line echo."""
    seen: list[str] = []

    def collect(message, category, filename, lineno, file=None, line=None):
        seen.append(str(message))

    def flush():
        sys.stdout.flush()
        for note in merge_notes(seen):
            print(f"note: {note}")

    warnings.showwarning = collect
    warnings.simplefilter("always")
    atexit.register(flush)


# -- printing ----------------------------------------------------------------------------------
def emit(report: Report, args, warned: Sequence[str] = ()) -> int:
    """Print `report` by the convention (see the module docstring); returns its exit code."""
    notes = merge_notes([*report.notes, *warned])
    code = report.exit_code or (2 if report.error else 0)
    if getattr(args, "json", False) and not getattr(args, "quiet", False):
        data = {**report.data, "files": [str(p) for p in report.files], "notes": notes}
        if report.error:
            data["error"] = report.error
        print(json.dumps(data, indent=1, default=_json_default, allow_nan=False))
    elif not getattr(args, "quiet", False):
        lines = list(report.lines)
        if report.files:
            lines.append(wrote_line(report.files))
        lines += [f"note: {n}" for n in notes]
        print("\n".join(lines))
    if report.error and not getattr(args, "json", False):    # with --json: its "error" key
        sys.stdout.flush()
        print(f"epsim {args.command}: error: {report.error}", file=sys.stderr)
    return code


def print_error(prog: str, message: str, args) -> None:
    """A failed command's one line: `PROG: error: MESSAGE` on stderr, or with `--json` the
    object `{"error": ..., "exit_code": 2}` on stdout (what a script parsing the output reads)."""
    if getattr(args, "json", False):
        print(json.dumps({"error": f"{prog}: {message}", "exit_code": 2}))
    else:
        print(f"{prog}: error: {message}", file=sys.stderr)


def wrote_line(files: Sequence[Path]) -> str:
    """`wrote a.json, b.png to DIR` (one directory), else `wrote DIR/a.json, OTHER/b.md`."""
    files = [Path(p) for p in files]
    parents = {p.parent for p in files}
    if len(parents) == 1 and len(files) > 1:
        return f"wrote {', '.join(p.name for p in files)} to {files[0].parent}"
    return f"wrote {', '.join(str(p) for p in files)}"


def _json_default(value):
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_safe(value):
    """NaN and infinities as None (JSON has none), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
