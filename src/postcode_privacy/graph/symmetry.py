"""A compiled check that a sorted CSR adjacency is symmetric.

The hop metric is only a metric on an undirected graph, and the guarantee's proof needs the
metric.  A loaded artefact is checked with this instead of sorting every reversed edge (an
O(E log E) sort of ten million keys): each edge (r, c) looks for (c, r) by binary search in
row c, which is sorted.
"""

from __future__ import annotations

import numpy as np

from .._numba import njit


@njit(cache=True)
def _symmetric(indptr, indices):  # pragma: no cover - compiled
    n = indptr.size - 1
    for r in range(n):
        for k in range(indptr[r], indptr[r + 1]):
            c = indices[k]
            lo = indptr[c]
            hi = indptr[c + 1]
            while lo < hi:
                mid = (lo + hi) // 2
                if indices[mid] < r:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == indptr[c + 1] or indices[lo] != r:
                return False
    return True


def csr_is_symmetric(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """True if every edge (r, c) has its reverse.  Precondition: rows sorted, indices in range."""
    return bool(_symmetric(np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int32)))
