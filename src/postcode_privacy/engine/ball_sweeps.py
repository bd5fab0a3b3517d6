"""Exact ball masses of many sources at once, by bit-parallel breadth-first sweeps (numba).

A *source* here is a set of locations (one location for the profile table of
engine/profiles.py, a compact cluster of locations for the far-mass rows of
engine/cluster_balls.py).  The ball of j hops around a source is every location within j hops
of one of its locations; ``sweep_table`` writes, for every source, the prior mass of its balls
of 0 .. ``depth`` hops, as exact integer sums.

How: the graph is renumbered along a Hilbert curve of the map (``_map_order``) and then source
by source, and consecutive sources are swept 64 at a time by one breadth-first search that
keeps one bit per source in a 64-bit word per location, so sources that share most of their
balls share the work.  For sources of one location the order never changes a mass, only the
time taken; for clusters the same order decides which locations form each cluster, so it is
part of the far-mass rows' pinned content (engine/cluster_balls.py).
Cost on the national graph: docs/performance.md ("The ball-mass profile table").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .._numba import njit
from ..graph.graph import Graph
from .forking import fork_pool, stop_pool, watched

__all__ = ["Sweeps", "mass_dtype", "sweep_table", "table_sha256"]

WORD = 64  # sources per sweep: one bit each in an int64 word
_GROUP_HOPS = 10  # a sweep of single locations grows at most this far from its first one
_SWEEPS_PER_TASK = 256  # sweeps a build worker makes per task (progress granularity)


@njit(cache=True)
def _groups(indptr, indices, size, max_hops):  # pragma: no cover - compiled
    """Partition the locations into compact groups of at most ``size``.

    From the lowest unassigned location, a breadth-first search (through any location, to at
    most ``max_hops``) takes unassigned locations until ``size`` are taken.  Returns the
    locations in group order and the group boundaries in that order.
    """
    n = indptr.size - 1
    assigned = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    bounds = np.empty(n + 1, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    depth = np.empty(n, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    n_groups = 0
    placed = 0
    for seed in range(n):
        if assigned[seed]:
            continue
        bounds[n_groups] = placed
        n_groups += 1
        stamp[seed] = n_groups
        queue[0] = seed
        depth[seed] = 0
        head, tail, taken = 0, 1, 0
        while head < tail and taken < size:
            v = queue[head]
            head += 1
            if not assigned[v]:
                assigned[v] = True
                order[placed] = v
                placed += 1
                taken += 1
            if depth[v] >= max_hops:
                continue
            for e in range(indptr[v], indptr[v + 1]):
                w = indices[e]
                if stamp[w] != n_groups:
                    stamp[w] = n_groups
                    depth[w] = depth[v] + 1
                    queue[tail] = w
                    tail += 1
    bounds[n_groups] = placed
    return order, bounds[: n_groups + 1]


@njit(cache=True)
def _advance(
    indptr, indices, mass, state, active, n_active, fresh, touched, n_touched, tally, live
):  # fmt: skip  # pragma: no cover - compiled
    """One level of a bit-parallel sweep: the sources in ``live`` spread from the locations
    ``active[:n_active]`` (their frontier) to their unreached neighbours, which become the new
    frontier in ``active``; each new location's mass goes to ``tally`` under the bits that
    reach it (spread onto the sources by ``_spread``).  Returns the new ``n_active`` and
    ``n_touched``.  ``state``, ``fresh`` and ``touched`` are as ``_sweep`` describes them."""
    n_fresh = 0
    for i in range(n_active):
        v = active[i]
        frontier = state[v, 1] & live
        state[v, 1] = 0
        if frontier == 0:
            continue
        for e in range(indptr[v], indptr[v + 1]):
            # Branch-free: whether an edge brings new sources is unpredictable, and a
            # mispredicted branch per edge cost half the sweep's time.  ``fresh`` is
            # written every time but only advances for a location reached first here.
            w = indices[e]
            new = frontier & ~state[w, 0]
            old = state[w, 2]
            state[w, 2] = old | new
            fresh[n_fresh] = w
            n_fresh += (new != 0) & (old == 0)
    for i in range(n_fresh):
        w = fresh[i]
        new = state[w, 2]
        state[w, 2] = 0
        touched[n_touched] = w  # kept only if no source had reached w before
        n_touched += state[w, 0] == 0
        state[w, 0] |= new
        state[w, 1] = new
        m = mass[w]
        for byte in range(8):
            tally[byte, (new >> (8 * byte)) & 255] += m
        active[i] = w
    return n_fresh, n_touched


@njit(cache=True)
def _spread(tally, out, level):  # pragma: no cover - compiled
    """Add each ``tally[byte, value]`` to ``out[b, level]`` for the sources b whose bits form
    ``value`` in that byte, and clear the tally: a location costs eight additions, not one
    per source."""
    for byte in range(8):
        tally[byte, 0] = 0
        for value in range(1, 256):
            t = tally[byte, value]
            if t:
                tally[byte, value] = 0
                bits = value
                b = 8 * byte
                while bits:
                    if bits & 1:
                        out[b, level] += t
                    bits >>= 1
                    b += 1


@njit(cache=True)
def _sweep(
    indptr, indices, mass, seed_ptr, first, count, depth,
    state, active, fresh, touched, tally, out,
):  # fmt: skip
    """Cumulative ball masses of sources first .. first + count - 1 (count <= 64), into
    ``out[b, k]`` for k = 0 .. depth.  Source s is the locations seed_ptr[s] ..
    seed_ptr[s + 1] - 1 (in the renumbered graph; the sources do not overlap).  (pragma:
    compiled)

    ``state[v]`` holds three int64 bit sets for location v: sources that have reached it, that
    reached it at the last level (the frontier), and that reach it at this level.  All zero on
    entry and on exit.  ``fresh`` and ``touched`` have room for one more than the locations
    (each is written one place ahead of its count).  ``tally[byte, value]`` sums the mass of
    the locations newly reached by the sources whose bits form ``value`` in that byte; it is
    spread onto the sources once per level, so a location costs eight additions, not one per
    source.
    """
    n_active = 0
    n_touched = 0
    for b in range(count):
        out[b, 0] = 0
        for v in range(seed_ptr[first + b], seed_ptr[first + b + 1]):
            state[v, 0] = np.int64(1) << b
            state[v, 1] = np.int64(1) << b
            touched[n_touched] = v
            n_touched += 1
            active[n_active] = v
            n_active += 1
            out[b, 0] += mass[v]
    for level in range(1, depth + 1):
        n_active, n_touched = _advance(
            indptr, indices, mass, state, active, n_active, fresh, touched, n_touched, tally, -1
        )
        for b in range(count):
            out[b, level] = out[b, level - 1]
        _spread(tally, out, level)
    for i in range(n_active):
        state[active[i], 1] = 0
    for i in range(n_touched):
        state[touched[i], 0] = 0


@njit(cache=True, nogil=True)
def _curve_positions(cells_x, cells_y, side):  # pragma: no cover - compiled
    """Position along a Hilbert curve over a ``side`` x ``side`` grid (side a power of two) of
    each cell (x, y): cells close on the curve are close on the map."""
    out = np.empty(cells_x.size, dtype=np.int64)
    for i in range(cells_x.size):
        x, y, position = cells_x[i], cells_y[i], 0
        half = side // 2
        while half > 0:
            right = 1 if x & half else 0
            up = 1 if y & half else 0
            position += half * half * ((3 * right) ^ up)
            if up == 0:  # turn the quadrant so the curve stays continuous
                if right == 1:
                    x, y = half - 1 - x, half - 1 - y
                x, y = y, x
            half //= 2
        out[i] = position
    return out


def _map_order(graph: Graph) -> np.ndarray:
    """The locations along a Hilbert curve through the ranks of their coordinates, or in
    their own order for a graph without coordinates.  Sweeps along it touch few stretches of
    memory (docs/performance.md, "The ball-mass profile table").  The clusters of ``Sweeps``
    are grown along it too, so changing it (or ``_groups``) changes the far-mass rows and
    their pinned hash; the profile table's masses do not depend on it."""
    n = graph.n_locations
    coordinates = graph.location_coordinates
    if coordinates is None or n == 0:
        return np.arange(n, dtype=np.int64)
    side = 1 << 16
    cells = []
    for axis in (0, 1):
        # Cells by rank, not by value: any floats (NaN, huge, all equal) give a valid grid
        # without float arithmetic; the curve keeps the order along each axis.
        rank = np.empty(n, dtype=np.int64)
        rank[np.argsort(coordinates[:, axis], kind="stable")] = np.arange(n)
        cells.append(rank * side // n)
    return np.argsort(_curve_positions(cells[0], cells[1], side), kind="stable")


def _permuted(
    indptr: np.ndarray, indices: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The adjacency (CSR) of the graph whose location i is location ``order[i]``."""
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return _renumbered(indptr, indices, order, rank)


@njit(cache=True, nogil=True)
def _renumbered(indptr, flat, original, relabel):  # pragma: no cover - compiled
    """The CSR lists of ``original[0]``, ``original[1]``, ... in turn, each entry e written as
    ``relabel[e]`` (int32): a list's entries keep their order.  Renumbers the graph for the
    sweeps here and for the search (engine/layout.py)."""
    n = original.size
    out_indptr = np.empty(n + 1, dtype=np.int64)
    out_indptr[0] = 0
    for i in range(n):
        v = original[i]
        out_indptr[i + 1] = out_indptr[i] + indptr[v + 1] - indptr[v]
    out = np.empty(out_indptr[n], dtype=np.int32)
    for i in range(n):
        v = original[i]
        p = out_indptr[i]
        for e in range(indptr[v], indptr[v + 1]):
            out[p] = relabel[flat[e]]
            p += 1
    return out_indptr, out


class Sweeps:
    """The location graph renumbered source by source, and the sources in sweeps of at most 64.

    ``cluster_size`` 1: every location is a source, and the sweeps are compact groups of 64
    locations grown from the map order.  Otherwise the sources are compact clusters of at most
    ``cluster_size`` locations, each within ``cluster_hops`` hops of its first location, grown
    along the map order, and 64 consecutive clusters make a sweep.  Either way neighbouring
    sweeps, and the balls they cover, lie close together in memory.
    """

    def __init__(
        self, graph: Graph, loc_mass: np.ndarray, cluster_size: int = 1, cluster_hops: int = 0
    ):
        indptr = np.ascontiguousarray(graph.loc_indptr, dtype=np.int64)
        indices = graph.loc_indices
        along_map = _map_order(graph)
        n = graph.n_locations
        if cluster_size == 1:
            grouped, sweep_ptr = _groups(*_permuted(indptr, indices, along_map), WORD, _GROUP_HOPS)
            seed_ptr = np.arange(n + 1, dtype=np.int64)
        else:
            grouped, seed_ptr = _groups(
                *_permuted(indptr, indices, along_map), cluster_size, cluster_hops
            )
            n_clusters = seed_ptr.size - 1
            sweep_ptr = np.append(np.arange(0, n_clusters, WORD), n_clusters).astype(np.int64)
        order = along_map[grouped]
        self.indptr, self.indices = _permuted(indptr, indices, order)  # int32: half the traffic
        self.mass = np.ascontiguousarray(loc_mass[order], dtype=np.int64)
        self.order = order  # new number -> location
        self.seed_ptr = seed_ptr  # source s is new numbers seed_ptr[s] .. seed_ptr[s + 1] - 1
        self.sweep_ptr = sweep_ptr  # sweep g is sources sweep_ptr[g] .. sweep_ptr[g + 1] - 1
        self.n_sources = seed_ptr.size - 1
        self.n_sweeps = sweep_ptr.size - 1

    def source_of_location(self) -> np.ndarray:
        """The source each location belongs to (by location)."""
        source = np.empty(self.order.size, dtype=np.int64)
        source[self.order] = np.repeat(np.arange(self.n_sources), np.diff(self.seed_ptr))
        return source


def _sweep_range(
    net: Sweeps, sweeps: range, depth: int, out: np.ndarray, row_of_source: np.ndarray
) -> None:
    """Write the ball masses of the sources of ``sweeps`` into ``out[row_of_source[s]]``."""
    n = net.order.size
    state = np.zeros((n, 3), dtype=np.int64)
    active = np.empty(n, dtype=np.int64)
    fresh = np.empty(n + 1, dtype=np.int64)
    touched = np.empty(n + 1, dtype=np.int64)
    tally = np.zeros((8, 256), dtype=np.int64)
    rows = np.zeros((WORD, depth + 1), dtype=np.int64)
    for g in sweeps:
        first, stop = int(net.sweep_ptr[g]), int(net.sweep_ptr[g + 1])
        count = stop - first
        _sweep(
            net.indptr, net.indices, net.mass, net.seed_ptr, first, count, depth,
            state, active, fresh, touched, tally, rows,
        )  # fmt: skip
        out[row_of_source[first:stop]] = rows[:count]


# Build workers inherit this through fork (never pickled).
_BUILD: tuple[Sweeps, int, str, np.ndarray] | None = None


def _build_task(sweeps: tuple[int, int]) -> int:
    net, depth, path, row_of_source = _BUILD  # type: ignore[misc]
    out = np.load(path, mmap_mode="r+")
    _sweep_range(net, range(*sweeps), depth, out, row_of_source)
    out.flush()
    return sweeps[1] - sweeps[0]


def sweep_table(
    net: Sweeps,
    depth: int,
    dtype: np.dtype,
    row_of_source: np.ndarray,
    *,
    path: Path | None = None,
    stage: str | None = None,
    workers: int = 1,
) -> np.ndarray:
    """The table ``out[row_of_source[s], k]`` = prior mass within k hops of source s, k = 0 ..
    ``depth`` (``row_of_source`` a permutation of the sources), in memory (one process) or,
    with ``path``, written to that ``.npy`` file by ``workers`` forked processes and
    memory-mapped.  ``stage`` names the work on a progress bar (a bar with rate and ETA on a
    terminal, a line per quarter in a log); None for no progress."""
    global _BUILD
    shape = (net.n_sources, depth + 1)
    # At most _SWEEPS_PER_TASK sweeps a task, and enough tasks to keep every worker busy
    # to the end (the national far-mass rows are 531 sweeps of about a quarter second).
    per_task = max(1, min(_SWEEPS_PER_TASK, -(-net.n_sweeps // (16 * max(1, workers)))))
    tasks = [
        (start, min(start + per_task, net.n_sweeps)) for start in range(0, net.n_sweeps, per_task)
    ]
    report = None
    if stage is not None:
        from .._progress import Progress

        report = Progress("postcode-privacy")

    def count(done_per_task: Iterable[int]) -> None:
        """Wait for the tasks, moving the progress bar as each finishes."""
        finished = 0
        for done in done_per_task:
            finished += done
            if report is not None:
                report(stage or "", finished, net.n_sweeps)

    try:
        if path is None:
            table = np.zeros(shape, dtype=dtype)

            def sweep_into_table(task: tuple[int, int]) -> int:
                _sweep_range(net, range(*task), depth, table, row_of_source)
                return task[1] - task[0]

            count(map(sweep_into_table, tasks))
            return table
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
        del out  # workers write through their own maps
        _BUILD = (net, depth, str(path), row_of_source)
        if workers > 1:
            # Workers leave interrupts to the parent and die quietly when it stops the pool
            # (engine/forking.py: a worker would otherwise inherit the CLI's SIGTERM handler
            # and print a traceback as the pool is shut down).
            pool = fork_pool(workers)
            try:
                count(watched(pool, pool.imap_unordered(_build_task, tasks)))
                pool.close()  # all done: the workers exit on their own, without a signal
                pool.join()
            finally:
                stop_pool(pool)  # an error or an interruption: stop them now
        else:
            count(map(_build_task, tasks))
    finally:
        _BUILD = None
        if report is not None:
            report.close()
    return np.load(path, mmap_mode="r")


def mass_dtype(total_prior: int) -> np.dtype:
    """The type of a cached table of ball masses: 32 bits while every mass fits."""
    return np.dtype(np.uint32) if total_prior < 2**32 else np.dtype(np.int64)


def table_sha256(*arrays: np.ndarray) -> str:
    """The sha256 of the arrays' bytes, one after another (what a cached table's header
    records and its loader checks), read in slices: bounded memory for a memory map."""
    digest = hashlib.sha256()
    for array in arrays:
        for start in range(0, array.shape[0], 65_536):
            # a view of a contiguous slice, not a copy (hashlib reads it without the GIL)
            digest.update(np.ascontiguousarray(array[start : start + 65_536]).data)
    return digest.hexdigest()
