"""numba's ``njit``, with Ctrl-C and SIGTERM held while numba compiles.

numba compiles a kernel on its first call (or loads it from its cache) under its global
compiler lock, and LLVM calls back into Python while it generates code.  A stop signal handled
inside one of those callbacks raises KeyboardInterrupt where ctypes can only print "Exception
ignored on calling ctypes callback" and drop it: the run went on as if never stopped, or
failed later with numba's own "no compiled object yet".  So, in the main thread, SIGINT and
SIGTERM are held from the moment the lock is asked for until it is given back, and the first
that arrived is then delivered (``atomic.signals_deferred``): the stop lands a moment later,
in Python code, as any other stop does (docs/release.md, "Nothing is lost").  Every compiled
module imports ``njit`` from here, so the guard is in place before the first compilation.

numba also writes each kernel it compiles to its on-disk cache, and a write that fails (a full
disk, a file-size limit) raised out of the first call with numba's traceback (a hostile review
found it).  The kernel is compiled all the same: such a write is skipped, and the next run
compiles it again (``_skip_failed_cache_writes``).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import numba.core.caching as numba_caching
import numba.core.event as numba_events
from numba import njit

from .atomic import signals_deferred

__all__ = ["njit"]


class _StopsHeldWhileCompiling(numba_events.Listener):
    """Holds stop signals through the outermost ``numba:compiler_lock`` event of the main
    thread (the lock is re-entrant, so its events nest)."""

    def __init__(self) -> None:
        self._depth = 0
        self._held: contextlib.AbstractContextManager | None = None

    def on_start(self, event) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # (signals are handled in the main thread only)
        if self._depth == 0:
            # The hold first, then the count: a stop landing before the hold is in place
            # leaves neither changed (the count must never say a hold is in place that is not).
            held = signals_deferred()
            held.__enter__()
            self._held = held
        self._depth += 1

    def on_end(self, event) -> None:
        if threading.current_thread() is not threading.main_thread() or self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._held is not None:
            held, self._held = self._held, None
            held.__exit__(None, None, None)  # delivers a stop that came meanwhile


def _skip_failed_cache_writes() -> None:
    """Make numba's cache save (``Cache.save_overload``) give up quietly on an OSError."""
    cache = getattr(numba_caching, "Cache", None)
    save = getattr(cache, "save_overload", None)
    if save is None or getattr(save, "skips_failed_writes", False):
        return  # (another numba, or done already)

    @functools.wraps(save)
    def save_or_skip(self, sig, data) -> None:
        try:
            save(self, sig, data)
        except OSError:  # nothing lost but time: the compiled kernel is in memory
            pass

    save_or_skip.skips_failed_writes = True  # type: ignore[attr-defined]
    cache.save_overload = save_or_skip  # type: ignore[union-attr]


_skip_failed_cache_writes()
STOPS_HELD_WHILE_COMPILING = _StopsHeldWhileCompiling()
numba_events.register("numba:compiler_lock", STOPS_HELD_WHILE_COMPILING)
