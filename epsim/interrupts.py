"""Interrupts while an `epsim` command runs: SIGTERM handled as Ctrl-C is, and an interrupt that
a finalizer swallowed delivered again to the code that was running (`interrupts_handled`)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

REDELIVER_S = 0.01        # how soon an interrupt a finalizer swallowed is delivered again


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C is: work stops at once, finished work is kept."""


def _on_sigterm(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def interrupts_handled():
    """While a command runs: SIGTERM (a supervisor, `timeout`) stops the work as Ctrl-C does,
    instead of killing the process mid-write; and a Ctrl-C or SIGTERM that strikes inside a
    finalizer or a weakref callback (matplotlib's, run by the garbage collector), where Python
    swallows it and prints "Exception ignored ... Traceback", is delivered again to the code
    that was running, silently. What was there before is restored when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    own = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if own:
        signal.signal(signal.SIGTERM, _on_sigterm)
    before = sys.unraisablehook

    def redeliver(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt) \
                and threading.current_thread() is threading.main_thread():
            # signalled again from another thread, so that the handler runs in the main code
            # once this hook has returned (a signal tripped here would be handled in here);
            # one swallowed again (the collector runs many callbacks) comes back here
            signum = signal.SIGTERM if issubclass(unraisable.exc_type, Terminated) else signal.SIGINT
            threading.Timer(REDELIVER_S, signal.pthread_kill,
                            (threading.main_thread().ident, signum)).start()
            return
        before(unraisable)

    sys.unraisablehook = redeliver
    try:
        yield
    finally:
        sys.unraisablehook = before
        if own:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
