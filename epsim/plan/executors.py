"""Where a sweep's points run: in this process, in local processes, or on a Ray cluster.

Every executor calls the task it is given (`epsim.plan.points.run_point` simulates one point;
the screen passes its chunk function) on every item; a point's result depends only on its
scenario, seed and profile, so the executors give identical tables. `local` runs
`epsim.plan.pool` (spawned workers, each fed one point at a time: a worker that dies fails only
its point, an interrupt stops at once), with one worker per CPU at most, and no more than the
available memory holds (`capped_workers`); with one worker it runs in this process. `ray`
connects to `ray.init(address=...)`, or starts a local runtime with `workers` CPUs when no
address is given, and shuts down only a runtime it started.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from epsim.errors import SpecError
from epsim.plan.pool import run_pool

# tqdm, ray and the process, thread and socket modules are imported where a sweep uses them:
# `epsim --help` imports this module for `--executor`, and they would double its import time.

EXECUTORS = ("local", "ray")


def executor_options(parser) -> None:
    """`--executor` and `--workers`: where the points of a sweep run (`epsim plan` and every
    scenario script, `epsim.commands.scripting`)."""
    parser.add_argument("--executor", default="local", choices=list(EXECUTORS),
                        help="where points run: local processes (default) or Ray")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes, or CPUs of a local Ray runtime (default: all cores)")


@contextmanager
def progress_bar(total: int, desc: str, show: bool) -> Iterator[Callable[[int], object]]:
    """A progress bar over `total` points on stderr while the block runs (none when not `show`
    or nothing to do); yields `advance(num_points)`."""
    if not (show and total):
        yield lambda num_points: None
        return
    from tqdm import tqdm
    bar = tqdm(total=total, unit="pt", desc=desc, dynamic_ncols=True)
    try:
        yield bar.update
    finally:
        bar.close()


def default_workers() -> int:
    """CPUs this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


MEMORY_SHARE = 0.8        # of the memory available now that a sweep's workers may take
# a plan worker before its point (interpreter, imports, caches), measured at 83 MiB
# (benchmarks/results/memory_budget.md); each point adds `epsim.budget.run_cost`'s bytes
WORKER_BASE_BYTES = 256 * 2**20


def available_bytes() -> float | None:
    """Memory available to new processes now (Linux `MemAvailable`), None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_workers(task_bytes: float) -> int | None:
    """How many workers the available memory holds when each is charged its base
    (`WORKER_BASE_BYTES`) plus `task_bytes`, the largest point's estimate
    (`epsim.budget.run_cost`, measured against peak RSS: benchmarks/memory_budget.py); None
    where the available memory is unknown."""
    available = available_bytes()
    if available is None:
        return None
    return max(1, int(available * MEMORY_SHARE // (WORKER_BASE_BYTES + task_bytes)))


def capped_workers(workers: int | None, num_tasks: int, task_bytes: float = 0.0) -> int:
    """Workers for `num_tasks`: as asked (default: the CPUs), at most one per task, and at most
    what memory holds (`memory_workers`; a note says so when that lowers the count)."""
    wanted = min(workers or default_workers(), max(num_tasks, 1))
    cap = memory_workers(task_bytes) if task_bytes else None
    if cap is not None and cap < wanted:
        per = (task_bytes + WORKER_BASE_BYTES) / 2**30
        warnings.warn(f"workers ({wanted}) capped at {cap} by memory: each point may need up to "
                      f"{per:.2g} GiB and {available_bytes() / 2**30:.3g} GiB is available",
                      stacklevel=2)
        return cap
    return wanted


def check_executor(executor: str, workers: int | None) -> None:
    """Raise SpecError for an unknown executor or a worker count below one."""
    if executor not in EXECUTORS:
        raise SpecError(f"--executor ({executor!r}) must be one of {list(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise SpecError(f"--workers ({workers}) must be >= 1")


Done = Callable[[int, dict], None]
Task = Callable[[object], dict]


def _run_inline(tasks: list, on_done: Done, fn: Task) -> None:
    for i, task in enumerate(tasks):
        on_done(i, fn(task))


def _run_local(tasks: list, workers: int, on_done: Done, fn: Task) -> None:
    run_pool(tasks, fn, workers, on_done)


def _run_ray(tasks: list, workers: int, address: str | None, on_done: Done, fn: Task) -> None:
    try:
        import ray
    except ImportError:
        raise SpecError("--executor (ray) needs the ray package: pip install 'epsim[dist]'") from None
    started = not ray.is_initialized()
    if started and address:
        _check_reachable(address)
    if started:
        try:
            ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                     logging_level="ERROR", log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SpecError(f"--ray-address ({address}) must reach a Ray cluster: {first}") from None
    try:
        remote = ray.remote(num_cpus=1)(fn)
        refs = {remote.remote(task): i for i, task in enumerate(tasks)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=min(len(pending), 8), timeout=1.0)
            for ref in done:
                on_done(refs[ref], ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail in seconds, in one line, when a `host:port` Ray address has nothing listening
    (ray.init would retry for ~20 s, printing its logs)."""
    import socket
    target = address.removeprefix("ray://")
    if target in ("auto", "local") or ":" not in target:
        return
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except ValueError:
        raise SpecError(f"--ray-address ({address}) must be host:port or ray://host:port") from None
    except OSError as exc:
        raise SpecError(f"--ray-address ({address}) must reach a Ray cluster: nothing answers at "
                        f"{host}:{port} ({exc.strerror or type(exc).__name__})") from None


def execute(tasks: list, on_done: Done, executor: str = "local", workers: int | None = None,
            ray_address: str | None = None, *, fn: Task, task_bytes: float = 0.0) -> None:
    """Run `fn` (`epsim.plan.points.run_point`; the screen passes `epsim.plan.tiers.screen_chunk`)
    on every task, calling `on_done(task index, result)` in this process as each finishes (in
    completion order, which differs between runs; results do not). `fn` must be a module-level
    function (it travels to worker processes by name). `task_bytes`: the largest task's memory
    estimate; local workers are capped so that the machine holds them (`capped_workers`).

    Raises:
        SpecError: an unknown executor, workers < 1, ray missing or unreachable.
    """
    check_executor(executor, workers)
    if not tasks:
        return
    if executor == "ray":
        _run_ray(tasks, workers or default_workers(), ray_address, on_done, fn)
        return
    workers = capped_workers(workers, len(tasks), task_bytes)
    if workers == 1 or len(tasks) == 1:
        _run_inline(tasks, on_done, fn)
    else:
        _run_local(tasks, workers, on_done, fn)
