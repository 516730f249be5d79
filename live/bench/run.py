"""What every live bench run shares (`live.bench.sweep` on EP ranks, `live.bench.components` on one
device): its command line (output folder, records file, size, seed, iterations, passes, time
budget, progress), the checks on its counts, the records file it appends to, and its outcome
(`RunResult`: records written, points run, problems, seconds, provenance). `log_to` is the
output folder and log of every live entry point (the benches, `live.bench.eplb`,
`live.bench.gpu_suite`); `run_one_device` what a one-device bench's command line does once
parsed (`live.bench.components`, `live.bench.layers`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from live.errors import LiveError


@dataclass
class RunResult:
    """What a bench run produced. `live.bench.sweep.BenchResult` and
    `live.bench.components.ComponentResult` add what only they count.

    Attributes:
        records_path: the JSON Lines file the records were appended to.
        num_records: records written; num_points: points run (all passes).
        seconds: wall time of the run (host clock, s).
        provenance: device, library versions and commit (`live.bench.provenance.collect`).
    """

    records_path: Path
    num_records: int = 0
    num_points: int = 0
    seconds: float = 0.0
    provenance: dict = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        """What went wrong or was left out, one message each (none here: see the subclasses)."""
        return []

    def summary(self) -> dict:
        """The JSON summary every bench writes next to its records."""
        return {"records": str(self.records_path), "num_records": self.num_records,
                "num_points": self.num_points, "seconds": round(self.seconds, 1),
                "provenance": self.provenance}


def check_counts(num_iters: int | None, num_passes: int | None) -> None:
    """Raise LiveError unless iterations and passes are None (the default) or >= 1 (0 would
    otherwise fall back to the default silently)."""
    for name, value in (("iters", num_iters), ("passes", num_passes)):
        if value is not None and value <= 0:
            raise LiveError(f"{name} ({value}) must be >= 1")


def open_records(records_path: str | Path) -> Path:
    """The records file, its folder made and the file created if missing (records are appended
    as measured, so a run stopped by its budget keeps what it measured)."""
    records_path = Path(records_path)
    records_path.parent.mkdir(parents=True, exist_ok=True)
    records_path.touch()
    return records_path


def add_run_options(parser: argparse.ArgumentParser, name: str, cpu_help: str) -> None:
    """The options every bench takes: `--out` (default `$OUT` or `out/<name>`), `--records-name`
    (`<name>.jsonl`), `--quick`, `--cpu`, `--iters`, `--passes`, `--seed`, `--budget-s`,
    `--no-progress`."""
    parser.add_argument("--out", default=os.environ.get("OUT", f"out/{name}"), help="output folder")
    parser.add_argument("--records-name", default=f"{name}.jsonl", help="records file in --out")
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--cpu", action="store_true", help=cpu_help)
    parser.add_argument("--iters", type=int, default=None, help="timed iterations per point")
    parser.add_argument("--passes", type=int, default=None,
                        help="sweeps over the grid in shuffled orders (the pass-to-pass spread)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=float("inf"),
                        help="stop starting points after this many seconds (records kept)")
    parser.add_argument("--no-progress", action="store_true")


def write_summary(out: Path, name: str, summary: dict) -> Path:
    """`<out>/<name>_summary.json`, indented."""
    path = Path(out) / f"{name}_summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return path


def log_to(out: str | Path, name: str, mode: str = "w", levels: bool = False) -> Path:
    """Make the output folder and send INFO logging to `<out>/<name>.log` (`mode` "a" appends
    to an earlier run's log) and to stderr; with `levels`, each line names its level.

    Returns:
        The output folder.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, force=True,
                        format="%(asctime)s %(levelname)s %(message)s" if levels
                        else "%(asctime)s %(message)s",
                        handlers=[logging.FileHandler(out / f"{name}.log", mode=mode),
                                  logging.StreamHandler(sys.stderr)])
    return out


def run_one_device(name: str, args: argparse.Namespace, make_plan: Callable[[], object],
                   run: Callable, summary: dict | None = None) -> int:
    """A one-device bench's command line after parsing (`add_run_options(parser, name, ...)`):
    no GPU visible without `--cpu`, or a plan `make_plan` refuses (LiveError), is one line and
    exit 2; else the plan's notes, `run(plan, records_path, budget_s, progress)` into `--out`,
    `<name>_summary.json` (plus `summary`) and exit 0 when records were written, 1 otherwise.
    """
    import torch
    prog = f"live.bench.{name}"
    if not args.cpu and not torch.cuda.is_available():
        print(f"{prog}: error: no CUDA GPU visible; pass --cpu to time on the CPU", file=sys.stderr)
        return 2
    try:
        plan = make_plan()
    except LiveError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for note in plan.notes:
        print(f"{prog}: {note}", file=sys.stderr)
    result = run(plan, out / args.records_name, args.budget_s, not args.no_progress)
    write_summary(out, name, dict(result.summary(), notes=list(plan.notes), **(summary or {})))
    print(f"{prog}: {result.line()} -> {result.records_path}", file=sys.stderr)
    return 0 if result.num_records else 1
