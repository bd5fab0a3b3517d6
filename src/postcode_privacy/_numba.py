"""numba's ``njit``, with the stop signals (Ctrl-C, SIGTERM, SIGHUP) held while numba compiles.

numba compiles a kernel on its first call (or loads it from its cache) under its global
compiler lock, and LLVM calls back into Python while it generates code.  A stop signal handled
inside one of those callbacks raises KeyboardInterrupt where ctypes can only print "Exception
ignored on calling ctypes callback" and drop it: the run went on as if never stopped, or
failed later with numba's own "no compiled object yet".  So, in the main thread, the stop
signals are held from the moment the lock is asked for until it is given back, and the first
that arrived is then delivered (``_signal_holds.signals_deferred``): the stop lands a moment later,
in Python code, as any other stop does (docs/release.md, "Nothing is lost").  Every compiled
module imports ``njit`` from here, so the guard is in place before the first compilation.

numba also keeps each kernel it compiles in an on-disk cache.  A write that failed (a full
disk, a file-size limit) raised out of the first call with numba's traceback, and so did every
run after a cache file was damaged (an unpickling error), until the cache was deleted by hand
(hostile reviews found both).  The cache is only a shortcut: a failed write is skipped and a
failed read is a miss, so the kernel is compiled again (``_cache_failures_are_misses``).  And
where numba finds no cache directory it can write at all (the package installed read-only and
run by an account with no home directory, as a service account often is), its ``cache=True``
raised at import; such a kernel is compiled on each run instead (:func:`njit`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

import numba.core.caching as numba_caching
import numba.core.event as numba_events
from numba import njit as _numba_njit

from ._signal_holds import signals_deferred

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


def _cache_failures_are_misses() -> None:
    """Make numba's cache give up quietly: a save (``Cache.save_overload``) that raises
    OSError does nothing, and a load (``Cache.load_overload``) that raises finds nothing."""
    cache = getattr(numba_caching, "Cache", None)
    save = getattr(cache, "save_overload", None)
    load = getattr(cache, "load_overload", None)
    if save is None or load is None or getattr(save, "misses_on_failure", False):
        return  # (another numba, or done already)

    @functools.wraps(save)
    def save_or_skip(self, sig, data) -> None:
        try:
            save(self, sig, data)
        except OSError:  # nothing lost but time: the compiled kernel is in memory
            pass
        except Exception:  # a damaged index, read before writing: dropped, then written anew
            index = getattr(getattr(self, "_cache_file", None), "_index_path", None)
            with contextlib.suppress(Exception):
                os.unlink(index)  # type: ignore[arg-type]
                save(self, sig, data)

    @functools.wraps(load)
    def load_or_miss(self, sig, target_context):
        try:
            return load(self, sig, target_context)
        except Exception:  # a damaged cache file: compiled afresh (and written again)
            return None

    save_or_skip.misses_on_failure = True  # type: ignore[attr-defined]
    cache.save_overload = save_or_skip  # type: ignore[union-attr]
    cache.load_overload = load_or_miss  # type: ignore[union-attr]


_cache_failures_are_misses()
STOPS_HELD_WHILE_COMPILING = _StopsHeldWhileCompiling()
numba_events.register("numba:compiler_lock", STOPS_HELD_WHILE_COMPILING)


def njit(*args, **options):
    """numba's ``njit``.  With ``cache=True``, a kernel numba has nowhere to cache (it raises
    "no locator available" when neither ``$NUMBA_CACHE_DIR``, nor a ``__pycache__`` beside the
    module, nor the user's cache directory can be written) is compiled without its cache: the
    run costs the compilation, never a traceback."""
    if args:  # (a bare ``@njit``)
        return _numba_njit(*args, **options)

    def decorate(function):
        try:
            return _numba_njit(**options)(function)
        except RuntimeError as exc:
            if not options.get("cache") or "no locator available" not in str(exc):
                raise
            return _numba_njit(**{**options, "cache": False})(function)

    return decorate
