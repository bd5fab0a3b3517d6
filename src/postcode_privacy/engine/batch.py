"""Many records at once: grouped by true postcode, bounded memory, all cores.

Records are sorted by true node (stable), so the records sharing a postcode form one group whose
shell exploration is done once (:meth:`FastSampler.sample_group`, or for many groups of one
record together :meth:`FastSampler.sample_each`); where the search reads the
graph laid out along the map (engine/layout.py), they are sorted along the map instead
(``_places``).  Groups are cut into pieces of at most ``MAX_GROUP`` records, and pieces are
gathered into tasks of about ``TASK_RECORDS`` records, so memory per task is bounded whatever
the input looks like.

The number of workers defaults to every usable CPU for batches of at least ``PARALLEL_MIN``
records; the environment variable ``POSTCODE_PRIVACY_WORKERS`` overrides that default (set it to
1 where the caller already runs one process per core, as Spark executors do).  With more than
one worker, the tasks run in worker processes started with ``fork``: the children
inherit the graph arrays (in memory, or memory-mapped from an artefact) and the prepared records
copy-on-write, so nothing large is pickled; each task returns only its output node numbers.
Every output is a function of its own record alone (key, subject, postcode, graph, epsilon,
radius), so results do not depend on the number of workers, the task size or the order in which
tasks finish.  Where ``fork`` is unavailable or unsafe (Windows, macOS), everything runs in the
calling process.  ``start_draws`` returns the draws under way, so that the release layer
can check its next chunk while the workers draw this one (release/files.py).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from .._wording import counted, verb
from ..errors import InputDataError, InvalidParameterError, UnknownPostcodeError
from ..mechanism.keys import Key
from ..mechanism.mechanism import Mechanism
from ..mechanism.stream import StreamContext
from ..mechanism.subject import canonical_subject_id
from .bound_sources import Bracket, Brackets, wants_bracket
from .fast import FastSampler
from .forking import fork_pool, stop_pool, watched
from .landmarks import GraphTables, graph_tables
from .profiles import BallProfiles, profiles_to_use

__all__ = ["perturb_many", "perturb_nodes", "usable_cpus", "default_workers", "WORKERS_ENV"]

MAX_GROUP = 4096  # records of one postcode handled together (their streams are held at once)
TASK_RECORDS = 2048  # records per task handed to a worker
# The records of the last TAIL_TASKS tasks (at most a quarter of a batch's records) go in tasks
# a quarter the size, so that the workers finish together: at a small epsilon a task can take
# half a second, which one worker would otherwise spend alone at the end while the others
# wait.  (Not the whole of a small batch: a dense one shares its sweeps within a task.)
TAIL_TASKS = 8
PARALLEL_MIN = 2000  # fewer records than this run in the calling process
WORKERS_ENV = "POSTCODE_PRIVACY_WORKERS"
MAX_WORKERS = 1024  # the most $POSTCODE_PRIVACY_WORKERS may ask for: each is a forked process
LANDMARK_SHARE = 256  # landmark tables pay off from about n_locations / 256 distinct postcodes
# The search's layout along the map (engine/layout.py) pays off from this radius and this
# many distinct postcodes in a batch (docs/performance.md, "Compiled shell search").
ALONG_MAP_RADIUS = 64
ALONG_MAP_SOURCES = 2000
_ROW_ERRORS_SHOWN = 20
# Neighbouring postcodes share their sweeps (engine/shared_shells.py) only where a task's
# groups are dense: most of the nodes between its first and last group, in the order the
# batch sorted them (node order, or along the map: ``_places``), are present.  With every
# postcode present, drawing together gained 5-15% in one process and deciding together 5-10%
# more (a national file); with every second one, drawing together still gained 3-8%, but both
# together lost 8%, and 19% with every fourth (docs/performance.md, "Shared sweeps").
SHARED_MIN_GROUPS = 64
# Consecutive groups at most this many places apart in that order belong to one stretch, so a
# stretch always holds more than half the nodes from its first to its last: dense enough to
# draw together.
SHARED_GAP = 2
SHARED_DECIDE_DENSITY = 0.9


@dataclass(frozen=True)
class _Job:
    """One call's sorted records and everything needed to sample them (see _perturb_canonical)."""

    mechanism: Mechanism
    context: StreamContext
    sorted_nodes: np.ndarray
    places: np.ndarray | None  # each node's place along the map, if sorted so (``_places``)
    order: np.ndarray  # sorted position -> input position
    ids: Sequence[str]  # canonical, in input order
    tables: GraphTables
    landmarks: bool
    profiles: BallProfiles | None
    brackets: Brackets | None
    along_map: bool  # the search's layout (FastSampler, engine/layout.py)


@dataclass(frozen=True)
class _Worker:
    """A worker process's job (inherited through fork) and its own sampler buffers."""

    job: _Job
    sampler: FastSampler


# In the parent: the job being run, set just before it forks its workers; never pickled.
_JOB: _Job | None = None
# In each worker: set by _worker_init, which the pool runs before the worker's first task.
_WORKER: _Worker | None = None
_PARALLEL_LOCK = threading.Lock()
_HOLDER: int | None = None  # the thread whose workers are drawing (holding _PARALLEL_LOCK)


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _fork_available() -> bool:
    """Worker processes can be forked here: not on Windows, not on macOS (where forking a
    process that has loaded system frameworks is unsafe), not inside a daemon process."""
    return (
        sys.platform != "darwin"
        and "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


def default_workers(records: int) -> int:
    """Workers used when none are given: $POSTCODE_PRIVACY_WORKERS, else all usable CPUs."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    # checked whatever the batch's size, so that a bad value fails every run alike; ASCII
    # digits only ("²" is a digit to str.isdigit but not to int), and few enough to fork
    if text and not (
        text.isascii() and text.isdigit() and len(text) <= 6 and 1 <= int(text) <= MAX_WORKERS
    ):
        raise InvalidParameterError(f"{WORKERS_ENV} must be a whole number from 1 to {MAX_WORKERS}")
    if records < PARALLEL_MIN:
        return 1
    return int(text) if text else usable_cpus()


def _tasks(sorted_nodes: np.ndarray) -> list[tuple[int, int]]:
    """Ranges [start, stop) of the sorted records, each a whole number of group pieces, of
    about ``TASK_RECORDS`` records, and a quarter of that for the last ``TAIL_TASKS`` tasks'
    worth of records (at most a quarter of the records).

    The first range is the first group piece alone: the calling process runs it before any
    worker starts, which loads the compiled kernels once for every worker to inherit.
    """
    n = sorted_nodes.size
    starts = np.flatnonzero(np.diff(sorted_nodes)) + 1
    bounds = np.concatenate([[0], starts, [n]]).tolist()
    first = min(bounds[1], MAX_GROUP)
    tasks, task_start = [(0, first)], first
    tail = n - min(TAIL_TASKS * TASK_RECORDS, n // 4)
    for a, b in zip(bounds[:-1], bounds[1:]):
        a = max(a, first)
        while a < b:  # pieces of at most MAX_GROUP records of one group
            a = min(b, a + MAX_GROUP)
            size = TASK_RECORDS if task_start < tail else max(1, TASK_RECORDS // 4)
            if a - task_start >= size:
                tasks.append((task_start, a))
                task_start = a
    if task_start < n:
        tasks.append((task_start, n))
    return tasks


def _run_task(sampler: FastSampler, job: _Job, start: int, stop: int) -> np.ndarray:
    """Output nodes of sorted records start .. stop - 1, in that order.

    Where the task's postcodes are dense (most of the nodes between its first and last
    present, in the batch's order, as in a national file), neighbouring groups share their
    sweeps (``FastSampler.sample_groups``), stretch by stretch (``_runs``); the outputs are the
    same either way."""
    nodes, order, ids, context = job.sorted_nodes, job.order, job.ids, job.context
    # The task's identifiers in sorted order, in one call where a compact store of them
    # (release/draw_ahead.py) decodes many at once; then each group piece is a slice.
    positions = order[start:stop]
    take = getattr(ids, "decode_at", None)
    task_ids = take(positions) if take is not None else [ids[k] for k in positions.tolist()]
    task_nodes = nodes[start:stop]
    cuts = (np.flatnonzero(task_nodes[1:] != task_nodes[:-1]) + 1).tolist()
    pieces = [  # (first, stop) of each group piece, within the task
        (i, min(b, i + MAX_GROUP))
        for a, b in zip([0, *cuts], [*cuts, stop - start])
        for i in range(a, b, MAX_GROUP)
    ]
    node_list = task_nodes.tolist()
    groups = [(node_list[i], task_ids[i:j]) for i, j in pieces]
    # what the records were sorted by, group by group: the nodes, or their places along the map
    keys = task_nodes if job.places is None else job.places[task_nodes]
    group_keys = keys[[i for i, _ in pieces]].tolist()
    drawn: list[list[int]] = []
    apart = 0  # groups[apart:first] are drawn each from its own search (``sample_each``)
    for first, last in _runs(group_keys):
        run = groups[first:last]
        if len(run) >= SHARED_MIN_GROUPS:
            drawn += sampler.sample_each(context, groups[apart:first])
            density = len(run) / (group_keys[last - 1] - group_keys[first] + 1)
            together = density >= SHARED_DECIDE_DENSITY
            drawn += sampler.sample_groups(context, run, decide_together=together)
            apart = last
    drawn += sampler.sample_each(context, groups[apart:])
    # The pieces cover the task in order, so their outputs, joined, are the task's: each
    # piece must have one output a record, or every later record would take another's.
    if any(len(outputs) != j - i for (i, j), outputs in zip(pieces, drawn, strict=True)):
        raise RuntimeError("a group's draws do not match its records")
    return np.fromiter(chain.from_iterable(drawn), dtype=np.int64, count=stop - start)


def _runs(group_keys: list[int]) -> list[tuple[int, int]]:
    """``[first, last)`` of the runs of groups whose sort keys (their nodes, or their places
    along the map: ``_places``) follow each other with gaps of at most ``SHARED_GAP``: a task
    may straddle the end of a dense stretch (a regional file's area, say), and each stretch is
    judged on its own."""
    cuts = [k for k in range(1, len(group_keys)) if group_keys[k] - group_keys[k - 1] > SHARED_GAP]
    bounds = [0, *cuts, len(group_keys)]
    return list(zip(bounds[:-1], bounds[1:]))


def _sampler(job: _Job) -> FastSampler:
    """A sampler for ``job`` (its buffers are this process's own; its tables are shared)."""
    return FastSampler(
        job.mechanism,
        job.tables,
        job.landmarks,
        job.profiles,
        job.brackets,
        along_map=job.along_map,
    )


def _worker_init() -> None:
    """In each worker (after ``fork_pool`` has left interrupts to the parent): build this
    worker's buffers."""
    global _WORKER
    job = _JOB
    if job is None:
        # Forked by the pool's own thread to replace a worker while the pool was being
        # stopped and the job already forgotten: nothing to do, and nothing to say.
        os._exit(0)
    _WORKER = _Worker(job, _sampler(job))


def _worker_task(bounds: tuple[int, int]) -> tuple[int, np.ndarray, list[tuple[int, Bracket]]]:
    """Output nodes of one task, and the brackets this worker kept meanwhile (small)."""
    worker = _WORKER
    assert worker is not None, "the pool runs _worker_init in each worker before any task"
    start, stop = bounds
    sampler = worker.sampler
    out = _run_task(sampler, worker.job, start, stop)
    kept, sampler.kept_brackets = sampler.kept_brackets, []
    return start, out, kept


def _canonical_ids(ids: Sequence) -> list[str]:
    """Every identifier in canonical form, as ``Mechanism.perturb`` makes it; InputDataError
    listing positions (0-based) and reasons, never values, if any is invalid."""
    canonical: list[str] = []
    problems: list[tuple[int, str]] = []
    bad_ids = 0
    for i, value in enumerate(ids):
        try:
            canonical.append(canonical_subject_id(value))
        except ValueError as exc:
            bad_ids += 1
            if len(problems) < _ROW_ERRORS_SHOWN:
                problems.append((i, f"subject identifier: {exc}"))
    if bad_ids:
        raise InputDataError(
            f"{counted(bad_ids, 'record')} {verb(bad_ids, 'has', 'have')} an invalid subject "
            "identifier (positions counted from 0)",
            problems,
            bad_ids,
        )
    return canonical


def perturb_nodes(
    mechanism: Mechanism,
    key: Key,
    subject_ids: Sequence,
    nodes,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    landmarks: bool | None = None,
    profiles: bool | str | None = None,
) -> np.ndarray:
    """Output node for each record (true node ``nodes[i]``, subject ``subject_ids[i]``).

    Identifiers are canonicalised exactly as ``Mechanism.perturb`` does (an invalid one raises
    :class:`InputDataError` naming positions, never values), so ``perturb_nodes`` and
    ``Mechanism.perturb`` agree for every identifier.  See :func:`_perturb_canonical` for the
    options.
    """
    if not isinstance(key, Key):
        raise TypeError("key must be a postcode_privacy.Key")
    return _perturb_canonical(
        mechanism,
        key,
        _canonical_ids(list(subject_ids)),
        nodes,
        workers=workers,
        progress=progress,
        landmarks=landmarks,
        profiles=profiles,
    )


def _perturb_canonical(
    mechanism: Mechanism, key: Key, subject_ids: Sequence[str], nodes, **options: Any
) -> np.ndarray:
    """Output node for each record: ``start_draws`` (the same arguments), waiting for the
    draws to finish."""
    return start_draws(mechanism, key, subject_ids, nodes, **options).result()


class Draws:
    """The draws of one batch (``start_draws``): the calling process has run what it runs
    itself; the rest, if any, is drawn by worker processes from :meth:`start` (which
    :meth:`result` calls if the caller has not) until :meth:`result`.

    Between :meth:`start` and :meth:`result` the caller may do other work (the release layer
    checks its next chunk meanwhile), but must not start other draws: the workers hold
    ``_PARALLEL_LOCK`` and ``_JOB`` until :meth:`result` or :meth:`cancel`.  The workers are
    started by a separate call so that the caller holds this object before any worker exists:
    an interruption at any moment leaves it something to cancel.
    """

    def __init__(
        self,
        out: np.ndarray,
        order: np.ndarray,
        brackets: Brackets | None,
        progress: Callable[[int], None] | None,
    ):
        self._out, self._order = out, order
        self._brackets, self._progress = brackets, progress
        self._pool: Any = None  # a multiprocessing pool, while workers draw
        self._results: Iterator[tuple[int, np.ndarray, list[tuple[int, Bracket]]]] = iter(())
        self._waiting: tuple[_Job, list[tuple[int, int]], int] | None = None  # for the workers

    def start(self) -> None:
        """Start the worker processes, if this batch has any work for them (idempotent)."""
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            self._start_workers(*waiting)

    def _start_workers(self, job: _Job, tasks: list[tuple[int, int]], workers: int) -> None:
        global _JOB, _HOLDER
        if _HOLDER == threading.get_ident():  # would wait for itself for ever
            raise RuntimeError("collect the draws under way before starting others")
        _PARALLEL_LOCK.acquire()
        _HOLDER, _JOB = threading.get_ident(), job
        try:
            self._pool = fork_pool(workers, _worker_init)
        except BaseException:
            _release_workers_lock()
            raise
        try:
            self._results = self._pool.imap_unordered(_worker_task, tasks)
        except BaseException:
            self.cancel()
            raise

    def _take(self, start: int, result: np.ndarray) -> None:
        self._out[self._order[start : start + result.size]] = result
        if self._progress is not None:
            self._progress(result.size)

    def result(self) -> np.ndarray:
        """Every record's output node, once the workers have finished (they are then gone)."""
        brackets = self._brackets
        try:
            self.start()
            results = self._results if self._pool is None else watched(self._pool, self._results)
            for start, result, kept in results:
                self._take(start, result)
                if brackets is not None:  # workers keep brackets only when given some
                    for node, entry in kept:  # the deepest bracket of each source
                        if wants_bracket(brackets, node, len(entry.cumulative)):
                            brackets[node] = entry
        finally:
            self.cancel()
        return self._out

    def cancel(self) -> None:
        """Stop the workers, if any are left, or keep them from starting (idempotent)."""
        self._waiting = None
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            stop_pool(pool)  # kills and joins the workers
        finally:
            _release_workers_lock()


def _release_workers_lock() -> None:
    """Forget the job of the workers just stopped (or never started) and free the lock."""
    global _JOB, _HOLDER
    _HOLDER, _JOB = None, None
    _PARALLEL_LOCK.release()


def start_draws(
    mechanism: Mechanism,
    key: Key,
    subject_ids: Sequence[str],
    nodes,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    landmarks: bool | None = None,
    profiles: bool | str | None = None,
    brackets: Brackets | None = None,
    quiet: bool = False,
) -> Draws:
    """Prepare the draws of every record (true node ``nodes[i]``, canonical ``subject_ids[i]``)
    and return them: :meth:`Draws.start` starts the worker processes, :meth:`Draws.result`
    gives the outputs once drawn, and :meth:`Draws.cancel` stops the workers.

    For callers inside the package that have already canonicalised every identifier (the
    release layer does, once, while checking records).  Preconditions: identifiers are
    canonical (``canonical_subject_id``) and nodes are valid indices of ``mechanism.graph``.
    ``workers``: processes to use; ``None`` means :func:`default_workers`.  Without ``fork``
    everything runs in this process.
    ``progress``, if given, is called in the calling process with the number of records
    finished each time a task completes.  ``landmarks``: whether to use the landmark bound
    (engine/landmarks.py); ``None`` decides by the number of distinct postcodes.  ``profiles``:
    whether to use the ball-mass profile table (engine/profiles.py, ``profiles_to_use``: True,
    False, "cached", or None for the default, which uses it on the embedded graph and builds it
    there on first use for a batch of many distinct postcodes).
    ``brackets``: a dict the caller keeps across calls with the same mechanism (the release
    layer keeps one per release), in which bounds on Z are kept by source so that a postcode
    seen again in a later batch needs no deep exploration (``BoundSources.brackets_for``).
    ``quiet``: no progress lines if the profile table is built on first use.  None of these
    options changes any output.

    Postcondition: element i of ``result()`` equals the reference sampler's output for
    record i.
    """
    nodes = np.asarray(nodes, dtype=np.int64).reshape(-1)
    n = nodes.size
    if len(subject_ids) != n:
        raise InvalidParameterError("subject_ids and postcodes differ in length")
    if n and (nodes.min() < 0 or nodes.max() >= len(mechanism.graph)):
        raise InvalidParameterError("node index out of range for this graph")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise InvalidParameterError("workers must be a positive whole number")
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return Draws(out, np.empty(0, dtype=np.int64), brackets, progress)
    graph = mechanism.graph
    distinct = _distinct(nodes, len(graph))
    tables = graph_tables(graph)
    if workers is None:
        workers = default_workers(n)
    fork = _fork_available()
    # A first-use build of the profile table runs on the same processes as the draws.
    table = profiles_to_use(
        graph, tables.loc_mass, distinct, profiles, workers if fork else 1, progress=not quiet
    )
    if landmarks is None:  # worth building for many sources, unless the table reaches R - 1
        # or its far-mass rows bound the far mass (more tightly, at no cost) as deep as the
        # records explore: at radii past twice the rows' depth (epsilon below about 0.35 on
        # the national graph) records explore beyond the rows, where only landmarks help
        # (docs/performance.md, "Far-mass rows from clusters")
        radius = mechanism.radius
        covered = table is not None and (
            table.depth >= radius - 1
            or (table.far is not None and 2 * table.far.depth >= radius - 1)
        )
        landmarks = distinct * LANDMARK_SHARE >= graph.n_locations and not covered
    # Worth its 0.5 s (national graph) where records explore far: the search costs about
    # a fifth less per location along the map (docs/performance.md, "Compiled shell search")
    along_map = mechanism.radius >= ALONG_MAP_RADIUS and distinct >= ALONG_MAP_SOURCES
    places = _places(tables) if along_map else None
    order = _narrow(np.argsort(nodes if places is None else places[nodes], kind="stable"))
    sorted_nodes = _narrow(nodes[order])
    tasks = _tasks(sorted_nodes)
    job = _Job(
        mechanism=mechanism,
        context=mechanism.stream_context(key),
        sorted_nodes=sorted_nodes,
        places=places,
        order=order,
        ids=subject_ids,
        tables=tables,
        landmarks=bool(landmarks),
        profiles=table,
        brackets=brackets,
        along_map=along_map,
    )
    workers = min(workers, len(tasks))
    if workers > 1 and not fork:
        workers = 1
    sampler = _sampler(job)
    draws = Draws(out, order, brackets, progress)
    # The first task runs here, before any fork, so compiled kernels are loaded once and shared.
    first, rest = tasks[0], tasks[1:]
    draws._take(first[0], _run_task(sampler, job, *first))
    if workers > 1 and rest:
        sampler.load_alone_kernels()
    if workers == 1 or not rest:
        for start, stop in rest:
            draws._take(start, _run_task(sampler, job, start, stop))
    else:
        draws._waiting = (job, rest, workers)  # started by draws.start() or draws.result()
    return draws


def prepare_in_background(mechanism: Mechanism, postcodes_at_most: int | None) -> None:
    """Start making, in a thread, what a coming batch of at most ``postcodes_at_most``
    distinct postcodes (None: no bound known) would otherwise make first, in this process,
    before any draw: the search's layout along the map, which such a batch sorts its records
    by (``start_draws``).  The release layer calls this while it checks the records.
    Nothing is started for a batch that cannot use it: a radius below ``ALONG_MAP_RADIUS``,
    or fewer than ``ALONG_MAP_SOURCES`` postcodes at most."""
    many = postcodes_at_most is None or postcodes_at_most >= ALONG_MAP_SOURCES
    if mechanism.radius >= ALONG_MAP_RADIUS and many:
        graph_tables(mechanism.graph).make_layout_in_background()


def _narrow(numbers: np.ndarray) -> np.ndarray:
    """``numbers`` (non-negative) as int32 where they fit: a batch keeps its records' order and
    sorted nodes until the workers are done, and at 10 million records each int64 array is 80
    MB of the national file's peak memory (docs/performance.md, "Batches, workers and
    memory").  Both are only sliced and indexed with, so their width changes no output."""
    if numbers.size and numbers.max() > np.iinfo(np.int32).max:
        return numbers
    return numbers.astype(np.int32)


def _distinct(nodes: np.ndarray, n_nodes: int) -> int:
    """How many distinct nodes ``nodes`` holds: by sorting for a batch much smaller than the
    graph, by counting every node's records for a larger one (one pass, no sort)."""
    if nodes.size * 16 < n_nodes:
        return int(np.unique(nodes).size)
    return int(np.count_nonzero(np.bincount(nodes, minlength=n_nodes)))


def _places(tables: GraphTables) -> np.ndarray:
    """Each node's place in the member lists of the search's layout along the map: co-located
    postcodes side by side, the locations along the curve.  A batch whose search reads that
    layout sorts its records by it rather than by node.  Either way a postcode's records are
    consecutive and consecutive postcodes are neighbours, but along the map they are closer:
    one search then finds more of what it reads still in the processor's cache from the last,
    and a dense batch's shared sweeps (``_runs``) gather more compact groups (6 to 12% faster
    on a regional file at epsilon 0.5; docs/performance.md, "Batches, workers and memory").
    The order changes no output: each record's draw depends on that record alone."""
    members = tables.search_layout(True).members_flat
    places = np.empty(members.size, dtype=np.int32)
    places[members] = np.arange(members.size, dtype=np.int32)
    return places


def perturb_many(
    mechanism: Mechanism,
    key: Key,
    subject_ids: Iterable,
    postcodes: Iterable,
    *,
    workers: int | None = None,
    progress: Callable[[int], None] | None = None,
    landmarks: bool | None = None,
    profiles: bool | str | None = None,
) -> list[str]:
    """Released postcode for each (subject identifier, true postcode), as ``Mechanism.perturb``.

    Every identifier and postcode is checked before any draw.  Invalid identifiers raise
    :class:`InputDataError` listing record positions (0-based) and reasons; postcodes that are
    not nodes of the graph raise :class:`UnknownPostcodeError` giving the count and the first
    position.  No value is ever echoed.
    """
    ids, codes = list(subject_ids), list(postcodes)
    if len(ids) != len(codes):
        raise InvalidParameterError("subject_ids and postcodes differ in length")
    graph = mechanism.graph
    canonical = _canonical_ids(ids)
    nodes = np.empty(len(codes), dtype=np.int64)
    unknown, first_unknown = 0, -1
    for i, code in enumerate(codes):
        node = graph.find(code)
        if node is None:
            unknown += 1
            if first_unknown < 0:
                first_unknown = i
            node = 0
        nodes[i] = node
    if unknown:
        raise UnknownPostcodeError(
            f"{counted(unknown, 'record')} {verb(unknown, 'has', 'have')} a postcode that is not "
            f"a node of this graph (first at position {first_unknown}, counted from 0)"
        )
    result = _perturb_canonical(
        mechanism,
        key,
        canonical,
        nodes,
        workers=workers,
        progress=progress,
        landmarks=landmarks,
        profiles=profiles,
    )
    return graph.labels_of(result)
