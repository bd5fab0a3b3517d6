"""Exact ball-mass profiles of every location, to a fixed depth, computed once per graph.

``cumulative[loc, k]`` is the prior mass of the locations within k hops of location ``loc``,
for k = 0 .. ``depth``.  For a true node x at that location the node ball B_k(x) (docs/spec.md,
"Sampling": shell 0 is x alone, shell 1 adds its co-located postcodes) has mass
pi(x) for k = 0 and ``cumulative[loc, k]`` for k >= 1, so the first ``depth`` + 1 shell masses
of every source, and hence C_0 .. C_depth, are known without exploring
(``FastSampler._profile_bracket`` in engine/fast.py).  Beyond ``depth`` the engine bounds Z as
it always has; the profile only lets the exact decision start deep instead of at shell 0.

How the table is computed (``build_profiles``): locations are put in compact groups of at most
64 (grown breadth-first), and each group is swept at once by a breadth-first search that keeps
one bit per source in a 64-bit word per location, so sources that share most of their ball
share the work.  The graph is renumbered group by group first, so that a sweep touches memory
that is close together.  The masses are exact integer sums.

Nothing here decides an output by itself: the table gives exact masses the reference sampler
would compute by exploring, so a correct table changes only the time taken.  A wrong table
would change outputs, so (i) tests compare it with the reference search on generated graphs
and on locations of the national graph; (ii) a cached table is bound to its graph and checked
by content hash on every load, and for the embedded graph that hash is pinned in this module
(``PINNED_SHA256``), so a stale, corrupt or edited file is refused and rebuilt, and a build
that differs is not used; (iii) the engine checks the masses it explores anyway against the
table before drawing (a partial guard: it sees only the shells it explores).  A table for a
custom graph (opt-in) has only its own header hash, which guards against damage, not against
someone who can write to the cache directory.

Cost on the national graph: docs/performance.md ("Ball-mass profiles").
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np
from numba import njit

from ..errors import InvalidParameterError
from ..graph.graph import Graph
from ..graph.pinned import DEFAULT_GRAPH_SHA256

__all__ = [
    "BallProfiles",
    "build_profiles",
    "cached_profiles",
    "load_profiles",
    "profiles_for",
    "profiles_to_use",
    "DEPTH",
    "FORMAT",
]

DEPTH = 40  # hops of every location's profile (docs/performance.md: what depth buys at each ε)
FORMAT = "postcode-privacy-location-profiles/1"
# The content hash of the table of the embedded graph (pinned like the graph itself): a cached
# file, or a build, whose content differs is refused, whoever recomputed its header.
PINNED_SHA256 = {
    (DEFAULT_GRAPH_SHA256, 40): "bd16739cc5da9eeed6faee2abc714b5155dd471b21d29436bb1caaa6aa35c4d5",
}
CACHE_MIN_LOCATIONS = 100_000  # smaller graphs build in memory in seconds
_GROUP = 64  # sources per sweep: one bit each in an int64 word
_GROUP_HOPS = 10  # a group grows at most this far from its first location
_GROUPS_PER_TASK = 256  # groups a build worker sweeps per task (progress granularity)


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
def _sweep(indptr, indices, mass, first, count, depth, state, active, fresh, touched, tally, out):
    """Cumulative ball masses of sources first .. first + count - 1 (count <= 64), into
    ``out[b, k]`` for k = 0 .. depth.  (pragma: compiled)

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
        s = first + b
        state[s, 0] = np.int64(1) << b
        state[s, 1] = np.int64(1) << b
        touched[n_touched] = s
        n_touched += 1
        active[n_active] = s
        n_active += 1
        out[b, 0] = mass[s]
    for level in range(1, depth + 1):
        n_fresh = 0
        for i in range(n_active):
            v = active[i]
            frontier = state[v, 1]
            state[v, 1] = 0
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
        n_active = n_fresh
        for b in range(count):
            out[b, level] = out[b, level - 1]
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
    for i in range(n_active):
        state[active[i], 1] = 0
    for i in range(n_touched):
        state[touched[i], 0] = 0


@njit(cache=True)
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
    their own order for a graph without coordinates.  Only the speed of the sweeps depends on
    this order: a ball then lies in few stretches of memory (docs/performance.md, "The
    ball-mass profile table")."""
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
    n = order.size
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    degree = np.diff(indptr)[order]
    new_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degree, out=new_indptr[1:])
    gather = np.arange(new_indptr[-1]) + np.repeat(indptr[order] - new_indptr[:-1], degree)
    return new_indptr, rank[indices[gather]]


class _Renumbered:
    """The location graph renumbered group by group (for memory locality during the sweeps):
    groups are grown along the map order (``_map_order``), so neighbouring groups, and the
    balls they sweep, are also near one another in memory."""

    def __init__(self, graph: Graph, loc_mass: np.ndarray):
        indptr = np.ascontiguousarray(graph.loc_indptr, dtype=np.int64)
        indices = np.ascontiguousarray(graph.loc_indices, dtype=np.int64)
        along_map = _map_order(graph)
        grouped, bounds = _groups(*_permuted(indptr, indices, along_map), _GROUP, _GROUP_HOPS)
        order = along_map[grouped]
        self.indptr, indices = _permuted(indptr, indices, order)
        self.indices = indices.astype(np.int32)  # half the memory traffic of int64
        self.mass = np.ascontiguousarray(loc_mass[order], dtype=np.int64)
        self.order = order  # new number -> location
        self.bounds = bounds  # group g is new numbers bounds[g] .. bounds[g + 1] - 1


def _sweep_groups(net: _Renumbered, groups: range, depth: int, out: np.ndarray) -> None:
    """Write the profiles of the locations of ``groups`` into ``out`` (rows by location)."""
    n = net.order.size
    state = np.zeros((n, 3), dtype=np.int64)
    active = np.empty(n, dtype=np.int64)
    fresh = np.empty(n + 1, dtype=np.int64)
    touched = np.empty(n + 1, dtype=np.int64)
    tally = np.zeros((8, 256), dtype=np.int64)
    rows = np.zeros((_GROUP, depth + 1), dtype=np.int64)
    for g in groups:
        first, stop = int(net.bounds[g]), int(net.bounds[g + 1])
        count = stop - first
        _sweep(
            net.indptr, net.indices, net.mass, first, count, depth,
            state, active, fresh, touched, tally, rows,
        )  # fmt: skip
        out[net.order[first:stop]] = rows[:count]


# Build workers inherit these through fork (never pickled).
_BUILD: tuple[_Renumbered, int, str] | None = None


def _build_task(groups: tuple[int, int]) -> int:
    net, depth, path = _BUILD  # type: ignore[misc]
    out = np.load(path, mmap_mode="r+")
    _sweep_groups(net, range(*groups), depth, out)
    out.flush()
    return groups[1] - groups[0]


def _dtype_for(total_prior: int) -> np.dtype:
    return np.dtype(np.uint32) if total_prior < 2**32 else np.dtype(np.int64)


def build_profiles(
    graph: Graph,
    loc_mass: np.ndarray,
    depth: int | None = None,
    *,
    path: Path | None = None,
    progress: bool = False,
    workers: int = 1,
) -> np.ndarray:
    """The table ``cumulative[loc, k]`` (see the module docstring), in memory or, with
    ``path``, written to that ``.npy`` file (by ``workers`` forked processes) and memory-mapped.
    ``depth`` defaults to ``DEPTH``."""
    global _BUILD
    depth = DEPTH if depth is None else int(depth)
    net = _Renumbered(graph, loc_mass)
    n_groups = net.bounds.size - 1
    shape = (graph.n_locations, depth + 1)
    dtype = _dtype_for(graph.total_prior)
    report = None
    if progress:  # a bar with rate and ETA on a terminal, a line per quarter in a log
        from .._progress import Progress

        report = Progress("postcode-privacy")
    if path is None:
        out = np.zeros(shape, dtype=dtype)
        _sweep_groups(net, range(n_groups), depth, out)
        return out
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
    del out  # workers write through their own maps
    tasks = [
        (start, min(start + _GROUPS_PER_TASK, n_groups))
        for start in range(0, n_groups, _GROUPS_PER_TASK)
    ]
    stage = "ball-mass profiles (built once per graph, groups of locations)"
    finished = 0
    try:
        _BUILD = (net, depth, str(path))
        if workers > 1:
            context = multiprocessing.get_context("fork")
            with context.Pool(workers) as pool:
                for done in pool.imap_unordered(_build_task, tasks):
                    finished += done
                    if report is not None:
                        report(stage, finished, n_groups)
        else:
            for task in tasks:
                finished += _build_task(task)
                if report is not None:
                    report(stage, finished, n_groups)
    finally:
        _BUILD = None
        if report is not None:
            report.close()
    return np.load(path, mmap_mode="r")


class BallProfiles:
    """Every location's cumulative ball masses ``cumulative[loc, k]``, k = 0 .. ``depth``."""

    def __init__(self, cumulative: np.ndarray, graph: Graph):
        self.cumulative = cumulative
        self._rows = np.asarray(cumulative)  # the same memory without np.memmap's overhead
        self.depth = cumulative.shape[1] - 1
        self.graph_sha256 = graph.sha256

    def shell_masses(self, location: int, prior: int, depth: int) -> list[int]:
        """pi(S_0(x)) .. pi(S_depth(x)) for a node x at ``location`` with prior ``prior``,
        ``depth`` <= the table's: shell 0 is x alone, shell 1 adds the other postcodes at its
        location to the neighbouring locations (docs/spec.md, "Sampling")."""
        balls = self._rows[location, : depth + 1].tolist()
        balls[0] = prior  # B_0 is the node alone; B_k for k >= 1 is the location ball
        return [prior] + [b - a for a, b in zip(balls, balls[1:])]


def _content_sha256(array: np.ndarray) -> str:
    digest = hashlib.sha256()
    for start in range(0, array.shape[0], 65_536):  # in slices: bounded memory for a memmap
        digest.update(np.ascontiguousarray(array[start : start + 65_536]).tobytes())
    return digest.hexdigest()


def _header(graph: Graph, depth: int, sha256: str) -> dict:
    return {
        "format": FORMAT,
        "graph_sha256": graph.sha256,
        "depth": depth,
        "locations": graph.n_locations,
        "total_prior": graph.total_prior,
        "dtype": _dtype_for(graph.total_prior).str,
        "sha256": sha256,
    }


def _cache_prefix(graph: Graph) -> Path:
    """The cache path of ``graph``'s tables, up to their depth."""
    from ..graph.national import cache_dir  # the directory the default graph is cached in

    return cache_dir() / f"profiles-{graph.sha256[:32]}-d"


def _paths(graph: Graph, depth: int) -> tuple[Path, Path]:
    stem = _cache_prefix(graph)
    return stem.with_name(f"{stem.name}{depth}.npy"), stem.with_name(f"{stem.name}{depth}.json")


def load_profiles(graph: Graph, depth: int | None = None) -> BallProfiles:
    """The cached table for ``graph``, memory-mapped; ValueError unless every byte checks out
    (format, graph, depth, shape, type and the content hash of the whole table)."""
    depth = DEPTH if depth is None else int(depth)
    table_path, header_path = _paths(graph, depth)
    header = json.loads(header_path.read_text(encoding="utf-8"))
    array = np.load(table_path, mmap_mode="r", allow_pickle=False)
    expected = _header(graph, depth, header.get("sha256", ""))
    if header != expected:
        raise ValueError("the ball-mass profiles were built for another graph or depth")
    if array.shape != (graph.n_locations, depth + 1) or array.dtype.str != expected["dtype"]:
        raise ValueError("the ball-mass profiles have the wrong shape")
    content = _content_sha256(array)
    if content != header["sha256"]:
        raise ValueError("the ball-mass profiles failed their content hash")
    _check_pinned(graph, depth, content)
    return BallProfiles(array, graph)


def _check_pinned(graph: Graph, depth: int, content: str) -> None:
    """ValueError if this graph's table at this depth is pinned and ``content`` differs."""
    pinned = PINNED_SHA256.get((graph.sha256, depth))
    if pinned is not None and content != pinned:
        raise ValueError("the ball-mass profiles are not the pinned table of the embedded graph")


def _build_and_cache(
    graph: Graph, loc_mass: np.ndarray, depth: int, workers: int, progress: bool
) -> BallProfiles:
    from ..atomic import atomic_output

    table_path, header_path = _paths(graph, depth)
    table_path.parent.mkdir(parents=True, exist_ok=True)
    partial = table_path.with_name(f"{table_path.stem}.partial-{os.getpid()}.npy")
    try:
        array = build_profiles(
            graph, loc_mass, depth, path=partial, progress=progress, workers=workers
        )
        sha256 = _content_sha256(array)
        _check_pinned(graph, depth, sha256)  # a wrong build is neither cached nor used
        os.replace(partial, table_path)
    finally:
        partial.unlink(missing_ok=True)
    with atomic_output(header_path) as handle:
        handle.write(json.dumps(_header(graph, depth, sha256), indent=1).encode())
    _remove_other_depths(graph, depth)
    return BallProfiles(np.load(table_path, mmap_mode="r", allow_pickle=False), graph)


def _remove_other_depths(graph: Graph, depth: int) -> None:
    """Delete this graph's cached tables of other depths (left by an earlier version, whose
    depth differed): hundreds of megabytes that nothing reads any more."""
    prefix = _cache_prefix(graph)
    for path in prefix.parent.glob(f"{prefix.name}*"):
        other = path.name[len(prefix.name) :].removesuffix(".npy").removesuffix(".json")
        if other.isdigit() and int(other) != depth:  # never a partial file of a build
            try:
                path.unlink(missing_ok=True)
            except OSError:  # best effort: the new table is cached and used regardless
                pass


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _known(graph: Graph, depth: int) -> BallProfiles | None:
    """The table this process already holds for ``graph`` at ``depth`` (call under _LOCK)."""
    table = _TABLES.get(graph)
    return table if table is not None and table.depth == depth else None


def cached_profiles(graph: Graph, depth: int | None = None) -> BallProfiles | None:
    """The profiles of ``graph`` if this process has them or a valid cached file exists (a
    refused file is reported and ignored); never builds."""
    depth = DEPTH if depth is None else int(depth)
    with _LOCK:
        table = _known(graph, depth)
        if table is not None or graph.n_locations < CACHE_MIN_LOCATIONS:
            return table
        table_path, header_path = _paths(graph, depth)
        if not (table_path.exists() and header_path.exists()):
            return None
        try:
            table = load_profiles(graph, depth)
        except (OSError, ValueError, KeyError) as exc:
            warnings.warn(
                f"the cached ball-mass profiles were refused ({exc}); they will be rebuilt",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        _TABLES[graph] = table
        return table


def profiles_for(
    graph: Graph,
    loc_mass: np.ndarray,
    depth: int | None = None,
    workers: int = 1,
    progress: bool = True,
) -> BallProfiles:
    """The profiles of ``graph``, once per process: from the on-disk cache for large graphs
    (verified by content hash; refused and rebuilt if stale or corrupt), else built here
    (with progress lines on stderr for a cached build, unless ``progress`` is False)."""
    depth = DEPTH if depth is None else int(depth)
    table = cached_profiles(graph, depth)
    if table is not None:
        return table
    with _LOCK:
        table = _known(graph, depth)
        if table is not None:
            return table
        if graph.n_locations >= CACHE_MIN_LOCATIONS:
            try:
                table = _build_and_cache(graph, loc_mass, depth, workers, progress)
            except OSError as exc:
                warnings.warn(
                    f"could not cache the ball-mass profiles ({exc.strerror or exc}); "
                    "building them in memory",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if table is None:  # a small graph, or the cache could not be written
            table = BallProfiles(build_profiles(graph, loc_mass, depth), graph)
        _TABLES[graph] = table
        return table


BUILD_MIN_SOURCES = 20_000  # distinct postcodes in one call that justify a first-use build


def profiles_to_use(
    graph: Graph,
    loc_mass: np.ndarray,
    sources: int,
    wanted: bool | str | None,
    workers: int,
    progress: bool = True,
) -> BallProfiles | None:
    """The table a batch of ``sources`` distinct postcodes should use, per ``wanted``:

    * False: none;
    * True: this graph's, built now if it is not cached (any graph);
    * "cached": this graph's if this process has it or a valid cached file exists;
    * None (the default): as "cached" for the embedded default graph, and built on first use
      there once a batch has ``BUILD_MIN_SOURCES`` distinct postcodes (where exploring from
      shell 0 would cost more than the build); none for other graphs, for which the table
      is optional (pass True).
    """
    if not (wanted is True or wanted is False or wanted is None or wanted == "cached"):
        raise InvalidParameterError('profiles must be True, False, None or "cached"')
    if wanted is False:
        return None
    if wanted is None and graph.sha256 != DEFAULT_GRAPH_SHA256:
        return None
    table = cached_profiles(graph)
    if table is not None or wanted == "cached":
        return table
    if wanted is None and sources < BUILD_MIN_SOURCES:
        return None
    try:
        return profiles_for(graph, loc_mass, workers=workers, progress=progress)
    except ValueError as exc:  # a build that is not the pinned table: not used
        warnings.warn(
            f"the ball-mass profiles were not used ({exc}); releases are slower, not different",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
