"""Upper bounds on every location's ball masses far past the profile table, from clusters.

Why: the profile table (engine/profiles.py) knows C_0 .. C_D exactly (D = 44), but at small ε
the mass beyond D hops is still a large enough share of Z that the core's bound (every
unexplored node D + 1 hops away) leaves many records at ε = 0.5 undecided, and each of those
explores tens of thousands of locations.  A row Q with Q[j] >= pi(B_j(x)) for every j bounds
that far mass much more tightly (engine/bounds.py, ``z_high_by_row``); this module gives every location
such a row at a small one-off cost.

The bound (docs/performance.md, "Far-mass rows from clusters"): the locations are cut into
compact clusters K (at most ``SIZE`` locations each, every one within ``HOPS`` hops of the
cluster's first; about 34,000 on the national graph), and for each cluster the mass of the
locations within j hops of *some* location of K is computed exactly, for j = 0 .. ``DEPTH``. For
a node x at a location of K, every location within j hops of x is within j hops of K, so

    pi(B_j(x)) <= pi(B_j(K))   for every j >= 0

(for j = 0, x alone weighs no more than its location, which is in K).  The row is
non-decreasing and at most the total prior; past ``DEPTH`` it is the total prior, which is
also an upper bound.  Those are exactly the preconditions ``bounds.z_high_by_row`` checks before using a
row, so a row only ever tightens a valid bound; it never decides an output.

Integrity: like the profile table, the rows and the cluster of every location are cached as
``.npy`` files with a JSON header, checked by content hash on every load, and for the embedded
graph the hash is pinned here (``PINNED_SHA256``); a stale, corrupt or edited file is refused
and rebuilt, and a build that differs is not used. A wrong row would make an upper bound too
small, so a load of rows without a pin (a custom graph's) also checks that they are consistent
with the graph's clusters (``_check_consistent``), and the engine checks the balls it explores
against the row before drawing (``BoundSources.check_explored``; a partial guard: it sees only
the shells it explores).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import CacheWarning, warn_at_caller
from ..graph.graph import Graph
from ..graph.pinned import DEFAULT_GRAPH_SHA256
from .ball_sweeps import Sweeps, mass_dtype, sweep_table, table_sha256
from .table_cache import cache_files, load_cached_array, read_cached_header

__all__ = ["ClusterBalls", "build_cluster_balls", "cached_cluster_balls", "cluster_balls_for"]

# docs/performance.md, "Far-mass rows from clusters": what smaller clusters and deeper rows buy
SIZE = 64  # locations per cluster at most (smaller: tighter rows, a longer build)
HOPS = 6  # a cluster's locations are within this many hops of its first
DEPTH = 80  # hops of each cluster's row; past it the row is the total prior
FORMAT = "postcode-privacy-cluster-balls/1"
# The content hash of the embedded graph's rows and clusters (pinned like the graph itself).
# The clusters are grown along ball_sweeps._map_order by ball_sweeps._groups: changing either
# changes the clusters, hence these bytes, and a national build would then be refused.
PINNED_SHA256 = {
    (DEFAULT_GRAPH_SHA256, 64, 6, 80): (
        "b19b48820e128b1daf782beea1dffdf5bc25708896c27acc77bc5f5dda40b001"
    ),
}


class ClusterBalls:
    """``balls[c, j]`` = pi(B_j(K_c)) for j = 0 .. ``depth``, and the cluster of every location."""

    def __init__(self, balls: np.ndarray, cluster_of: np.ndarray, graph: Graph):
        self.balls = np.asarray(balls)
        self.cluster_of = np.asarray(cluster_of)
        self.depth = self.balls.shape[1] - 1
        self.total_prior = int(graph.total_prior)
        self.graph_sha256 = graph.sha256

    def upper_row(self, location: int, radius: int) -> np.ndarray:
        """Q[j] >= pi(B_j(x)) for j = 0 .. radius - 1, for any node x at ``location``:
        non-decreasing and at most the total prior (the module docstring says why)."""
        row = np.full(radius, self.total_prior, dtype=np.int64)
        known = min(radius, self.depth + 1)
        row[:known] = self.balls[int(self.cluster_of[location]), :known]
        return row


def build_cluster_balls(
    graph: Graph,
    loc_mass: np.ndarray,
    *,
    path: Path | None = None,
    progress: bool = False,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """(balls, cluster_of): the rows of every cluster, in memory or, with ``path``, written to
    that ``.npy`` file by ``workers`` forked processes and memory-mapped; and the cluster of
    every location (int32, in memory)."""
    net = Sweeps(graph, loc_mass, cluster_size=SIZE, cluster_hops=HOPS)
    stage = "far-mass rows (built once per graph, clusters of locations)" if progress else None
    clusters = np.arange(net.n_sources, dtype=np.int64)  # rows in cluster order
    balls = sweep_table(
        net, DEPTH, mass_dtype(graph.total_prior), clusters, path=path, stage=stage,
        workers=workers,
    )  # fmt: skip
    return balls, net.source_of_location().astype(np.int32)


def _header(graph: Graph, clusters: int, sha256: str) -> dict:
    return {
        "format": FORMAT,
        "graph_sha256": graph.sha256,
        "size": SIZE,
        "hops": HOPS,
        "depth": DEPTH,
        "locations": graph.n_locations,
        "clusters": clusters,
        "total_prior": graph.total_prior,
        "dtype": mass_dtype(graph.total_prior).str,
        "sha256": sha256,
    }


def _paths(graph: Graph) -> tuple[Path, Path, Path]:
    """The rows, the cluster of every location and the header, in the graph's cache directory."""
    from ..graph.national import cache_dir  # the directory the default graph is cached in

    stem = f"clusters-{graph.sha256[:32]}-s{SIZE}-h{HOPS}-d{DEPTH}"
    folder = cache_dir()
    return folder / f"{stem}.npy", folder / f"{stem}-of.npy", folder / f"{stem}.json"


def _remove_other_parameters(graph: Graph) -> None:
    """Delete this graph's cached rows of other parameters (left by an earlier version), best
    effort; never another build's partial files, never another graph's."""
    paths = _paths(graph)
    current = {path.name for path in paths}
    for path in paths[0].parent.glob(f"clusters-{graph.sha256[:32]}-*"):
        if ".partial-" in path.name or path.name in current:
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError:  # the new rows are cached and used regardless
            pass


def _check_pinned(graph: Graph, content: str) -> None:
    """ValueError if this graph's rows are pinned and ``content`` differs."""
    pinned = PINNED_SHA256.get((graph.sha256, SIZE, HOPS, DEPTH))
    if pinned is not None and content != pinned:
        raise ValueError("the far-mass rows are not the pinned ones of the embedded graph")


def load_cluster_balls(graph: Graph) -> ClusterBalls:
    """The cached rows of ``graph``, memory-mapped; ValueError unless every byte checks out
    (format, graph, parameters, shapes, types and the content hash of both arrays; then the
    pinned hash, or, for a graph without a pin, ``_check_consistent``)."""
    balls_path, of_path, header_path = _paths(graph)
    header = read_cached_header(header_path)
    balls = load_cached_array(balls_path)
    cluster_of = load_cached_array(of_path, mapped=False)
    if not isinstance(header, dict):
        raise ValueError("the far-mass rows' header is not a JSON object")
    if balls.ndim != 2:
        raise ValueError("the far-mass rows have the wrong shape")
    expected = _header(graph, balls.shape[0], header.get("sha256", ""))
    if header != expected:
        raise ValueError("the far-mass rows were built for another graph or other parameters")
    if (
        balls.shape[1] != DEPTH + 1
        or balls.dtype.str != expected["dtype"]
        or cluster_of.shape != (graph.n_locations,)
        or cluster_of.dtype != np.int32
    ):
        raise ValueError("the far-mass rows have the wrong shape")
    content = table_sha256(cluster_of, balls)
    if content != header["sha256"]:
        raise ValueError("the far-mass rows failed their content hash")
    if PINNED_SHA256.get((graph.sha256, SIZE, HOPS, DEPTH)) is None:
        _check_consistent(graph, balls, cluster_of)  # no pin to prove them exact
    else:
        _check_pinned(graph, content)
    return ClusterBalls(balls, cluster_of, graph)


def _check_consistent(graph: Graph, balls: np.ndarray, cluster_of: np.ndarray) -> None:
    """ValueError unless the rows can be rows of this graph's clusters: every location in a
    cluster, each row starting at its cluster's mass, non-decreasing, at most the total prior.
    (A cheap guard for custom graphs, whose rows have only their own header hash; it cannot
    prove the rows exact: that is what the pin does for the embedded graph.)"""
    clusters = balls.shape[0]
    if cluster_of.size and (cluster_of.min() < 0 or cluster_of.max() >= clusters):
        raise ValueError("the far-mass rows name clusters that do not exist")
    from .landmarks import graph_tables

    own = np.zeros(clusters, dtype=np.int64)
    np.add.at(own, cluster_of, graph_tables(graph).loc_mass)
    rows = np.asarray(balls, dtype=np.int64)
    if (
        not np.array_equal(rows[:, 0], own)
        or np.any(np.diff(rows, axis=1) < 0)
        or (rows.size and rows.max() > graph.total_prior)
    ):
        raise ValueError("the far-mass rows are not rows of this graph's clusters")


def cached_cluster_balls(graph: Graph) -> ClusterBalls | None:
    """The cached rows of ``graph`` if a valid file exists, else None (a refused file is
    reported and will be rebuilt); never builds."""
    if not all(path.exists() for path in _paths(graph)):
        return None
    try:
        return load_cluster_balls(graph)
    except (OSError, ValueError, KeyError) as exc:
        warn_at_caller(
            f"the cached far-mass rows were refused ({exc}); they are not used, and the next "
            "release allowed to build them rebuilds them",
            CacheWarning,
        )
        return None


def cluster_balls_for(
    graph: Graph,
    loc_mass: np.ndarray,
    *,
    cache: bool,
    workers: int = 1,
    progress: bool = True,
    look: bool = True,
) -> ClusterBalls:
    """The rows of ``graph``: with ``cache``, from the cache if valid (``look`` False: the
    caller has just looked there and found none, so they are not looked up, hashed and
    reported a second time), else built by ``workers`` processes and written there (each file
    replaced atomically, after the pinned hash is checked: a build that differs is neither
    cached nor used, ValueError); without, built in this process (``workers`` unused) and
    checked against the pin the same way."""
    if not cache:
        balls, cluster_of = build_cluster_balls(graph, loc_mass, progress=progress)
        _check_pinned(graph, table_sha256(cluster_of, balls))  # pinned: used only if equal
        return ClusterBalls(balls, cluster_of, graph)
    cached = cached_cluster_balls(graph) if look else None
    if cached is not None:
        return cached
    balls_path, of_path, header_path = _paths(graph)
    with cache_files([balls_path, of_path, header_path]) as partials:
        balls, cluster_of = build_cluster_balls(
            graph, loc_mass, path=partials[0], progress=progress, workers=workers
        )
        sha256 = table_sha256(cluster_of, balls)
        _check_pinned(graph, sha256)  # a wrong build is neither cached nor used
        np.save(partials[1], cluster_of, allow_pickle=False)
        header = _header(graph, balls.shape[0], sha256)
        partials[2].write_text(json.dumps(header, indent=1), encoding="utf-8")
    _remove_other_parameters(graph)
    # The rows mapped from the file as built and hashed, never the name opened again.
    return ClusterBalls(balls, cluster_of, graph)
