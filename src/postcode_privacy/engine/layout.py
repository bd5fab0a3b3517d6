"""Where the shell search (and the shared sweeps beside it) keep the location graph: in the
graph's numbering, or along the map.

A breadth-first search spends most of its time waiting for memory, not computing: each
location it reaches costs a read of its adjacency and a read of each neighbour's visited mark,
scattered over tens of megabytes on the national graph.  Numbered along a Hilbert curve of the
map, the locations of a ball lie in few stretches of memory, and the search costs about a
fifth less per location (docs/performance.md, "Compiled shell search").

The numbering is private to the search and to the sweeps (engine/shared_shells.py), which
read the same layout.  It changes where a location is stored, never which locations a shell
holds: shells are sets, their masses exact sums, the within-shell pick goes by node index
(``search._select_by_prior``) and the tail by set membership, so no output depends on it
(tests compare the two layouts draw for draw).  Tables indexed by the graph's
own location numbers (the profile table, for the floor) are read through ``original``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.graph import Graph
from .ball_sweeps import _curve_positions, _renumbered

__all__ = ["SearchLayout", "graph_layout", "map_layout"]

_CURVE_SIDE = 1 << 16


@dataclass(frozen=True, eq=False)
class SearchLayout:
    """The location graph as the search reads it, with locations numbered 0 .. n - 1."""

    indptr: np.ndarray  # CSR offsets of the location adjacency (int32 where they fit)
    indices: np.ndarray  # int32 neighbours
    loc_mass: np.ndarray  # int64 prior mass of each location
    node_location: np.ndarray  # int32 location number of each node
    members_indptr: np.ndarray  # int64 CSR offsets of each location's nodes
    members_flat: np.ndarray  # int32 node indices (the graph's own: outputs are nodes)
    original: np.ndarray  # int64 the graph's location number of each location number
    max_degree: int  # the most neighbours of one location


def graph_layout(graph: Graph, loc_mass: np.ndarray) -> SearchLayout:
    """The graph's own numbering (copied only where ``_compact`` narrows an array)."""
    indptr = _compact(graph.loc_indptr)
    return SearchLayout(
        indptr=indptr,
        indices=graph.loc_indices,
        loc_mass=loc_mass,
        node_location=graph.node_location,
        members_indptr=graph.members_indptr,
        members_flat=graph.members_flat,
        original=np.arange(graph.n_locations, dtype=np.int64),
        max_degree=int(np.diff(indptr).max()) if indptr.size > 1 else 0,
    )


def map_layout(graph: Graph, loc_mass: np.ndarray) -> SearchLayout:
    """Locations numbered along a Hilbert curve of the map (the graph's own numbering for a
    graph without coordinates).  0.4 to 0.6 s and 96 MiB on the national graph.

    The curve runs over a grid scaled to the coordinates' range in floating point: that only
    decides where locations are stored, which changes no output (module docstring).
    """
    n = graph.n_locations
    coordinates = graph.location_coordinates
    if coordinates is None or n < 2 or not np.all(np.isfinite(coordinates)):
        return graph_layout(graph, loc_mass)
    cells = []
    for axis in (0, 1):
        x = np.asarray(coordinates[:, axis], dtype=np.float64)
        # Each coordinate's share of the axis' range, from halves, which cannot overflow for
        # any finite floats (a range of 1e308 either way, or a subnormal one, is a graph too).
        low, high = float(x.min()) / 2, float(x.max()) / 2
        share = (x / 2 - low) / (high - low) if high > low else np.zeros(n)
        cells.append(np.clip(share * _CURVE_SIDE, 0, _CURVE_SIDE - 1).astype(np.int64))
    original = np.argsort(_curve_positions(cells[0], cells[1], _CURVE_SIDE), kind="stable")
    number = np.empty(n, dtype=np.int64)
    number[original] = np.arange(n)
    indptr, indices = _renumbered(graph.loc_indptr, graph.loc_indices, original, number)
    members_indptr, members_flat = _renumbered(
        graph.members_indptr, graph.members_flat, original, np.arange(len(graph))
    )
    return SearchLayout(
        indptr=_compact(indptr),
        indices=indices,
        loc_mass=np.ascontiguousarray(loc_mass[original]),
        node_location=number[graph.node_location].astype(np.int32),
        members_indptr=members_indptr,
        members_flat=members_flat,
        original=original.astype(np.int64),
        max_degree=int(np.diff(indptr).max()),
    )


def _compact(offsets: np.ndarray) -> np.ndarray:
    """CSR offsets as int32 when they fit: half the memory the search reads for them, which
    made it about a sixth faster on the national graph (docs/performance.md)."""
    if offsets.size and int(offsets[-1]) < 2**31:
        return np.ascontiguousarray(offsets, dtype=np.int32)
    return offsets
