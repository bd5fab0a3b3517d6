"""Compiled per-location arrays derived from a graph (numba).

A location is a distinct centroid; its prior mass is the sum of its member postcodes' priors.
The search kernels that use these masses live in the engine (``engine/search.py``,
``engine/sweep.py``); this module keeps only what is a property of the graph itself.
"""

from __future__ import annotations

import numpy as np

from .._numba import njit
from .graph import Graph

__all__ = ["location_masses", "warm_up"]


@njit(cache=True)
def _location_masses(members_indptr, members_flat, prior):
    n_loc = members_indptr.size - 1
    out = np.zeros(n_loc, dtype=np.int64)
    for loc in range(n_loc):
        total = 0
        for k in range(members_indptr[loc], members_indptr[loc + 1]):
            total += prior[members_flat[k]]
        out[loc] = total
    return out


def location_masses(graph: Graph) -> np.ndarray:
    """Exact prior mass of every location (sum over its member postcodes), int64."""
    return _location_masses(graph.members_indptr, graph.members_flat, graph.prior)


def warm_up() -> None:
    """Load numba and this module's kernel, for the array types of graph artefacts, from
    numba's cache (or compile it) without a graph: the first call costs about 0.3 s, which
    ``engine.landmarks.warm_up_in_background`` spends while the graph is being loaded."""
    prior = np.zeros(0, np.int64)
    prior.flags.writeable = False  # as a loaded graph's prior is (numba compiles each layout)
    _location_masses(np.zeros(1, np.int64), np.zeros(0, np.int32), prior)
