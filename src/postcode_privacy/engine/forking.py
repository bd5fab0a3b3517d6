"""Worker pools started with ``fork``, without losing a stop signal that arrives meanwhile.

The CLI turns SIGTERM (and Python turns SIGINT) into KeyboardInterrupt so that a stopped
release cleans up.  A signal that lands while ``os.fork`` runs its at-fork callbacks (the
logging module has some) raises KeyboardInterrupt inside a callback, where Python prints
"Exception ignored" and drops it: the release then carried on to the end and wrote its output
after being told to stop.  So both signals are blocked while the pool forks; one that arrives
is delivered when they are unblocked, to the caller's own handler, which raises there.

Blocked, and noted by a stand-in handler too (``_signal_holds.signals_deferred``).  The mask is what
the workers inherit, so a SIGTERM with which the parent stops a worker that has only just been
forked stays pending until the worker has put the default action back, and then kills it; a
stand-in handler alone, inherited by the worker, would swallow it and leave the parent waiting
for that worker for ever.  But the mask is the forking thread's only: the kernel may hand the
signal to another thread of the process (a library's), and Python then runs the handler in
this one all the same, inside ``os.fork``'s callbacks, where the KeyboardInterrupt was dropped
or left the logging module's lock held, and the run hung (a hostile review found both).  The
stand-in handler only takes note there; the signal is delivered once the pool exists.

A worker also dies with the thread that forked it (Linux's parent-death signal): one forked
while the parent was stopping would otherwise outlive it, waiting for tasks for ever.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from multiprocessing.pool import Pool
from typing import TypeVar

from .._interrupts import STOP_SIGNALS
from .._signal_holds import signals_deferred
from ..errors import WorkerLostError

T = TypeVar("T")

__all__ = ["fork_pool", "start_in_background", "stop_pool", "watched"]

_FORK_WITH_THREADS = (
    r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks"
)

_PR_SET_PDEATHSIG = 1  # prctl's option number (linux/prctl.h)
_FIRST_WORKERS = "_postcode_privacy_first_workers"  # an attribute fork_pool gives its pool
_FIRST_PATIENCE = 0.5  # seconds after which a pool with a dead first worker is killed
STOP_PATIENCE = 10.0  # seconds ``stop_pool`` gives Pool.terminate before killing the workers


def _start_worker(parent: int, initializer: Callable[[], None] | None) -> None:
    """In each worker: leave interrupts to the parent, die on SIGTERM (the signals forked
    blocked are unblocked only then) and with the thread that forked it, then
    ``initializer``."""
    for stop in STOP_SIGNALS:  # a terminal's Ctrl-C or hangup reaches the parent too
        signal.signal(stop, signal.SIG_DFL if stop == signal.SIGTERM else signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    _die_with_parent(parent)
    if initializer is not None:
        initializer()


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when the thread that forked it ends (``prctl``'s
    PR_SET_PDEATHSIG); if the parent ended before the request, end now.  Elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # (no prctl: the worker lives as before)
        return
    if os.getppid() != parent:
        os._exit(0)


# Threads started by ``start_in_background``, each with the event its target sets on ending,
# until a fork has waited for them.
_BACKGROUND: list[tuple[threading.Thread, threading.Event]] = []
_BACKGROUND_LOCK = threading.Lock()


def start_in_background(target: Callable[[], None], name: str) -> threading.Thread:
    """Run ``target`` in a daemon thread (loading or verifying something a release will need,
    while this process does other work).  Every ``fork_pool`` waits for such targets to end
    first: a fork while one runs would copy into the workers the locks it holds (numba's
    compiler lock, say), which nothing there could release.  ``target`` reports its own
    errors."""
    ended = threading.Event()

    def run() -> None:
        try:
            target()
        finally:
            ended.set()

    thread = threading.Thread(target=run, name=name, daemon=True)
    with _BACKGROUND_LOCK:
        _BACKGROUND[:] = [(t, e) for t, e in _BACKGROUND if not e.is_set()]
        _BACKGROUND.append((thread, ended))
    thread.start()
    return thread


def _settle_background() -> None:
    """Wait until the target of every thread ``start_in_background`` started (other than
    this one) has ended.  Each is forgotten only once it has ended, so a wait interrupted by
    Ctrl-C is waited for again by the next fork (by its event, not ``Thread.join``, which an
    interruption can leave believing the thread has stopped)."""
    with _BACKGROUND_LOCK:
        pending = list(_BACKGROUND)
    for thread, ended in pending:
        if thread is not threading.current_thread():
            ended.wait()
    with _BACKGROUND_LOCK:
        _BACKGROUND[:] = [(t, e) for t, e in _BACKGROUND if not e.is_set()]


def fork_pool(workers: int, initializer: Callable[[], None] | None = None) -> Pool:
    """A pool of ``workers`` forked processes, each running ``initializer`` first, once the
    threads of ``start_in_background`` have finished.

    A stop signal that arrives while the pool forks is delivered once the pool exists; if its
    handler raises (KeyboardInterrupt, as a rule), the pool is terminated here first.
    """
    _settle_background()
    context = multiprocessing.get_context("fork")
    pool = None
    try:
        with signals_deferred():  # a stop is delivered at the end of this block (module doc)
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                with warnings.catch_warnings():
                    # Python 3.12 and later warn at every fork of a process with other threads.
                    # Those here belong to libraries (pyarrow's allocator and thread pool,
                    # which their own fork handlers make safe; tqdm's monitor, asleep): none is
                    # used by a worker, which runs only the engine's compiled kernels on the
                    # arrays it inherits, and this library's own threads have ended
                    # (``_settle_background``).
                    warnings.filterwarnings("ignore", _FORK_WITH_THREADS, DeprecationWarning)
                    pool = context.Pool(workers, _start_worker, (os.getpid(), initializer))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    except BaseException:
        if pool is not None:
            stop_pool(pool)
        raise
    setattr(pool, _FIRST_WORKERS, list(pool._pool))  # type: ignore[attr-defined]
    return pool


_WATCH_SECONDS = 1.0  # how long ``watched`` waits for a result before it checks the workers


def watched(pool: Pool, results: Iterator[T]) -> Iterator[T]:
    """The results of ``pool.imap_unordered`` (or ``imap``) as they come, checking every
    ``_WATCH_SECONDS`` of waiting that no worker has died.  A worker of this pool ends only
    when the pool is stopped; one killed before (SIGKILL, as the out-of-memory killer sends)
    took its task with it, whose result never comes, and CPython's pool forks a replacement
    and waits for ever: a release slept with no word (a hostile soak).  Raises
    :class:`WorkerLostError` instead."""
    while True:
        try:
            yield results.next(_WATCH_SECONDS)  # type: ignore[attr-defined]
        except StopIteration:
            return
        except multiprocessing.TimeoutError:
            code = _lost_worker(pool)
            if code is not None:
                raise _worker_lost(code) from None


def _lost_worker(pool: Pool) -> int | None:
    """The exit code of one of the workers ``fork_pool`` forked that has ended, or None while
    all live (a replacement is forked only for one that has ended, so these are enough)."""
    for process in _first_workers(pool):
        if process.exitcode is not None:
            return process.exitcode
    return None


def _first_workers(pool: Pool) -> list:
    """The workers ``fork_pool`` forked (the pool replaces a dead one, which then leaves its
    list), or the pool's list for a pool it did not fork."""
    return getattr(pool, _FIRST_WORKERS, None) or list(pool._pool)  # type: ignore[attr-defined]


def _worker_lost(code: int) -> WorkerLostError:
    """The error for a worker that ended with exit code ``code`` (minus the signal's number
    for a signal).  A worker killed by SIGTERM may be part of a stop sent to the whole process
    group (``timeout``, systemd), which this process also received: a moment's wait lets that
    stop arrive here first, to end the run as a stop."""
    if code == -signal.SIGTERM:
        time.sleep(0.5)  # (the stop's KeyboardInterrupt is raised here, if one is on its way)
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    hint = " (SIGKILL: often the system running out of memory)" if code == -signal.SIGKILL else ""
    return WorkerLostError(
        f"a worker process {how}{hint}; the work it held was lost, so the run stopped"
    )


def stop_pool(pool: Pool) -> None:
    """Stop ``pool`` now: ``Pool.terminate``, which kills the workers and joins them and the
    pool's threads.

    A worker killed while it held one of the pool's queue locks (passing a result back, say)
    never releases it, and ``Pool.terminate`` then waits for that lock for ever (a limitation
    of CPython's pool, met once in a CI run: a worker task failed and the others were killed
    mid-reply).  So it runs in a thread given ``STOP_PATIENCE`` seconds; past that, the
    workers still alive are killed and joined here, and the pool's threads, blocked on the
    dead lock, are left behind (daemon threads: they hold nothing else).  A worker found dead
    already is such a worker, likely: a SIGTERM sent to the whole process group (``timeout``,
    ``kill -- -PGID``, systemd) kills the workers with the parent, and the stop waited out the
    patience (a hostile review found it): so once half a second has passed, a pool one of whose
    first workers has died is not waited for any longer.
    """
    workers = list(pool._pool)  # type: ignore[attr-defined]  # no public list of them
    first = _first_workers(pool)
    stopper = threading.Thread(target=pool.terminate, name="stop-pool", daemon=True)
    stopper.start()
    stopper.join(min(STOP_PATIENCE, _FIRST_PATIENCE))  # (a signal's workers die meanwhile)
    if stopper.is_alive() and _lost_worker(pool) is None:
        stopper.join(STOP_PATIENCE - _FIRST_PATIENCE)
    if stopper.is_alive():
        _stop_replacing_workers(pool)
        workers = list({*first, *workers, *pool._pool})  # type: ignore[attr-defined]
        for process in workers:
            if process.exitcode is None:
                process.kill()
        for process in workers:
            process.join()


def _stop_replacing_workers(pool: Pool) -> None:
    """End the pool's worker handler, the thread that forks a replacement for each worker that
    dies, and wait for it, as ``Pool.terminate`` does before it kills the workers.

    Here ``Pool.terminate`` is stuck, maybe before it told the handler (waiting for a lock a
    killed worker held), and a replacement being forked joins the pool's list only once forked:
    without this, such a worker was missed by the kills below and outlived the stop (a CI run
    met it), and each worker killed would have been replaced again.
    """
    handler = getattr(pool, "_worker_handler", None)
    if handler is None:  # (not CPython's pool as known: the list is all there is)
        return
    handler._state = multiprocessing.pool.TERMINATE  # what its loop checks on each pass
    pool._change_notifier.put(None)  # type: ignore[attr-defined]  # wakes it from its wait
    handler.join(STOP_PATIENCE)
