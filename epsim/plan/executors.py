"""Where a sweep's points run: in this process, in local processes, or on a Ray cluster.

Every executor calls the task it is given (`epsim.plan.points.run_point` simulates one point;
the screen passes its chunk function) on every item; a point's result depends only on its
scenario, seed and profile, so the executors give identical tables. `local` runs a
spawn-context process pool (safe on every platform, no forked SimPy or BLAS state; with one
worker it runs in this process). `ray` connects to `ray.init(address=...)`, or starts a local
runtime with `workers` CPUs when no address is given, and shuts down only a runtime it started.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from epsim.errors import SpecError

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


def die_with_parent(parent_pid: int) -> None:
    """Pool-worker initializer: exit when the parent process is gone (`kill -9` included), so
    no worker, and then no multiprocessing resource tracker, outlives an interrupted plan.

    Linux gets SIGKILL from the kernel at once (PR_SET_PDEATHSIG); everywhere a daemon
    thread checks the parent every half second."""
    import threading
    import time
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 9)      # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:                                # died before we got here
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def default_workers() -> int:
    """CPUs this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


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
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context,
                             initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                on_done(futures[future], future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise


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
            ray_address: str | None = None, *, fn: Task) -> None:
    """Run `fn` (`epsim.plan.points.run_point`; the screen passes `epsim.plan.tiers.screen_chunk`)
    on every task, calling `on_done(task index, result)` in this process as each finishes (in
    completion order, which differs between runs; results do not). `fn` must be a module-level
    function (it travels to worker processes by name).

    Raises:
        SpecError: an unknown executor, workers < 1, ray missing or unreachable.
    """
    check_executor(executor, workers)
    if not tasks:
        return
    workers = workers or default_workers()
    if executor == "ray":
        _run_ray(tasks, workers, ray_address, on_done, fn)
    elif workers == 1 or len(tasks) == 1:
        _run_inline(tasks, on_done, fn)
    else:
        _run_local(tasks, workers, on_done, fn)
