"""Holding the stop signals (SIGINT, SIGTERM, SIGHUP) back for a few steps that must not be
cut apart.

Python runs signal handlers between bytecodes of the main thread, so replacing the handlers by
ones that only take note is enough to make a block uninterruptible:

* :func:`signals_held`: the signals that arrived are handed to the caller (``atomic``'s final
  renames, which then say the files are complete);
* :func:`signals_deferred`: the first one that arrived is delivered once the block ends (a
  file's creation and its recording for clean-up, a cache's renames, a kernel's compilation),
  so the stop still stops the run, a moment later.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

from ._interrupts import STOP_SIGNALS, note_stop, stop_once

__all__ = ["signals_deferred", "signals_held"]


class _Hold:
    """The stop signals replaced by a handler that calls ``on_arrival(signum)`` while the
    hold lasts.  Once :meth:`release` has begun, that handler passes a signal on to the one it
    replaced: a stop landing part-way through putting the handlers back (SIGINT's back,
    SIGTERM's not yet) would otherwise leave a handler that swallows every later SIGTERM."""

    def __init__(self, on_arrival: Callable[[int], None]):
        self.on_arrival = on_arrival
        self.previous: dict = {}
        self.released = False

    def handle(self, signum, frame) -> None:
        if not self.released:
            self.on_arrival(signum)
            return
        original = self.previous.get(signum, signal.SIG_DFL)
        if callable(original):
            original(signum, frame)
        elif original == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def take(self) -> None:
        for signum in STOP_SIGNALS:
            if _held(signum, signal.getsignal(signum)):
                self.previous[signum] = signal.signal(signum, self.handle)

    def release(self) -> None:
        self.released = True
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def _held(signum: int, handler) -> bool:
    """Whether a hold takes ``signum`` from ``handler``: never an ignored signal (``nohup``'s
    SIGHUP: holding it turned a hangup the user had asked to ignore into a stop, a review
    found), and SIGHUP only where it is a stop (Python's default, or the command line's
    ``stop_once``): a program embedding the library may use it for something else (reloading
    its settings), and its handler must still see it."""
    if handler == signal.SIG_IGN:
        return False
    if signum in (signal.SIGINT, signal.SIGTERM):
        return True
    return handler == signal.SIG_DFL or handler is stop_once


@contextlib.contextmanager
def signals_held() -> Iterator[list[int]]:
    """Hold the stop signals until the block ends; yields the list of signals that arrived.

    Python runs signal handlers between bytecodes of the main thread, so replacing the handlers
    by ones that only take note is enough: nothing can interrupt the block part-way.
    """
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived  # signals are only ever handled in the main thread
        return

    def note(signum: int) -> None:
        arrived.append(signum)
        note_stop()  # the signals of the same burst after the renames are part of this stop

    hold = _Hold(note)
    try:
        hold.take()
        yield arrived
    finally:
        hold.release()


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold the stop signals until the block ends, then deliver the first that arrived to
    the handler that was in place: for a few renames that must happen together (a cache's
    files), in a run that is not over when they are done, so the stop still stops it."""
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hold = _Hold(arrived.append)
    try:
        hold.take()
        yield
    finally:
        hold.release()
    if arrived:
        signal.raise_signal(arrived[0])
