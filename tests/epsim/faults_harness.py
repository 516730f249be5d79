"""The faults campaign's harness (`faults_campaign.py`): running `python -m epsim.cli` in its
own process and judging it (tracebacks, multi-line errors, hangs, exit codes), the problems it
counts, and what it reads back: a results directory's state (complete, marked incomplete, or
neither), its files' hashes, a plan's table and cache; a small tmpfs to fill."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.epsim.bad_input_cases import SCENARIO

REPO = Path(__file__).resolve().parents[2]
GLOO = REPO / "tests" / "app" / "data"
PROBLEMS = ("traceback", "multi-line", "hang", "orphan", "stale", "lost", "unmarked", "exit",
            "note", "semaphore")
EXIT_LIMIT_S = 10.0          # a SIGINT / SIGTERM must end the command within this
RUN_LIMIT_S = 300.0          # any one command
TMPFS_BYTES = 6 * 2**20
# four points; `--seed` gives another four (so an earlier run's points are not this run's)
PLAN_SWEEP = ("--sweep", "workload.arrivals.rate_per_s=40,50,60,70")
# what a run's table is compared on (point_id hashes the scenario, the files it references,
# the profile and the code: equal ids and equal metrics are the same answer)
VOLATILE = {"wall_s", "wall_seconds"}


@dataclass
class Run:
    rc: int | None
    out: str
    err: str
    seconds: float


@dataclass
class Campaign:
    """Runs the families under `root`, collecting problems and counting checks per family."""

    root: Path
    seed: int = 0
    problems: list[tuple[str, str, str]] = field(default_factory=list)    # (kind, case, detail)
    cases: Counter = field(default_factory=Counter)                      # family -> cases run
    seconds: dict = field(default_factory=dict)                          # family -> wall s
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "0"}
        self._ids = 0

    # -- running -----------------------------------------------------------------------------
    def folder(self, name: str) -> Path:
        self._ids += 1
        path = self.root / f"{self._ids:03d}-{name}"
        path.mkdir(parents=True)
        return path

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "epsim.cli", *args], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def cli(self, case: str, *args: str, expect: tuple[int, ...] = (0,), limit_s: float = RUN_LIMIT_S
            ) -> Run:
        """Run `epsim ARGS`; a traceback, a multi-line error, a hang or an exit code outside
        `expect` is a problem of `case`."""
        return self.wait(self.popen(*args), case, expect, limit_s, f"epsim {args[0]} ran past {limit_s:g} s")

    def wait(self, proc: subprocess.Popen, case: str, expect: tuple[int, ...],
             limit_s: float = RUN_LIMIT_S, hang: str = "") -> Run:
        """Wait for `proc` (killing it and everything under it past `limit_s`: a `hang`, said
        as `hang`), then `judge` it; `Run.seconds` counts from this call."""
        start = time.perf_counter()
        try:
            out, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            out, err = proc.communicate()
            self.problem("hang", case, hang or f"still running after {limit_s:g} s")
        run = Run(proc.returncode, out, err, time.perf_counter() - start)
        self.judge(case, run, expect)
        return run

    def judge(self, case: str, run: Run, expect: tuple[int, ...]) -> None:
        if "Traceback (most recent call last)" in run.err:
            self.problem("traceback", case, run.err[-800:])
        elif run.rc == 2 and len(error_lines(run.err)) != 1:
            self.problem("multi-line", case, run.err[-800:])
        if "leaked semaphore" in run.err:
            self.problem("semaphore", case, run.err[-400:])
        if run.rc not in expect:
            self.problem("exit", case, f"exit {run.rc}, expected {expect}: {run.err[-400:]}")

    def problem(self, kind: str, case: str, detail: str) -> None:
        assert kind in PROBLEMS, kind
        self.problems.append((kind, case, " ".join(str(detail).split())[:600]))

    def check(self, ok: bool, kind: str, case: str, detail: str) -> bool:
        if not ok:
            self.problem(kind, case, detail)
        return ok

    # -- inputs --------------------------------------------------------------------------------
    def scenario(self, folder: Path, duration_s: float = 0.5, **workload) -> Path:
        data = {**SCENARIO, "workload": {**SCENARIO["workload"], "duration_s": duration_s, **workload}}
        path = folder / "s.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def plan_args(self, scenario: Path, out: Path, *extra: str, workers: int = 1) -> list[str]:
        return ["plan", str(scenario), *PLAN_SWEEP, "--workers", str(workers), "--no-keep-up",
                "--no-progress", "--out", str(out), *extra]

    def simulate_args(self, scenario: Path, out: Path, *extra: str) -> list[str]:
        return ["simulate", str(scenario), "--no-progress", "--timeline", "--out", str(out), *extra]


# -- helpers ---------------------------------------------------------------------------------------
def error_lines(stderr: str) -> list[str]:
    """stderr lines other than notes and warnings (what an error must keep to one)."""
    return [line for line in stderr.splitlines()
            if line.strip() and not line.startswith(("note:", "epsim: "))]


def descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a process we started and every process under it (by pid, never by name)."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def files_of(folder: Path) -> dict[str, str]:
    """{name: sha256} of the plain files in `folder` (lock and temporary files left out)."""
    from epsim.io.write import TEMP_PATTERN
    out = {}
    if folder.is_dir():
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.name != ".epsim.lock" and not TEMP_PATTERN.match(path.name):
                out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def dir_state(folder: Path) -> str:
    """`complete` (manifest complete, every listed file matching), `incomplete` (marked so),
    `none` (no manifest), or what is wrong (a manifest saying complete that does not match)."""
    from epsim.errors import SpecError
    from epsim.io.rundir import check_complete, read_manifest
    manifest = read_manifest(folder)
    if manifest is None:
        return "none"
    if manifest.get("complete") is not True:
        return "incomplete"
    try:
        check_complete(folder, list(manifest.get("files", {})))
    except SpecError as exc:
        return f"complete but {exc}"
    return "complete"


def table(folder: Path) -> list[dict]:
    """results.csv rows as compared across runs."""
    with open(folder / "results.csv", newline="") as fh:
        return [{k: v for k, v in row.items() if k not in VOLATILE} for row in csv.DictReader(fh)]


def summary(folder: Path) -> dict:
    data = json.loads((folder / "summary.json").read_text())
    return {k: v for k, v in data.items() if k not in VOLATILE}


def cache_lines(folder: Path) -> list[str]:
    path = folder / "points.jsonl"
    return [line for line in path.read_text(errors="replace").splitlines() if line.strip()] \
        if path.is_file() else []


def plan_counts(folder: Path) -> dict:
    return json.loads((folder / "plan.json").read_text())["counts"]


# -- disk full, a directory in the way, an immutable file ---------------------------------------
@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int = TMPFS_BYTES):
    """A small tmpfs at `path`, unmounted afterwards; raises OSError where it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode:
        raise OSError(proc.stderr.strip() or f"mount exited {proc.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system holding `folder` to the last byte; returns the filler file."""
    filler = folder / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 1 << 12, 1):             # big blocks, then the last bytes
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler

