"""Run bad-input campaign cases (`bad_input_cases.py`) inside one process, each under a time
alarm and with its peak memory measured, and classify what happened.

    python -m tests.epsim.bad_input_runner --shard 0 --shards 2 --out results.jsonl

Each case calls `epsim.cli.main(argv)` (or the app's loader functions, as the app calls them)
with stdout/stderr captured. Outcomes: `refused` (exit 2 with exactly one error line on stderr,
or an app loader raising EpsimError), `accepted` (exit 0 or 1), and the failures: `traceback`
(an exception escaped), `multi-line` (exit 2 with more than one line), `timeout`, `memory`
(MemoryError or the peak over the limit), `accepted-bad` (a must-refuse input was accepted),
`bad-exit`, `stopped` (a plan that should have gone on past its failing point). The process
runs under RLIMIT_AS; it appends one JSON line per finished case and writes `START <name>` to
`<out>.progress` before each, so a parent can name a case that hangs or kills the process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace

LIMIT_S = 20.0                 # per case, wall clock
LIMIT_PEAK_MB = 2048           # per case, peak resident memory of the process while it runs
ADDRESS_SPACE_MB = 12 * 1024   # the worker's hard RLIMIT_AS (torch reserves much virtual space)
UPLOAD_CAP_BYTES = 256 * 2**20 + 1   # what a browser upload may hand the app (read at most this)


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so that `except Exception` in the code under test
    cannot swallow it."""


def _on_alarm(signum, frame):
    raise CaseTimeout()


def _reset_peak() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")     # resets VmHWM (Linux)


def _peak_mb() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _write_files(case, root: Path) -> None:
    for name, make in case.files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if make is not None and make.__name__ == "FIFO":
            os.mkfifo(path)
        elif make is not None:
            path.write_bytes(make())


def _read_upload_bytes(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(UPLOAD_CAP_BYTES)


def _run_app(argv: tuple[str, ...]) -> None:
    """The app's loaders, called as its pages call them on an upload (raises EpsimError)."""
    from app import data, ui, validation_data
    kind, *paths = argv
    if kind == "scenario":
        content = _read_upload_bytes(paths[0])
        upload = SimpleNamespace(name=Path(paths[0]).name, size=len(content), getvalue=lambda: content)
        text = ui.read_upload(upload, "a YAML scenario")
        data.parse_scenario(text, upload.name, str(Path(paths[0]).parent))
        data.run_scenario(text, upload.name, str(Path(paths[0]).parent))
    elif kind == "validation":
        records = (Path(paths[0]).name, _read_upload_bytes(paths[0]))
        profile = (Path(paths[1]).name, _read_upload_bytes(paths[1]))
        validation_data.validation(validation_data.files_key([records, profile]), (records,), profile)
    elif kind == "results":
        data.read_results_table(Path(paths[0]).name, _read_upload_bytes(paths[0]))
    else:
        raise ValueError(f"unknown app loader {kind}")


def _warm_app() -> None:
    """Call the app's scenario loader once (Streamlit logs its bare-mode notices on first use)."""
    import yaml

    from app import data
    from tests.epsim.bad_input_cases import SCENARIO
    text = yaml.safe_dump({**SCENARIO, "workload": {**SCENARIO["workload"], "duration_s": 0.05}})
    data.parse_scenario(text, "warm.yaml", ".")
    data.run_scenario(text, "warm.yaml", ".")


def _error_lines(stderr: str) -> list[str]:
    """stderr lines other than notes, warnings and progress bars."""
    lines = []
    for raw in stderr.replace("\r", "\n").splitlines():
        line = raw.strip()
        if not line or line.startswith(("note:", "epsim: ")) and " error: " not in line:
            continue
        if "%|" in line or " pt/s]" in line or "sim s [" in line:          # tqdm
            continue
        lines.append(line)
    return lines


def run_case(case, root: Path, limit_s: float = LIMIT_S, limit_peak_mb: float = LIMIT_PEAK_MB) -> dict:
    """Run one case in a fresh directory under `root`; returns its classified result."""
    from epsim.cli import main
    from epsim.errors import EpsimError
    folder = Path(tempfile.mkdtemp(dir=root))
    out, err = io.StringIO(), io.StringIO()
    rc, problem, escaped = None, "", None
    argv = [a.replace("{d}", str(folder)) for a in case.argv]
    _reset_peak()
    start = time.perf_counter()
    try:
        _write_files(case, folder)
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if case.command == "app":
                try:
                    _run_app(tuple(argv))
                    rc = 0
                except EpsimError as exc:
                    print(f"app: error: {exc}", file=sys.stderr)
                    rc = 2
            else:
                try:
                    rc = main(argv)
                except SystemExit as exc:               # argparse (usage errors, --help)
                    rc = exc.code if isinstance(exc.code, int) else 2
    except CaseTimeout:
        problem = "timeout"
    except MemoryError:
        problem = "memory"
    except BaseException as exc:  # noqa: BLE001 -- what the campaign looks for
        problem, escaped = "traceback", "".join(traceback.format_exception(exc)[-3:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = time.perf_counter() - start
        peak = _peak_mb()
    check = getattr(case, "check", None)       # the valid-extremes cases: files left complete?
    found = check(folder) if check is not None and not problem and rc in (0, 1) else None
    shutil.rmtree(folder, ignore_errors=True)
    result = classify(case, rc, err.getvalue(), seconds, peak, problem or ("incomplete" if found else ""),
                      limit_s, limit_peak_mb)
    result["traceback"] = escaped or found
    return result


def classify(case, rc: int | None, stderr: str, seconds: float, peak_mb: float | None,
             problem: str = "", limit_s: float = LIMIT_S, limit_peak_mb: float = LIMIT_PEAK_MB) -> dict:
    """The outcome of one case from its exit code and stderr (see the module docstring)."""
    lines = _error_lines(stderr)
    if not problem:
        if "Traceback (most recent call last)" in stderr:
            problem = "traceback"
        elif rc == 2 and len(lines) != 1:
            problem = "multi-line"
        elif rc not in (0, 1, 2):
            problem = "bad-exit"
        elif rc != 2 and case.must_refuse:
            problem = "accepted-bad"
        elif rc == 2 and case.must_finish:
            problem = "stopped"
        elif seconds > limit_s:
            problem = "timeout"
        elif peak_mb is not None and peak_mb > limit_peak_mb:
            problem = "memory"
    outcome = problem or ("refused" if rc == 2 else "accepted")
    return {"name": case.name, "command": case.command, "outcome": outcome, "rc": rc,
            "seconds": round(seconds, 3), "peak_mb": None if peak_mb is None else round(peak_mb, 1),
            "error": (lines[0] if len(lines) == 1 else "\n".join(lines[:6]))[:400]}


FAILURES = ("traceback", "multi-line", "bad-exit", "accepted-bad", "stopped", "timeout", "memory", "hang",
            "incomplete")
DEFAULT_CASES = "tests.epsim.bad_input_cases"


def _cases(spec: str) -> list:
    """The cases of `module` or `module:function` (default function: all_cases)."""
    import importlib
    module, _, function = spec.partition(":")
    return getattr(importlib.import_module(module), function or "all_cases")()


def run_campaign(workdir: Path, num_workers: int = 2, limit_s: float = LIMIT_S,
                 cases_module: str = DEFAULT_CASES) -> list[dict]:
    """Every case of `cases_module` (`module[:function]`, default `all_cases()`), split over `num_workers` runner
    processes; a runner that dies or stays on one case past `limit_s` + 30 s is killed, the
    case recorded as `hang`, and a fresh runner goes on with the rest of its shard.

    Returns:
        one result dict per case.
    """
    import subprocess

    cases = _cases(cases_module)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    shards = [cases[k::num_workers] for k in range(num_workers)]
    done = [0] * num_workers
    results: list[list[dict]] = [[] for _ in range(num_workers)]
    procs: dict[int, subprocess.Popen] = {}

    def start(k: int) -> None:
        out = workdir / f"shard{k}.jsonl"
        procs[k] = subprocess.Popen(
            [sys.executable, "-m", "tests.epsim.bad_input_runner", "--shard", str(k), "--shards",
             str(num_workers), "--out", str(out), "--skip", str(done[k]), "--limit-s", str(limit_s),
             "--cases", cases_module],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def harvest(k: int) -> None:
        path = workdir / f"shard{k}.jsonl"
        lines = path.read_text().splitlines() if path.is_file() else []
        results[k] = [json.loads(line) for line in lines if line.strip()]
        done[k] = len(results[k])

    for k in range(num_workers):
        if shards[k]:
            start(k)
    while procs:
        time.sleep(0.5)
        for k, proc in list(procs.items()):
            progress = workdir / f"shard{k}.jsonl.progress"
            stuck = False
            if proc.poll() is None and progress.is_file():
                text = progress.read_text().split("\n")
                with contextlib.suppress(ValueError, IndexError):
                    stuck = text[0].startswith("START") and time.time() - float(text[1]) > limit_s + 30
            if proc.poll() is None and not stuck:
                continue
            if stuck:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            harvest(k)
            del procs[k]
            if done[k] < len(shards[k]):            # died or hung on case done[k]
                case = shards[k][done[k]]
                with open(workdir / f"shard{k}.jsonl", "a") as fh:
                    fh.write(json.dumps({"name": case.name, "command": case.command, "outcome": "hang",
                                         "rc": proc.returncode, "seconds": None, "peak_mb": None,
                                         "error": "runner killed or died on this case",
                                         "traceback": None}) + "\n")
                harvest(k)
                if done[k] < len(shards[k]):
                    start(k)
    return [r for shard in results for r in shard]


def summary(results: list[dict]) -> str:
    """A markdown table: cases per command by outcome, then the failures (none expected)."""
    commands = sorted({r["command"] for r in results})
    outcomes = ["refused", "accepted"] + [f for f in FAILURES if any(r["outcome"] == f for r in results)]
    lines = ["| command | cases | " + " | ".join(outcomes) + " |",
             "|---|---:|" + "---:|" * len(outcomes)]
    for command in commands + ["all"]:
        rows = [r for r in results if command in ("all", r["command"])]
        counts = [sum(r["outcome"] == o for r in rows) for o in outcomes]
        lines.append(f"| {command} | {len(rows)} | " + " | ".join(map(str, counts)) + " |")
    timed = [r["seconds"] for r in results if r["seconds"] is not None]
    peaks = [r["peak_mb"] for r in results if r["peak_mb"] is not None]
    lines.append("")
    lines.append(f"slowest case {max(timed):.2f} s (limit {LIMIT_S:g} s), highest peak resident "
                 f"memory {max(peaks):.0f} MB (limit {LIMIT_PEAK_MB} MB, address space "
                 f"{ADDRESS_SPACE_MB // 1024} GiB)")
    bad = [r for r in results if r["outcome"] in FAILURES]
    for r in bad:
        lines.append(f"- {r['outcome']}: {r['name']}: {r['error'] or r.get('traceback')}")
    return "\n".join(lines)


def _limit_address_space(mb: int) -> None:
    limit = mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--campaign", action="store_true",
                        help="run every case over --workers runner processes and print the summary")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--skip", type=int, default=0, help="cases of this shard already done")
    parser.add_argument("--limit-s", type=float, default=LIMIT_S)
    parser.add_argument("--limit-peak-mb", type=float, default=LIMIT_PEAK_MB)
    parser.add_argument("--address-space-mb", type=int, default=ADDRESS_SPACE_MB)
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help="MODULE[:FUNCTION] giving the cases (default: the bad-input "
                             "campaign's all_cases; tests.epsim.extremes_cases: valid extremes, "
                             "tests.epsim.extremes_cases:ci_cases their CI subset)")
    args = parser.parse_args(argv)
    if args.campaign:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            results = run_campaign(Path(tmp), args.workers, args.limit_s, args.cases)
            print(summary(results))
            print(f"\n{len(results)} cases in {time.perf_counter() - start:.0f} s wall over "
                  f"{args.workers} runner processes")
        return int(any(r["outcome"] in FAILURES for r in results))
    import epsim.cli  # noqa: F401 -- imports before the limit and outside every case's time
    with contextlib.suppress(ImportError):
        import app.data  # noqa: F401
        import torch  # noqa: F401
    with contextlib.suppress(Exception):        # Streamlit's one-time bare-mode notices, here
        _warm_app()                             # rather than in the first app case's output
    _limit_address_space(args.address_space_mb)
    cases = _cases(args.cases)[args.shard::args.shards][args.skip:]
    progress = Path(args.out + ".progress")
    with tempfile.TemporaryDirectory() as tmp, open(args.out, "a") as fh:
        for case in cases:
            progress.write_text(f"START {case.name}\n{time.time()}\n")
            fh.write(json.dumps(run_case(case, Path(tmp), args.limit_s, args.limit_peak_mb)) + "\n")
            fh.flush()
    progress.write_text("DONE\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
