"""Hop shells: the postcodes exactly h hops from a source (reference implementation).

This is the plain breadth-first search the sampler's correctness is stated against.  A compiled
search elsewhere must return exactly the same shells.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph


def location_shells(graph: Graph, source_location: int, max_hops: int) -> list[np.ndarray]:
    """Locations at hop distance 0, 1, ..., ``max_hops`` from ``source_location``, each sorted."""
    seen = np.zeros(graph.n_locations, dtype=bool)
    seen[source_location] = True
    frontier = np.array([source_location], dtype=np.int64)
    shells = [frontier]
    ip, ix = graph.loc_indptr, graph.loc_indices
    for _ in range(max_hops):
        if frontier.size == 0:
            shells.append(frontier)
            continue
        nbrs = np.concatenate([ix[ip[v] : ip[v + 1]] for v in frontier]).astype(np.int64)
        nbrs = np.unique(nbrs)
        nbrs = nbrs[~seen[nbrs]]
        seen[nbrs] = True
        shells.append(nbrs)
        frontier = nbrs
    return shells


def node_shells(graph: Graph, source: int, max_hops: int) -> list[np.ndarray]:
    """Node indices at hop distance exactly 0, 1, ..., ``max_hops`` from node ``source``.

    Shell 0 is the source; shell 1 adds the other postcodes at the source's location to the
    members of neighbouring locations; shell h >= 2 is the members of locations h hops away.
    Each shell is sorted by node index, the order the sampler uses within a shell.
    """
    shells = iter_node_shells(graph, source)
    return [next(shells) for _ in range(max_hops + 1)]


def hop_distances(graph: Graph, source: int, cap: int) -> np.ndarray:
    """min(d(source, y), cap) for every node y: the capped metric of docs/methods.md."""
    dist = np.full(len(graph), cap, dtype=np.int64)
    for h, shell in enumerate(node_shells(graph, source, cap - 1) if cap >= 1 else []):
        dist[shell] = h
    if cap == 0:
        dist[:] = 0
    return dist


def iter_node_shells(graph: Graph, source: int):
    """Yield the node shells 0, 1, 2, ... from ``source`` lazily, then empty shells for ever.

    The same shells as :func:`node_shells`, one breadth-first step at a time, so a caller can
    stop exploring as soon as it has seen enough.
    """
    loc = int(graph.node_location[source])
    yield np.array([source], dtype=np.int64)
    seen = np.zeros(graph.n_locations, dtype=bool)
    seen[loc] = True
    frontier = np.array([loc], dtype=np.int64)
    ip, ix = graph.loc_indptr, graph.loc_indices
    same = graph.members(loc)
    carry = same[same != source].astype(np.int64)
    empty = np.zeros(0, dtype=np.int64)
    while True:
        if frontier.size:
            nbrs = np.unique(
                np.concatenate([ix[ip[v] : ip[v + 1]] for v in frontier]).astype(np.int64)
            )
            frontier = nbrs[~seen[nbrs]]
            seen[frontier] = True
        parts = [carry] + [graph.members(int(v)) for v in frontier]
        carry = empty
        yield np.sort(np.concatenate(parts).astype(np.int64))
