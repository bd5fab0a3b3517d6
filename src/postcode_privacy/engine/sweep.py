"""Bounded breadth-first searches over locations, one source or 64 at a time (numba).

Used by the evaluation (the engine's profile table and far-mass rows have their own
bit-parallel sweeps, in ``engine/ball_sweeps.py``).  The evaluation needs many bounded
searches: the ball of R - 1 hops around every sampled postcode, and one around every
candidate the Bayesian adversary weighs.  The reference search in
``graph/shells.py`` allocates per call; this one keeps two workspaces per graph and resets only
the entries it touched, so a search costs time proportional to the ball, not to the graph.

Contract (checked against ``graph.shells.location_shells`` in tests/test_evaluate_exact.py):
``ball(source, max_hops)`` returns every location whose hop distance from ``source`` is at most
``max_hops``, with that distance, in breadth-first order.  Nothing here touches the mechanism's
outputs: the evaluation uses it to measure them, and the engine only to choose how far to
explore.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._numba import njit


@njit(cache=True)
def _bfs(indptr, indices, source, max_hops, hops, order):  # pragma: no cover - compiled
    """Fill ``order[:count]`` with the locations within ``max_hops`` of ``source`` (BFS order)
    and ``hops`` with their distances; entries of ``hops`` not reached stay -1.  Returns count."""
    hops[source] = 0
    order[0] = source
    head = 0
    tail = 1
    while head < tail:
        v = order[head]
        head += 1
        d = hops[v]
        if d >= max_hops:
            continue
        for k in range(indptr[v], indptr[v + 1]):
            w = indices[k]
            if hops[w] < 0:
                hops[w] = d + 1
                order[tail] = w
                tail += 1
    return tail


@njit(cache=True)
def _bfs_masses(indptr, indices, loc_mass, source, max_hops, hops, order, out):  # pragma: no cover
    """Prior mass of the locations at each hop distance 0 .. max_hops, into ``out`` (int64).
    Leaves ``hops`` all -1 again."""
    count = _bfs(indptr, indices, source, max_hops, hops, order)
    for i in range(count):
        v = order[i]
        out[hops[v]] += loc_mass[v]
        hops[v] = -1
    return count


@njit(cache=True)
def _multi_bfs_masses(
    indptr,
    indices,
    loc_mass,
    sources,
    max_hops,
    seen,
    frontier,
    nxt,
    queued,
    active,
    fresh,
    touched,
    out,
):  # pragma: no cover - compiled
    """Shell masses for up to 64 * W sources at once (multi-source BFS, one bit per source).

    ``seen``, ``frontier`` and ``nxt`` are (locations, W) uint64 arrays and ``queued`` a uint8
    array, all zero on entry and on exit.  ``out[b, h]`` receives the mass of the locations
    exactly ``h`` hops from ``sources[b]``.  Sources near one another share most of their balls,
    so one sweep costs far less than one search per source.
    """
    words = seen.shape[1]
    one = np.uint64(1)
    tally = np.zeros((words * 8, 256), dtype=np.int64)
    n_active = 0
    n_touched = 0
    for b in range(sources.size):
        s = sources[b]
        j = b // 64
        bit = one << np.uint64(b % 64)
        empty = True
        for k in range(words):
            if seen[s, k] != 0:
                empty = False
        if empty:
            touched[n_touched] = s
            n_touched += 1
        if queued[s] == 0:
            queued[s] = 1
            active[n_active] = s
            n_active += 1
        seen[s, j] |= bit
        frontier[s, j] |= bit
        out[b, 0] += loc_mass[s]
    for i in range(n_active):
        queued[active[i]] = 0
    for level in range(1, max_hops + 1):
        n_fresh = 0
        for i in range(n_active):
            v = active[i]
            for k in range(indptr[v], indptr[v + 1]):
                w = indices[k]
                hit = False
                for j in range(words):
                    f = frontier[v, j]
                    if f != 0:
                        new = f & ~seen[w, j]
                        if new != 0:
                            nxt[w, j] |= new
                            hit = True
                if hit and queued[w] == 0:
                    queued[w] = 1
                    fresh[n_fresh] = w
                    n_fresh += 1
        for i in range(n_active):
            for j in range(words):
                frontier[active[i], j] = 0
        for i in range(n_fresh):
            w = fresh[i]
            queued[w] = 0
            empty = True
            for j in range(words):
                if seen[w, j] != 0:
                    empty = False
            if empty:
                touched[n_touched] = w
                n_touched += 1
            m = loc_mass[w]
            for j in range(words):
                new = nxt[w, j]
                if new != 0:
                    nxt[w, j] = 0
                    seen[w, j] |= new
                    frontier[w, j] = new
                    for byte in range(8):  # per-byte tallies, spread over bits below
                        value = (new >> np.uint64(8 * byte)) & np.uint64(255)
                        if value != 0:
                            tally[8 * j + byte, value] += m
            active[i] = w
        n_active = n_fresh
        for row in range(words * 8):
            for value in range(1, 256):
                t = tally[row, value]
                if t != 0:
                    tally[row, value] = 0
                    for k in range(8):
                        if (value >> k) & 1:
                            b = 8 * row + k
                            if b < sources.size:
                                out[b, level] += t
        if n_active == 0:
            break
    for i in range(n_active):
        for j in range(words):
            frontier[active[i], j] = 0
    for i in range(n_touched):
        for j in range(words):
            seen[touched[i], j] = 0


WORDS = 1  # sources per sweep: 64 * WORDS (wider sweeps measured no faster)


class _SweepWorkspace(NamedTuple):
    """The scratch arrays of ``_multi_bfs_masses``, in its argument order (zero between sweeps)."""

    seen: np.ndarray  # (locations, words) uint64
    frontier: np.ndarray  # (locations, words) uint64
    nxt: np.ndarray  # (locations, words) uint64
    queued: np.ndarray  # (locations,) uint8
    active: np.ndarray  # (locations,) int64
    fresh: np.ndarray  # (locations,) int64
    touched: np.ndarray  # (locations,) int64

    @classmethod
    def allocate(cls, n: int, words: int) -> _SweepWorkspace:
        return cls(
            np.zeros((n, words), dtype=np.uint64),
            np.zeros((n, words), dtype=np.uint64),
            np.zeros((n, words), dtype=np.uint64),
            np.zeros(n, dtype=np.uint8),
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int64),
            np.empty(n, dtype=np.int64),
        )


class LocationSearch:
    """Bounded breadth-first searches over one graph's locations, reusing two workspaces.

    Not thread-safe: one instance per thread.
    """

    def __init__(self, graph):
        self._indptr = np.ascontiguousarray(graph.loc_indptr, dtype=np.int64)
        self._indices = np.ascontiguousarray(graph.loc_indices, dtype=np.int32)
        n = graph.n_locations
        self._hops = np.full(n, -1, dtype=np.int32)
        self._order = np.empty(n, dtype=np.int64)
        self._multi: _SweepWorkspace | None = None  # allocated by the first sweep

    def ball(self, source: int, max_hops: int) -> tuple[np.ndarray, np.ndarray]:
        """(locations, hop distances) of every location within ``max_hops`` of ``source``."""
        count = _bfs(
            self._indptr, self._indices, int(source), int(max_hops), self._hops, self._order
        )
        locs = self._order[:count].copy()
        hops = self._hops[locs].astype(np.int64)
        self._hops[locs] = -1
        return locs, hops

    def hops_to(self, source: int, max_hops: int, targets: np.ndarray, beyond: int) -> np.ndarray:
        """Hop distance from ``source`` to each target location, or ``beyond`` past ``max_hops``."""
        count = _bfs(
            self._indptr, self._indices, int(source), int(max_hops), self._hops, self._order
        )
        found = self._hops[targets].astype(np.int64)
        self._hops[self._order[:count]] = -1
        found[found < 0] = beyond
        return found

    def shell_masses(self, source: int, max_hops: int, loc_mass: np.ndarray) -> np.ndarray:
        """Total ``loc_mass`` of the locations at each hop distance 0 .. ``max_hops`` (int64)."""
        out = np.zeros(int(max_hops) + 1, dtype=np.int64)
        _bfs_masses(
            self._indptr,
            self._indices,
            loc_mass,
            int(source),
            int(max_hops),
            self._hops,
            self._order,
            out,
        )
        return out

    def shell_masses_many(self, sources, max_hops: int, loc_mass: np.ndarray) -> np.ndarray:
        """``shell_masses`` for many sources: row i is for ``sources[i]`` (int64).

        Sources are swept 64 * WORDS at a time; give nearby sources together for speed.
        """
        sources = np.asarray(sources, dtype=np.int64)
        out = np.zeros((sources.size, int(max_hops) + 1), dtype=np.int64)
        words = max(1, min(WORDS, -(-sources.size // 64)))
        workspace = self._multi
        if workspace is None or workspace.seen.shape[1] < words:
            workspace = self._multi = _SweepWorkspace.allocate(self._hops.size, words)
        width = 64 * workspace.seen.shape[1]
        for start in range(0, sources.size, width):
            _multi_bfs_masses(
                self._indptr,
                self._indices,
                loc_mass,
                sources[start : start + width],
                int(max_hops),
                *workspace,
                out[start : start + width],
            )
        return out
