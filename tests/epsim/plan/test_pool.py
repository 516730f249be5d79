"""The local pool (`epsim.plan.pool`): a worker that dies fails only its own point and the
sweep goes on; an error in the caller (a full disk, an interrupt) stops every worker at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epsim.plan.pool import death_reason, run_pool

ROOT = Path(__file__).resolve().parents[3]


def square_or_die(x: int) -> dict:
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)          # as the kernel's OOM killer does
    return {"metrics": {"x": float(x * x)}}


def quick_or_slow(x: int) -> dict:
    if x:
        time.sleep(120)
    return {"metrics": {"x": 0.0}}


def _children() -> set[int]:
    found = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            found |= set(map(int, open(f"/proc/{os.getpid()}/task/{task}/children").read().split()))
        except OSError:
            pass
    return {pid for pid in found if os.path.exists(f"/proc/{pid}")
            and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"}


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_a_dead_worker_fails_its_point_and_the_sweep_goes_on():
    results = {}
    run_pool(list(range(7)), square_or_die, 2, results.__setitem__)
    assert sorted(results) == list(range(7))
    assert results[3] == {"error": "the worker process simulating this point was killed by SIGKILL "
                                   "(out of memory: the kernel's OOM killer, or kill -9); the sweep "
                                   "went on without it"}
    assert all(results[i] == {"metrics": {"x": float(i * i)}} for i in range(7) if i != 3)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_an_error_in_the_caller_stops_every_worker_at_once():
    before = _children()

    def on_done(index, result):
        raise KeyboardInterrupt                       # Ctrl-C, or a write that failed

    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_pool([0, 1, 1, 1], quick_or_slow, 2, on_done)
    assert time.perf_counter() - start < 60           # the sleeping worker was not waited for
    assert _children() <= before                      # no worker left behind


def test_death_reasons():
    assert death_reason(-signal.SIGTERM) == "killed by SIGTERM"
    assert death_reason(1) == "exited with code 1"


def raise_on_two(x: int) -> dict:
    if x == 2:
        raise ValueError("a bug in the task")
    return {"metrics": {"x": float(x)}}


def test_an_exception_in_a_task_is_raised_here():
    with pytest.raises(ValueError, match="a bug in the task"):
        run_pool([0, 1, 2, 3], raise_on_two, 2, lambda i, r: None)


def sigint_disposition(_: int) -> dict:
    return {"ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN}


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs POSIX signal masks")
def test_workers_ignore_ctrl_c_and_this_process_still_gets_it():
    results = {}
    before = signal.getsignal(signal.SIGINT)     # pytest's, or one an earlier test left
    run_pool([0, 1], sigint_disposition, 2, results.__setitem__)
    assert results == {0: {"ignored": True}, 1: {"ignored": True}}
    assert signal.getsignal(signal.SIGINT) is before
    # in a fresh process with one thread: here another thread (tqdm's monitor, a timer left by
    # an earlier test) may take a process-directed SIGINT while it is ignored
    # Python's own Ctrl-C handler first: a suite started in the background (`cmd &` without job
    # control) hands its children SIGINT ignored, and Python then installs no handler at all
    code = ("import os, signal\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from epsim.plan.pool import _sigint_ignored_by_children\n"
            "try:\n"
            "    with _sigint_ignored_by_children():\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n"     # held while workers start
            "except KeyboardInterrupt:\n"
            "    print('raised after the block')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert proc.stdout.strip() == "raised after the block", proc.stderr[-500:]
