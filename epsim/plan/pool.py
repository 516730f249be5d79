"""The local process pool a sweep's points run on: one spawned worker per slot, each fed one
task at a time over its own pipe.

It is built for what a long sweep meets. A worker that dies (the kernel's OOM killer, a
`kill -9`) fails only the point it was running, with a one-line reason, and a fresh worker
takes its slot: the sweep goes on (a `ProcessPoolExecutor` breaks whole, failing every point
in flight). An interrupt (SIGINT, or SIGTERM, which `epsim.cli` turns into one) kills the
workers at once, so the command exits in well under a second; every point that finished was
already handed to `on_done` (and saved by it). Pipes carry the work, not multiprocessing
queues, so no semaphore is left for the resource tracker to warn about.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from typing import Any, Callable

# multiprocessing and threading are imported where a pool starts: `epsim --help` imports this
# module (through `epsim.plan.executors`), and they would add to its import time

JOIN_TIMEOUT_S = 2.0
WAKE_S = 0.5              # how often the waiting loop wakes (to act on a signal)


def _serve(conn, fn: Callable, parent_pid: int) -> None:
    """A worker: run `fn` on each `(index, task)` received, send back `(index, result)`;
    stop on None or when the parent is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent decides; it kills us on Ctrl-C
    die_with_parent(parent_pid)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, task = message
        try:
            result = fn(task)
        except Exception as exc:  # noqa: BLE001 -- raised again in the parent, as a pool does
            result = _Raised(exc)
        conn.send((index, result))


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


class _Raised:
    """An exception `fn` raised in a worker, carried to the parent to be raised there."""

    def __init__(self, exc: Exception):
        self.exc = exc


def death_reason(exitcode: int | None) -> str:
    """Why a worker process ended without a result, in words."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory: the kernel's OOM killer, or kill -9)" if name == "SIGKILL" else ""
        return f"killed by {name}{hint}"
    return f"exited with code {exitcode}"


@contextlib.contextmanager
def _sigint_ignored_by_children():
    """Processes started inside ignore SIGINT from their first instruction (an ignored signal
    stays ignored across exec; a blocked one does not): a Ctrl-C to the process group while a
    worker still imports prints no traceback from it. This process blocks SIGINT meanwhile, so
    one arriving is held and raised when the block ends (Linux queues a blocked signal even
    while it is ignored), never lost. Only the main thread may change handlers: elsewhere
    (the app's script thread) nothing changes."""
    import threading
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "pthread_sigmask"):
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class _Worker:
    def __init__(self, context, fn: Callable):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, fn, os.getpid()), daemon=True)
        with _sigint_ignored_by_children():
            self.process.start()
        child.close()
        self.index: int | None = None           # the task it runs
        self.stopped = False                    # told to end (the sweep is done)

    def give(self, index: int, task: Any) -> None:
        self.index = index
        try:
            self.conn.send((index, task))
        except OSError:          # it died meanwhile: its sentinel says so, and this task fails
            pass

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.stopped = True
        except OSError:
            pass

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()


def run_pool(tasks: list, fn: Callable[[Any], dict], workers: int,
             on_done: Callable[[int, dict], None]) -> None:
    """Run `fn` on every task in at most `workers` spawned processes, calling
    `on_done(task index, result)` here as each finishes. A worker that dies gives its task
    `{"error": "the worker process ... was killed by SIGKILL ..."}`.

    Raises:
        whatever `fn` raises in a worker or `on_done` raises here, and KeyboardInterrupt: the
        workers are killed first.
    """
    import multiprocessing
    from multiprocessing.connection import wait
    context = multiprocessing.get_context("spawn")
    todo = deque(enumerate(tasks))
    pool: list[_Worker] = []
    try:
        for _ in range(min(workers, len(tasks))):
            worker = _Worker(context, fn)
            pool.append(worker)
            worker.give(*todo.popleft())
        while any(w.index is not None for w in pool):
            busy = [w for w in pool if w.index is not None]
            # a timeout: a signal another thread took (BLAS threads may, while this one holds
            # SIGINT blocked to start a worker) is acted on within WAKE_S, not when a point ends
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy],
                         timeout=WAKE_S)
            for worker in busy:
                if worker.conn not in ready and worker.process.sentinel not in ready:
                    continue
                index, result = worker.index, None
                try:
                    if worker.conn.poll():
                        _, result = worker.conn.recv()
                except (EOFError, OSError):
                    result = None                     # died while sending
                if isinstance(result, _Raised):
                    raise result.exc
                if result is None and worker.process.sentinel not in ready and \
                        worker.process.is_alive():
                    continue                          # a spurious wake-up
                worker.index = None
                if result is None:                    # died: its point fails, a fresh one goes on
                    worker.process.join(JOIN_TIMEOUT_S)
                    result = {"error": f"the worker process simulating this point was "
                                       f"{death_reason(worker.process.exitcode)}; the sweep "
                                       f"went on without it"}
                    worker.conn.close()
                    pool.remove(worker)
                    worker = None
                    if todo:
                        worker = _Worker(context, fn)
                        pool.append(worker)
                on_done(index, result)
                if todo and worker is not None:
                    worker.give(*todo.popleft())
        for worker in pool:                           # done: each idle worker ends itself
            worker.stop()
    finally:
        # interrupted or failed: every worker not told to end (running a point, or still
        # importing) is killed, so that nothing is waited for
        for worker in pool:
            if not worker.stopped:
                worker.kill()
        for worker in pool:
            worker.process.join(JOIN_TIMEOUT_S)
            if worker.process.is_alive():
                worker.kill()
                worker.process.join(JOIN_TIMEOUT_S)
            worker.conn.close()
