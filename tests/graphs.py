"""Small generated graphs for exact tests: varied shapes, disconnected ones, co-located groups."""

from __future__ import annotations

import random

import numpy as np

from postcode_privacy import Graph
from postcode_privacy.graph.graph import _csr_from_pairs


def labels(n: int) -> list[str]:
    return [f"N{i:02d}" for i in range(n)]


def path(n, prior=None):
    names = labels(n)
    return Graph.from_edges(names, zip(names, names[1:]), prior)


def cycle(n, prior=None):
    names = labels(n)
    return Graph.from_edges(names, list(zip(names, names[1:])) + [(names[-1], names[0])], prior)


def star(n, prior=None):
    names = labels(n)
    return Graph.from_edges(names, [(names[0], b) for b in names[1:]], prior)


def grid(w, h, prior=None):
    names = labels(w * h)
    edges = []
    for r in range(h):
        for c in range(w):
            i = r * w + c
            if c + 1 < w:
                edges.append((i, i + 1))
            if r + 1 < h:
                edges.append((i, i + w))
    return Graph.from_edges(names, edges, prior)


def random_graph(n, p, seed, prior=None):
    rng = random.Random(seed)
    names = labels(n)
    edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return Graph.from_edges(names, edges, prior)


def disconnected(prior=None):
    """A path of 4 and a triangle, plus an isolated node."""
    names = labels(8)
    edges = [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 4)]
    return Graph.from_edges(names, edges, prior)


def colocated(prior=None):
    """Nine postcodes on five locations in a path; two locations hold three postcodes each."""
    names = labels(9)
    node_location = np.array([0, 0, 1, 2, 2, 0, 3, 4, 2], dtype=np.int32)
    a = np.array([0, 1, 2, 3])
    indptr, indices = _csr_from_pairs(5, a, a + 1)
    coords = np.array([[0, 0], [100, 0], [200, 0], [300, 0], [400, 0]], dtype=float)
    return Graph(names, node_location, indptr, indices, prior, coordinates=coords)


def spanning_prior(n: int, seed: int) -> list[int]:
    """A prior from 1 to 2**61 whose total stays within 2**62."""
    rng = random.Random(seed)
    values = [rng.choice([1, 2, 3, 7, 2**10, 2**20, 2**40, 2**55]) for _ in range(n)]
    values[rng.randrange(n)] = 2**61
    values[rng.randrange(n)] = 1
    return values


def shapes(seed: int = 0):
    """(name, factory(prior) -> Graph, n) for every shape the exact tests use."""
    return [
        ("path7", lambda pr: path(7, pr), 7),
        ("cycle8", lambda pr: cycle(8, pr), 8),
        ("star6", lambda pr: star(6, pr), 6),
        ("grid3x3", lambda pr: grid(3, 3, pr), 9),
        ("random10", lambda pr: random_graph(10, 0.3, seed, pr), 10),
        ("disconnected", lambda pr: disconnected(pr), 8),
        ("colocated", lambda pr: colocated(pr), 9),
    ]


UNITS = "ABDEFGHJLNPQRSTUWXYZ"  # letters a postcode's unit may use


def leeds_grid(max_edge_km: float = 50.0, colocated: bool = False, prior=None):
    """(graph, codes): 36 real-looking postcodes on a 6 x 6 grid 100 m apart in Leeds, built
    from coordinates like the national graph (``build_graph``); with ``colocated``, two more
    postcodes share the centroid of 'LS1 1AA' (one location, three members); ``prior``, one
    count per postcode (uniform if None)."""
    from postcode_privacy.graph.build import build_graph

    codes, east, north = [], [], []
    for r in range(6):
        for c in range(6):
            codes.append(f"LS1 {1 + r}{UNITS[r]}{UNITS[c]}")
            east.append(400000.0 + c * 100)
            north.append(430000.0 + r * 100)
    if colocated:
        codes += ["LS2 1ZZ", "LS2 1ZY"]
        east += [400000.0, 400000.0]
        north += [430000.0, 430000.0]
    return build_graph(codes, east, north, prior=prior, max_edge_km=max_edge_km), codes
