"""Build a postcode graph from centroids: Delaunay neighbours, long edges cut, connectivity kept.

The construction (docs/graph.md):

1. Nodes are the postcodes sorted by their normalised form; that order is the node order.
2. Postcodes with identical (easting, northing) are one *location*; locations are numbered in
   order of their first member, as :class:`~postcode_privacy.graph.graph.Graph` requires.
3. The distinct locations are triangulated (Delaunay, Shewchuk's ``triangle`` with exact
   predicates).  One or two locations, or locations all on one line, have no triangles; their
   Delaunay graph is then the path through the points in (easting, northing) order.
4. Edges longer than ``max_edge_km`` are cut.  If that disconnects the graph, the shortest cut
   edges that join different components are put back (a minimum spanning forest over the
   components, Kruskal's order: length, then the two location numbers), so islands stay
   reachable through their nearest neighbour across the water.
5. The result must be connected, otherwise :class:`GraphError`.

Every decision that shapes the graph is exact, so that the same inputs give the same graph on
every platform (docs/graph.md, "The same graph everywhere"): lengths are compared as exact
squared distances in integers (whole-metre coordinates, the case of every UK source, in int64;
other coordinates through their exact binary fractions in Python integers), the cut compares
them with the exact square of ``max_edge_km`` in metres, and ties are broken by location
numbers.  Floating-point lengths appear only in the provenance summary, which is not hashed.

Everything the result depends on is the *set* of (postcode, easting, northing, prior) rows and
``max_edge_km``: the input order does not matter, and the same inputs give identical arrays
and the same ``sha256``.  Nothing here reads files or prints, except an optional tqdm bar.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from fractions import Fraction
from importlib import metadata

import numpy as np

from .._limits import DEFAULT_MAX_EDGE_KM
from ..errors import GraphError, InvalidParameterError, option_name
from ..sources._reading import BUILDING
from .graph import Graph, _label

__all__ = ["build_graph", "BUILDER", "BUILD_FORMAT"]

BUILDER = "delaunay-triangle"
BUILD_FORMAT = 1
_RESERVED = ("builder", "max_edge_km", "format")
_PERCENTILES = (50, 90, 99, 99.9)


def build_graph(
    postcodes: Sequence[str] | np.ndarray,
    easting: Sequence[float] | np.ndarray,
    northing: Sequence[float] | np.ndarray,
    prior: Sequence[int] | np.ndarray | None = None,
    max_edge_km: float = DEFAULT_MAX_EDGE_KM,
    params_extra: dict | None = None,
    provenance: dict | None = None,
    progress: bool = False,
) -> Graph:
    """The Delaunay postcode graph of the given centroids.

    Preconditions: ``postcodes``, ``easting``, ``northing`` (and ``prior`` if given) have one
    entry per postcode; coordinates are finite projected metres (OSGB36 eastings and
    northings); postcodes are unique once normalised; ``max_edge_km`` is a positive finite
    number.  ``prior`` defaults to 1 per postcode (uniform).

    Postcondition: a connected :class:`Graph` whose node order is the sorted normalised
    postcodes, whose ``params`` are ``{"builder", "max_edge_km", "format"}`` plus
    ``params_extra`` (all hashed), and whose ``provenance`` is ``provenance`` plus a
    ``"build"`` section of counts, edge-length percentiles and versions (not hashed; no wall
    time, so that two builds of the same inputs write the same bytes).
    The arrays and ``sha256`` depend only on the set of input rows and the parameters.
    """
    params = _params(max_edge_km, params_extra)
    max_edge_m = params["max_edge_km"] * 1000.0
    bar = _progress_bar(progress)

    try:
        labels, east, north, prior_arr = _sorted_inputs(postcodes, easting, northing, prior)
        _done(bar, "postcodes sorted")

        node_location, loc_xy = _group_locations(east, north)
        n_loc = loc_xy.shape[0]
        _done(bar, "postcodes grouped by location")

        lo, hi = _delaunay_edges(loc_xy)
        delaunay_edges = int(lo.size)
        _done(bar, "Delaunay triangulation")

        squared, scale = _squared_lengths(loc_xy, lo, hi)
        lo, hi, lengths, stats = _cut_and_restore(
            n_loc, lo, hi, squared, scale, _squared_limit(params["max_edge_km"], scale), max_edge_m
        )
        _done(bar, "long edges cut")

        indptr, indices = _symmetric_csr(n_loc, lo, hi)
        _done(bar, "adjacency built")

        build = {
            "nodes": len(labels),
            "locations": n_loc,
            "co_located_nodes": int(len(labels) - n_loc),
            "largest_location": int(np.bincount(node_location).max()),
            "delaunay_edges": delaunay_edges,
            "location_edges": int(lo.size),
            "node_edges": _node_edge_count(node_location, n_loc, lo, hi),
            **stats,
            "edge_length_m": _length_summary(lengths),
            "versions": _versions(),
        }
        prov = dict(provenance or {})
        prov["build"] = build
        graph = Graph(
            labels,
            node_location,
            indptr,
            indices,
            prior_arr,
            loc_xy,
            params=params,
            provenance=prov,
        )
        _done(bar, "graph assembled")
    finally:
        bar.close()
    return graph


# -- steps --------------------------------------------------------------------------------------


def _params(max_edge_km: float, params_extra: dict | None) -> dict:
    if isinstance(max_edge_km, bool) or not isinstance(
        max_edge_km, (int, float, np.integer, np.floating)
    ):
        raise InvalidParameterError(f"{option_name('max_edge_km')} must be a number")
    max_edge_km = float(max_edge_km)
    # In metres too: 1e306 km is a finite float, but not in metres (the provenance records it).
    if not math.isfinite(max_edge_km * 1000) or max_edge_km <= 0:
        raise InvalidParameterError(
            f"{option_name('max_edge_km')} must be a positive finite number of kilometres"
        )
    params = {"builder": BUILDER, "max_edge_km": max_edge_km, "format": BUILD_FORMAT}
    for key, value in (params_extra or {}).items():
        if key in _RESERVED:
            raise InvalidParameterError(f"params_extra may not set the reserved key {key!r}")
        params[key] = value
    return params


def _sorted_inputs(postcodes, easting, northing, prior):
    """Normalise labels and put every per-postcode input in normalised-postcode order."""
    labels = [_label(p) for p in postcodes]
    n = len(labels)
    if n == 0:
        raise GraphError("a graph needs at least one postcode")
    east = np.asarray(easting, dtype=np.float64)
    north = np.asarray(northing, dtype=np.float64)
    if east.shape != (n,) or north.shape != (n,):
        raise GraphError(f"{n} postcodes but {east.size} eastings and {north.size} northings")
    if not (np.all(np.isfinite(east)) and np.all(np.isfinite(north))):
        raise GraphError("every easting and northing must be a finite number")
    # numpy's string sort is by code point, the same order as Python's str comparison.
    label_arr = np.array(labels, dtype=str)
    order = np.argsort(label_arr, kind="stable")
    label_arr = label_arr[order]
    if n > 1 and np.any(label_arr[1:] == label_arr[:-1]):
        dupes = int(np.count_nonzero(label_arr[1:] == label_arr[:-1]))
        raise GraphError(f"postcodes must be unique after normalisation ({dupes} repeated)")
    labels = [labels[i] for i in order.tolist()]
    if prior is not None:
        prior_arr = np.asarray(prior)
        if prior_arr.shape != (n,):
            raise InvalidParameterError(f"prior has {prior_arr.size} values for {n} postcodes")
        prior_arr = prior_arr[order]
    else:
        prior_arr = None
    # +0.0 turns a negative zero into zero, so that -0.0 and 0.0 are one location.
    return labels, east[order] + 0.0, north[order] + 0.0, prior_arr


def _group_locations(east: np.ndarray, north: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Location of each node and (easting, northing) of each location, first-member order."""
    n = east.size
    order = np.lexsort((north, east))  # stable: within a group, nodes stay in node order
    es, ns = east[order], north[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (es[1:] != es[:-1]) | (ns[1:] != ns[:-1])
    group_sorted = np.cumsum(starts) - 1  # group of each position in coordinate order
    first_member = order[starts]  # smallest node index of each group (stable sort)
    rank = np.empty(first_member.size, dtype=np.int64)
    rank[np.argsort(first_member, kind="stable")] = np.arange(first_member.size)
    node_location = np.empty(n, dtype=np.int32)
    node_location[order] = rank[group_sorted]
    loc_xy = np.empty((first_member.size, 2), dtype=np.float64)
    loc_xy[rank, 0] = es[starts]
    loc_xy[rank, 1] = ns[starts]
    return node_location, loc_xy


def _delaunay_edges(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Undirected Delaunay edges (lo < hi, each once) of distinct points.

    Fewer than three points, or all points on one line, have no triangulation; their Delaunay
    graph is the path through the points sorted by (x, y), which is what is returned then.
    """
    m = points.shape[0]
    edges = None
    if m >= 3:
        import triangle

        # Q: quiet; e: list each edge once.  Divide and conquer with exact predicates.
        result = triangle.triangulate({"vertices": points}, "Qe")
        if result.get("triangles") is not None and len(result["triangles"]):
            edges = np.asarray(result["edges"], dtype=np.int64).reshape(-1, 2)
    if edges is None:
        order = np.lexsort((points[:, 1], points[:, 0]))
        edges = np.column_stack([order[:-1], order[1:]]).astype(np.int64)
    lo = np.minimum(edges[:, 0], edges[:, 1])
    hi = np.maximum(edges[:, 0], edges[:, 1])
    return lo, hi


# Whole-metre coordinates below this bound in absolute value have squared distances that fit
# in int64 (each difference is below 2**30, each square below 2**60, their sum below 2**61).
_INT_COORD_BOUND = 2**29


def _squared_lengths(xy: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, int]:
    """Exact squared edge lengths, in units of ``(2**-scale m)**2``, and ``scale``.

    Postcondition: ``squared[i] * 4**-scale`` is exactly the squared Euclidean distance between
    the two (float64) coordinate pairs of edge ``i``; ``squared`` is int64 for whole-metre
    coordinates (scale 0, the fast path), otherwise an object array of Python integers.
    """
    if xy.size == 0 or (np.all(xy == np.floor(xy)) and np.abs(xy).max() < _INT_COORD_BOUND):
        ints = xy.astype(np.int64)
        d = ints[hi] - ints[lo]
        return d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1], 0
    # Fractional coordinates: each float64 is an exact binary fraction; put them all over the
    # largest power-of-two denominator and work in Python integers (slower, still exact).
    fractions = [Fraction(float(v)) for v in xy.ravel().tolist()]
    scale = max(f.denominator for f in fractions).bit_length() - 1
    ints = np.array(
        [f.numerator * ((1 << scale) // f.denominator) for f in fractions], dtype=object
    ).reshape(xy.shape)
    d = ints[hi] - ints[lo]
    return d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1], scale


def _squared_limit(max_edge_km: float, scale: int) -> int:
    """The largest integer squared length (units of :func:`_squared_lengths`) that is kept.

    ``max_edge_km`` is taken as the decimal it prints as (``repr``, the same on every platform),
    so ``0.3`` means exactly 300 m, not the binary float just below it.  An edge is kept when
    its exact length is at most that many km, that is when its exact squared length is at most
    ``(1000 * max_edge_km)**2``; squared lengths are integers, so this is the floor of that
    square.
    """
    limit = (Fraction(repr(float(max_edge_km))) * 1000 * (1 << scale)) ** 2
    return limit.numerator // limit.denominator


def _cut_and_restore(n_loc, lo, hi, squared, scale, squared_limit, max_edge_m):
    """Drop edges longer than the limit; put back the shortest that reconnect the graph.

    ``squared`` are exact squared lengths in units of ``(2**-scale m)**2`` and
    ``squared_limit`` the largest kept one (see :func:`_squared_lengths`).  The edges put back
    form a minimum spanning forest of the component graph under the exact order (squared
    length, lo, hi), found with Kruskal's algorithm, so ties are broken by location number and
    the choice is deterministic and the same on every platform.  Raises GraphError if the graph is still disconnected.
    ``max_edge_m`` and the float lengths only feed the (unhashed) statistics.
    """
    if squared.dtype != object:
        # Exact int64 squares are below 2**61; a larger limit keeps everything.
        keep = squared <= min(squared_limit, 2**62)
        lengths = np.sqrt(squared.astype(np.float64))
    else:
        keep = np.array([v <= squared_limit for v in squared.tolist()], dtype=bool)
        lengths = np.sqrt(
            np.array([float(Fraction(v, 4**scale)) for v in squared.tolist()], dtype=np.float64)
        )
    cut = ~keep
    n_cut = int(np.count_nonzero(cut))
    n_comp, comp = _components(n_loc, lo[keep], hi[keep])
    restored = np.zeros(0, dtype=np.int64)
    if n_comp > 1 and n_cut:
        cut_idx = np.flatnonzero(cut)
        ca, cb = comp[lo[cut_idx]], comp[hi[cut_idx]]
        between = ca != cb
        cut_idx, ca, cb = cut_idx[between], ca[between], cb[between]
        order = np.lexsort((hi[cut_idx], lo[cut_idx], _order_key(squared[cut_idx])))
        cut_idx, ca, cb = cut_idx[order], ca[order], cb[order]
        # Only the first (shortest) edge between each pair of components can be chosen.
        pair = np.minimum(ca, cb).astype(np.int64) * n_comp + np.maximum(ca, cb)
        first = np.zeros(pair.size, dtype=bool)
        if pair.size:
            by_pair = np.argsort(pair, kind="stable")
            p = pair[by_pair]
            head = np.ones(p.size, dtype=bool)
            head[1:] = p[1:] != p[:-1]
            first[by_pair[head]] = True
        cut_idx, ca, cb = cut_idx[first], ca[first], cb[first]
        restored = _kruskal(n_comp, cut_idx, ca, cb)
        keep[restored] = True
    # Each restored edge joins two different components of what is left after the cut, so
    # the result is connected exactly when n_comp - 1 of them were found.
    n_after = n_comp - restored.size
    if n_after != 1:
        raise GraphError(
            f"the graph has {n_after} connected components after restoring cut edges; "
            "a postcode graph must be connected"
        )
    restored_lengths = lengths[restored]
    stats = {
        "max_edge_m": max_edge_m,
        "cut_edges": n_cut,
        "components_after_cut": int(n_comp),
        "restored_edges": int(restored.size),
        "restored_edge_length_m": _length_summary(restored_lengths, percentiles=()),
    }
    return lo[keep], hi[keep], lengths[keep], stats


def _order_key(squared: np.ndarray) -> np.ndarray:
    """An int64 key that sorts exactly as ``squared`` (itself, or dense ranks of big integers)."""
    if squared.dtype != object:
        return squared
    distinct = sorted(set(squared.tolist()))
    rank = {v: i for i, v in enumerate(distinct)}
    return np.array([rank[v] for v in squared.tolist()], dtype=np.int64)


def _kruskal(n_comp: int, edge_idx, ca, cb) -> np.ndarray:
    """Edges (already in Kruskal order) joining components into one tree; union-find."""
    parent = list(range(n_comp))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    chosen = []
    needed = n_comp - 1
    for e, a, b in zip(edge_idx.tolist(), ca.tolist(), cb.tolist(), strict=True):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
            chosen.append(e)
            if len(chosen) == needed:
                break
    return np.array(chosen, dtype=np.int64)


def _components(n: int, a: np.ndarray, b: np.ndarray) -> tuple[int, np.ndarray]:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    adj = coo_matrix((np.ones(a.size, dtype=np.int8), (a, b)), shape=(n, n)).tocsr()
    count, labels = connected_components(adj, directed=False)
    return int(count), labels.astype(np.int64)


def _symmetric_csr(n: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted symmetric CSR of undirected edges lo < hi (no duplicates, no self loops)."""
    key = np.concatenate([lo * n + hi, hi * n + lo]).astype(np.int64)
    key.sort()
    if key.size > 1:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    src = key // n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, (key - src * n).astype(np.int32)


def _node_edge_count(node_location, n_loc, lo, hi) -> int:
    """Edges of the equivalent node graph: the clique at each location plus all cross pairs."""
    size = np.bincount(node_location, minlength=n_loc).astype(np.int64)
    return int(np.sum(size * (size - 1) // 2) + np.sum(size[lo] * size[hi]))


def _length_summary(lengths: np.ndarray, percentiles=_PERCENTILES) -> dict:
    if lengths.size == 0:
        return {"count": 0}
    out = {
        "count": int(lengths.size),
        "min": round(float(lengths.min()), 1),
        "mean": round(float(lengths.mean()), 1),
    }
    for p, v in zip(
        percentiles, np.percentile(lengths, percentiles) if percentiles else [], strict=True
    ):
        out[f"p{p:g}"] = round(float(v), 1)
    out["max"] = round(float(lengths.max()), 1)
    return out


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("postcode-privacy", "numpy", "scipy", "triangle"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


class _NoBar:
    def update(self, _n: int = 1) -> None:
        pass

    def set_postfix_str(self, _text: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(progress: bool):
    if not progress:
        return _NoBar()
    from .._progress import step_bar  # plain lines when stderr is not a terminal

    return step_bar(BUILDING, 6)


def _done(bar, what: str) -> None:
    """One build step done, named (on a terminal's bar and in the step lines of a log)."""
    bar.set_postfix_str(what, refresh=False)
    bar.update(1)
