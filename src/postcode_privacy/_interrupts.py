"""Every command stops on its first stop signal (Ctrl-C, SIGTERM, SIGHUP), and is not cut
short by the next ones.

Ctrl-C in a terminal sends SIGINT to the whole process group, and an impatient user sends
several.  Each becomes a KeyboardInterrupt wherever the main thread then is: a second one
landing in the clean-up of the first (stopping the worker pool, deleting temporary files, the
exit handlers) cut it short, left forked workers running for ever and printed a traceback.  So
for :data:`STOP_GRACE` seconds after a stop, further stop signals are ignored: the run is
stopping, and its clean-up is bounded (``engine.forking.stop_pool``).  Past that, a signal
stops the main thread again: Python drops a KeyboardInterrupt raised while a finaliser
(``__del__``) runs, and a stop lost so must not leave a run that no signal can stop.

SIGTERM is handled like Ctrl-C, so a ``kill`` cleans up as Ctrl-C does (docs/release.md,
"Nothing is lost"), and so is SIGHUP, which a closed terminal or a dropped ssh session sends:
without it a run ended at once, leaving its partial temporary files (a hostile review).  A
run started under ``nohup`` ignores SIGHUP and keeps doing so (only Python's own handlers are
replaced).  ``STOP_SIGNALS`` lists them for every module that handles, holds or blocks them.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator

__all__ = [
    "STOP_GRACE",
    "STOP_SIGNALS",
    "first_stop_signal_only",
    "note_files_in_place",
    "note_stop",
    "files_were_in_place",
    "handle_stops",
    "ignore_stops",
    "stop_message",
    "stop_if_told",
    "stop_once",
    "stop_was_dropped",
    "quiet_about_dropped_stops",
]

EXIT_INTERRUPTED = 130  # the exit status of a command a stop signal ended (128 + SIGINT)
STOP_GRACE = 5.0  # seconds after a stop during which further stop signals are ignored
# SIGHUP where the platform has it (not on Windows).
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
_stopped_at: list[float] = []  # when this run was last told to stop (monotonic clock)
_in_place: list[bool] = []  # this run's output files are all written and in place
_raised: list[bool] = []  # stop_once raised KeyboardInterrupt in this run


def note_files_in_place() -> None:
    """Record that the run's output files are complete and in place (``OutputClaim.commit``),
    so that a stop after it says so rather than leave the user to think the run lost them."""
    _in_place[:] = [True]


def files_were_in_place() -> bool:
    return bool(_in_place)


def stop_message() -> str:
    """What a stopped command says: whether its files were already complete."""
    if files_were_in_place():  # (the stop came after the last rename: nothing was lost)
        return "interrupted after the files were written: they are complete and in place"
    return "interrupted"


def note_stop() -> None:
    """Record a stop that is dealt with elsewhere (``atomic`` holds signals while it renames):
    the signals right after it are part of the same stop."""
    _stopped_at[:] = [time.monotonic()]


def stop_once(signum, frame) -> None:
    """A signal handler: stop the main thread, unless a stop came within :data:`STOP_GRACE`."""
    if _stopped_at and time.monotonic() - _stopped_at[0] < STOP_GRACE:
        return
    note_stop()
    _raised[:] = [True]
    raise KeyboardInterrupt


def stop_if_told() -> None:
    """Raise KeyboardInterrupt if :func:`stop_once` raised one that never ended the run.

    Python runs a signal handler between any two bytecodes of the main thread, also inside a
    callback it calls for C code (a weakref's, an at-fork one), where an exception is printed
    as "Exception ignored" and dropped: the run went on, wrote its files and recorded them in
    the ledger, and the later signals of the same stop were ignored as a burst (a hostile
    review found it, once in about 135 stopped runs).  So the steps that make a run's work
    final (each chunk's release, the ledger's record, the final renames) ask here first."""
    if _raised:
        raise KeyboardInterrupt


def stop_was_dropped() -> bool:
    """Whether :func:`stop_once` raised a KeyboardInterrupt that never ended the run: the
    command completed, so its files are in place, but it was told to stop and says so."""
    return bool(_raised)


def quiet_about_dropped_stops(previous_hook):
    """A ``sys.unraisablehook`` that says nothing of a KeyboardInterrupt Python dropped (in a
    finaliser, say): Python printed "Exception ignored" and a traceback for it, though the
    stop is not lost (:func:`stop_if_told`, :func:`stop_was_dropped`).  Anything else is
    passed on."""

    def hook(unraisable) -> None:
        if unraisable.exc_type is KeyboardInterrupt and _raised:
            return
        previous_hook(unraisable)

    return hook


def handle_stops() -> dict:
    """Handle the stop signals with :func:`stop_once` where Python's own handler is in place
    (a program embedding the command keeps its own, and ``nohup`` its ignored SIGHUP); return
    the handlers found."""
    previous = {stop: signal.getsignal(stop) for stop in STOP_SIGNALS}
    for stop in STOP_SIGNALS:
        pythons_own = signal.default_int_handler if stop == signal.SIGINT else signal.SIG_DFL
        if previous[stop] is pythons_own:
            signal.signal(stop, stop_once)
    return previous


def ignore_stops() -> None:
    """Ignore the stop signals from now on: the process is ending, and a second Ctrl-C must
    not cut its exit short."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)


@contextlib.contextmanager
def first_stop_signal_only(*, restore: bool) -> Iterator[None]:
    """Handle the stop signals with :func:`stop_once` while the block runs.

    A handler is replaced only where it is Python's own (a program embedding the command keeps
    its own).  Afterwards the handlers are put back, unless the block was stopped and
    ``restore`` is false: a process about to exit then ignores stop signals through its exit
    handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = handle_stops()
    # A stop Python dropped before the command began (while the command line loaded, under
    # ``_start``'s guard) must still stop it, before any work: the state below is this run's.
    dropped_before = bool(_raised)
    _stopped_at.clear()
    _in_place.clear()
    _raised.clear()
    unraisable = sys.unraisablehook
    sys.unraisablehook = quiet_about_dropped_stops(unraisable)
    try:
        if dropped_before:
            note_stop()
            _raised[:] = [True]
            raise KeyboardInterrupt
        yield
    finally:
        stopped = bool(_stopped_at)
        _stopped_at.clear()
        _raised.clear()
        sys.unraisablehook = unraisable
        for stop, handler in previous.items():
            signal.signal(stop, signal.SIG_IGN if stopped and not restore else handler)
