"""One stop signal stops a run; those after it are ignored while it cleans up.

Ctrl-C in a terminal sends SIGINT to the whole process group, and an impatient user sends
several.  Each becomes a KeyboardInterrupt wherever the main thread then is: a second one
landing in the clean-up of the first (stopping the worker pool, deleting temporary files, the
exit handlers) cut it short, left forked workers running for ever and printed a traceback.  So
the handler used by the command line ignores SIGINT and SIGTERM from the first one on: the run
is stopping anyway, and its clean-up is bounded (``engine.forking.stop_pool``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["first_stop_signal_only", "stop_once"]

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def stop_once(signum, frame) -> None:
    """A signal handler: ignore every later stop signal, then stop the main thread."""
    for stop in _STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)
    raise KeyboardInterrupt


def stopped() -> bool:
    """Whether :func:`stop_once` has run (it leaves SIGINT ignored)."""
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


@contextlib.contextmanager
def first_stop_signal_only(*, restore: bool) -> Iterator[None]:
    """Handle SIGINT with :func:`stop_once` while the block runs.

    Python's own handler is replaced only where it is the one in place (a program embedding
    the command keeps its own).  Afterwards the handlers are put back, unless the block was
    stopped and ``restore`` is false: a process about to exit keeps ignoring signals through
    its exit handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {stop: signal.getsignal(stop) for stop in _STOP_SIGNALS}
    if previous[signal.SIGINT] is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, stop_once)
    try:
        yield
    finally:
        if restore or not stopped():
            for stop, handler in previous.items():
                signal.signal(stop, handler)
