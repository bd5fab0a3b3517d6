"""How far released postcodes moved: a summary for the operator, never for publication.

docs/release.md, "Progress and the closing line".  The distances are between the centroids of
the postcode each record was released from and the postcode released for it, over released
records only, so they describe the true data: ``perturb`` writes them to the private audit file
only, never to the manifest nor to its terminal output.  Floats are fine here: nothing
privacy-relevant depends on them.

Memory is fixed whatever the input's length: distances are counted in 10-metre bins up to
:data:`MAX_METRES` (longer ones in the last bin), so medians and percentiles are given as the
lower edge of their bin (rounded down to a multiple of 10 m).
"""

from __future__ import annotations

import numpy as np

from ..graph.graph import Graph

__all__ = ["BIN_METRES", "MAX_METRES", "Displacement"]

BIN_METRES = 10
MAX_METRES = 1_500_000  # longer than any distance within Great Britain and Northern Ireland


class Displacement:
    """Counts of true-to-released distances, in bins of :data:`BIN_METRES` metres."""

    def __init__(self, graph: Graph):
        self._coords = graph.location_coordinates
        self._node_location = graph.node_location
        self._bins = np.zeros(MAX_METRES // BIN_METRES + 1, dtype=np.int64)
        self.count = 0

    def add(self, true_nodes: np.ndarray, released_nodes: np.ndarray) -> None:
        if self._coords is None or len(true_nodes) == 0:
            return
        a = self._coords[self._node_location[np.asarray(true_nodes)]]
        b = self._coords[self._node_location[np.asarray(released_nodes)]]
        metres = np.hypot(a[:, 0] - b[:, 0], a[:, 1] - b[:, 1])
        index = np.minimum((metres // BIN_METRES).astype(np.int64), len(self._bins) - 1)
        self._bins += np.bincount(index, minlength=len(self._bins))
        self.count += len(index)

    def quantile(self, q: float) -> int | None:
        """The ``q`` quantile in metres (a bin's lower edge), or None if nothing was measured."""
        if self.count == 0:
            return None
        rank = max(1, int(np.ceil(q * self.count)))
        return int(np.searchsorted(np.cumsum(self._bins), rank)) * BIN_METRES

    def summary(self) -> dict | None:
        """``{"records", "median", "p95"}`` in whole metres, or None if nothing was measured."""
        if self.count == 0:
            return None
        return {"records": self.count, "median": self.quantile(0.5), "p95": self.quantile(0.95)}
