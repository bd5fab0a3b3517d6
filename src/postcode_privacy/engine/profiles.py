"""Ball-mass profiles of cluster centres: a tight upper bound on Z from a small precomputed table.

The exact decision needs bounds z_low <= Z <= z_high; the unexplored part of Z is bounded by
how much prior mass can lie within j hops of the true postcode x, for every j beyond the depth
explored (engine/fast.py, ``_z_high``).  This module gives such a bound, Q[j] >= pi(B_j(x)),
that is close to the true ball mass, from a table computed once per graph:

* The locations are covered by clusters: every location lies within ``cover`` hops of its
  cluster's centre c (chosen greedily in location order; any choice is valid).
* For every centre the cumulative prior mass within k hops, k = 0 .. ``depth``, is computed
  once (bit-parallel breadth-first sweeps of 64 centres, ``engine/sweep.py``).
* If x's location is d <= cover hops from its centre c, every node within j hops of x lies
  within j + d hops of c (triangle inequality), so
  Q[j] = profile[c, j + d] (or the total prior Pi once j + d > depth) bounds pi(B_j(x)),
  and Q is non-decreasing in j.
* Conversely every node within j - d hops of c is within j hops of x, so
  L[j] = profile[c, min(j - d, depth)] (0 for j < d, and for j = 0) is a lower bound
  L[j] <= pi(B_j(x)), which raises the lower bound on Z (the far mass is at least that).

Nothing here decides an output: Q only tightens the bracket on Z that the exact comparisons of
the core's ``decide_below`` use, and it is checked like every other bound (non-negative
coefficients, Q[h + 1] at least the explored mass) before it is used.  A wrong table would
make the engine's outputs differ from the reference, which the equivalence tests would show;
so the table is also verified by content hash whenever it is loaded from disk (``load`` /
``profiles_for``), and a stale or corrupt file is refused and rebuilt, never trusted.

Cost on the national graph: see docs/performance.md ("Ball-mass profiles").
"""

from __future__ import annotations

import hashlib
import json
import threading
import warnings
import weakref
from pathlib import Path

import numpy as np
from numba import njit

from ..atomic import atomic_output
from ..graph.graph import Graph
from .sweep import LocationSearch

__all__ = ["BallProfiles", "build_profiles", "profiles_for", "COVER", "DEPTH", "FORMAT"]

COVER = 8  # hops from a location to its cluster centre, at most
DEPTH = 40  # hops of each centre's profile; beyond it the bound is the total prior
FORMAT = "postcode-privacy-ball-profiles/1"
CACHE_MIN_LOCATIONS = 100_000  # smaller graphs build in memory in well under a second
_CHUNK = 64  # centres per bit-parallel sweep


@njit(cache=True)
def _cover(indptr, indices, cover, dist, queue, stamp):
    """Greedy cover: a location becomes a centre if no centre so far is within ``cover`` hops.

    ``dist`` (int32, all > cover on entry) ends as each location's hop distance to the nearest
    chosen centre, capped at cover + 1.  Returns the centre locations in the order chosen.
    """
    n = indptr.size - 1
    centres = np.empty(n, dtype=np.int64)
    n_centres = 0
    epoch = 0
    for s in range(n):
        if dist[s] <= cover:
            continue
        centres[n_centres] = s
        n_centres += 1
        epoch += 1
        stamp[s] = epoch
        dist[s] = 0
        queue[0] = s
        head, tail, level_end, level = 0, 1, 1, 0
        while head < tail and level < cover:
            v = queue[head]
            head += 1
            for e in range(indptr[v], indptr[v + 1]):
                w = indices[e]
                if stamp[w] != epoch:
                    stamp[w] = epoch
                    if dist[w] > level + 1:
                        dist[w] = level + 1
                    queue[tail] = w
                    tail += 1
            if head == level_end:
                level += 1
                level_end = tail
    return centres[:n_centres]


@njit(cache=True)
def _assign(indptr, indices, centres, centre_of, offset, queue):
    """Multi-source breadth-first search from all centres: each location's nearest centre
    (index into ``centres``; ties go to the centre reached first) and its distance."""
    centre_of[:] = -1
    tail = 0
    for i in range(centres.size):
        c = centres[i]
        centre_of[c] = i
        offset[c] = 0
        queue[tail] = c
        tail += 1
    head = 0
    while head < tail:
        v = queue[head]
        head += 1
        for e in range(indptr[v], indptr[v + 1]):
            w = indices[e]
            if centre_of[w] < 0:
                centre_of[w] = centre_of[v]
                offset[w] = offset[v] + 1
                queue[tail] = w
                tail += 1


@njit(cache=True)
def _rows(cumulative, centre, offset, radius, total, high, low):
    """high[j] = cumulative[centre, j + offset] (total beyond the depth): >= pi(B_j(x));
    low[j] = cumulative[centre, min(j - offset, depth)] (0 for j < offset or j = 0): <= it."""
    depth = cumulative.shape[1] - 1
    for j in range(radius):
        k = j + offset
        high[j] = cumulative[centre, k] if k <= depth else total
        k = j - offset
        low[j] = cumulative[centre, min(k, depth)] if k >= 0 and j > 0 else 0


class BallProfiles:
    """Cluster centres, each location's centre and offset, and the centres' cumulative profiles.

    ``cumulative[i, k]`` is the prior mass of the locations within k hops of centre i (exact
    int64), for k = 0 .. depth.  ``centre_of[loc]`` is the centre index of a location and
    ``offset[loc]`` its hop distance to that centre (-1 / unreachable locations do not occur:
    every location is its own component's centre or covered).
    """

    def __init__(
        self,
        cover: int,
        depth: int,
        centre_of: np.ndarray,
        offset: np.ndarray,
        cumulative: np.ndarray,
        total: int,
    ):
        self.cover, self.depth = int(cover), int(depth)
        self.centre_of = centre_of
        self.offset = offset
        self.cumulative = cumulative
        self.total = int(total)

    @property
    def nbytes(self) -> int:
        return self.centre_of.nbytes + self.offset.nbytes + self.cumulative.nbytes

    def rows(self, location: int, radius: int) -> tuple[np.ndarray, np.ndarray]:
        """(Q, L) with L[j] <= pi(B_j(x)) <= Q[j] for j = 0 .. radius - 1 and any node x at
        ``location``; both non-decreasing."""
        high = np.empty(int(radius), dtype=np.int64)
        low = np.empty(int(radius), dtype=np.int64)
        _rows(
            self.cumulative,
            int(self.centre_of[location]),
            int(self.offset[location]),
            int(radius),
            self.total,
            high,
            low,
        )
        return high, low

    def row(self, location: int, radius: int) -> np.ndarray:
        """Q[j] >= pi(B_j(x)) for j = 0 .. radius - 1, for any node x at ``location``."""
        return self.rows(location, radius)[0]

    def content_sha256(self, graph_sha256: str) -> str:
        """Hash binding the table to its graph and parameters (checked on every load)."""
        digest = hashlib.sha256()
        digest.update(json.dumps(self._header(graph_sha256), sort_keys=True).encode())
        for array in (self.centre_of, self.offset, self.cumulative):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()

    def _header(self, graph_sha256: str) -> dict:
        return {
            "format": FORMAT,
            "graph_sha256": graph_sha256,
            "cover": self.cover,
            "depth": self.depth,
            "total": self.total,
            "shapes": [
                list(self.centre_of.shape),
                list(self.offset.shape),
                list(self.cumulative.shape),
            ],
        }

    def save(self, path: Path, graph_sha256: str) -> None:
        """Write the table atomically with its content hash (``.npz``, no pickles)."""
        header = self._header(graph_sha256)
        header["sha256"] = self.content_sha256(graph_sha256)
        with atomic_output(path) as handle:
            np.savez(
                handle,
                header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                centre_of=self.centre_of,
                offset=self.offset,
                cumulative=self.cumulative,
            )

    @classmethod
    def load(cls, path: Path, graph: Graph, cover: int, depth: int) -> BallProfiles:
        """Read a saved table for ``graph``; ValueError unless every byte checks out."""
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(bytes(data["header"]).decode())
            arrays = (data["centre_of"], data["offset"], data["cumulative"])
        if (
            header.get("format") != FORMAT
            or header.get("graph_sha256") != graph.sha256
            or header.get("cover") != cover
            or header.get("depth") != depth
            or header.get("total") != graph.total_prior
        ):
            raise ValueError("ball profiles were built for another graph or other parameters")
        centre_of, offset, cumulative = arrays
        if (
            centre_of.dtype != np.int32
            or offset.dtype != np.int16
            or cumulative.dtype != np.int64
            or centre_of.shape != (graph.n_locations,)
            or offset.shape != (graph.n_locations,)
            or cumulative.ndim != 2
            or cumulative.shape[1] != depth + 1
        ):
            raise ValueError("ball profiles have the wrong shape")
        table = cls(cover, depth, centre_of, offset, cumulative, graph.total_prior)
        if table.content_sha256(graph.sha256) != header.get("sha256"):
            raise ValueError("ball profiles failed their content hash")
        return table


def build_profiles(
    graph: Graph,
    loc_mass: np.ndarray,
    cover: int = COVER,
    depth: int = DEPTH,
    progress: bool = False,
) -> BallProfiles:
    """Compute the table for ``graph`` (see the module docstring)."""
    indptr = np.ascontiguousarray(graph.loc_indptr, dtype=np.int64)
    indices = np.ascontiguousarray(graph.loc_indices, dtype=np.int32)
    n = graph.n_locations
    dist = np.full(n, cover + 1, dtype=np.int32)
    queue = np.empty(n, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    centres = _cover(indptr, indices, int(cover), dist, queue, stamp)
    centre_of = np.empty(n, dtype=np.int32)
    offset = np.empty(n, dtype=np.int16)
    _assign(indptr, indices, centres, centre_of, offset, queue)
    cumulative = np.empty((centres.size, depth + 1), dtype=np.int64)
    search = LocationSearch(graph)
    steps = range(0, centres.size, _CHUNK)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc="ball profiles (once per graph)", unit="sweep", leave=False)
    for start in steps:
        shells = search.shell_masses_many(centres[start : start + _CHUNK], depth, loc_mass)
        np.cumsum(shells, axis=1, out=cumulative[start : start + _CHUNK])
    return BallProfiles(cover, depth, centre_of, offset, cumulative, graph.total_prior)


def _cache_path(graph: Graph, cover: int, depth: int) -> Path:
    from ..graph.national import cache_dir  # the directory the default graph is cached in

    return cache_dir() / f"profiles-{graph.sha256[:32]}-c{cover}-d{depth}.npz"


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def profiles_for(graph: Graph, loc_mass: np.ndarray, progress: bool = False) -> BallProfiles:
    """The profiles of ``graph``, once per process: from the on-disk cache for large graphs
    (verified by content hash; refused and rebuilt if stale or corrupt), else built here."""
    with _LOCK:
        table = _TABLES.get(graph)
        if table is not None:
            return table
        cached = graph.n_locations >= CACHE_MIN_LOCATIONS
        path = _cache_path(graph, COVER, DEPTH) if cached else None
        if path is not None and path.exists():
            try:
                table = BallProfiles.load(path, graph, COVER, DEPTH)
            except (OSError, ValueError, KeyError) as exc:
                warnings.warn(
                    f"the cached ball profiles were refused ({exc}); rebuilding them",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if table is None:
            table = build_profiles(graph, loc_mass, COVER, DEPTH, progress=progress and cached)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    table.save(path, graph.sha256)
                except OSError as exc:
                    warnings.warn(
                        f"could not cache the ball profiles ({exc.strerror or exc})",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        _TABLES[graph] = table
        return table
