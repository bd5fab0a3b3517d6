"""``terminated="nearest"``: map a located terminated postcode to the nearest live graph node.

This is public, deterministic pre-processing of the input (docs/release.md, "Terminated
postcodes"): it uses only the published postcode directory and the graph's own coordinates, never
the key, so the guarantee then protects the mapped live postcode.

Nearest means smallest Euclidean distance between British National Grid coordinates (metres).
Ties between locations are broken by the smaller location number, which is the location whose
first member has the smaller node index (locations are numbered by first member); within the
chosen location the member with the smallest node index is used.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from ..errors import InvalidParameterError
from ..graph.graph import Graph
from ..postcodes import try_normalise

__all__ = ["NearestLive", "bundled_terminated_locations"]

_lock = threading.Lock()
_bundled: pd.DataFrame | None = None


def bundled_terminated_locations() -> pd.DataFrame:
    """Terminated (or non-geographic) Great Britain postcodes with coordinates, from the bundled
    ONS postcode directory: every located directory postcode that Code-Point Open does not list
    as live, Northern Ireland excluded.  Columns postcode, easting, northing.  Loaded once per
    process (about ten seconds: both bundled sources are read).
    """
    global _bundled
    with _lock:
        if _bundled is None:
            from ..sources.codepoint import read_codepoint
            from ..sources.directory import bundled_terminated

            live = read_codepoint().postcodes
            _bundled = bundled_terminated(live)
        return _bundled


class NearestLive:
    """Look up terminated postcodes and map them to the nearest live node of ``graph``.

    ``table`` has columns postcode, easting, northing (British National Grid metres); postcodes
    are normalised here, rows whose postcode is malformed or whose coordinates are missing are
    ignored, and for a postcode listed twice the first row wins.  ``None`` means the bundled
    directory (:func:`bundled_terminated_locations`), loaded on first use.
    """

    def __init__(self, graph: Graph, table: pd.DataFrame | None = None):
        if graph.location_coordinates is None:
            raise InvalidParameterError(
                "terminated='nearest' needs a graph with coordinates; this graph has none")
        self._graph = graph
        self._source = table
        self._rows: pd.Series | None = None  # normalised postcode -> table row
        self._xy: np.ndarray | None = None
        self._tree = None

    def _load(self) -> None:
        if self._rows is not None:
            return
        if self._source is None:  # already normalised, unique and located
            table = bundled_terminated_locations()
            codes = table["postcode"].to_numpy(dtype=object)
        else:
            table = self._source
            missing = {"postcode", "easting", "northing"} - set(table.columns)
            if missing:
                raise InvalidParameterError("the terminated-postcode table needs columns "
                                            "postcode, easting and northing")
            codes = np.array([try_normalise(c) for c in table["postcode"].tolist()], dtype=object)
        xy = np.column_stack([pd.to_numeric(table["easting"], errors="coerce").to_numpy(float),
                              pd.to_numeric(table["northing"], errors="coerce").to_numpy(float)])
        usable = np.flatnonzero(pd.notna(codes) & np.isfinite(xy).all(axis=1))
        index = pd.Index(codes[usable])
        first = ~index.duplicated(keep="first")
        self._rows = pd.Series(usable[first], index=index[first])
        self._xy = xy

    def row_of(self, postcode: str) -> int | None:
        """Row of a normalised postcode in the terminated table (a stable code), or None."""
        self._load()
        row = self._rows.get(postcode)
        return None if row is None else int(row)

    def nearest_node(self, row: int) -> int:
        """Node index of the live postcode nearest to terminated-table row ``row``."""
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self._graph.location_coordinates)
        point = self._xy[row]
        distance, _ = self._tree.query(point)
        # Every location within a hair of the nearest distance, then an exact-as-floats choice:
        # smallest squared distance, then smallest location number.
        candidates = np.asarray(
            self._tree.query_ball_point(point, distance * (1 + 1e-9) + 1e-6), dtype=np.int64)
        delta = self._graph.location_coordinates[candidates] - point
        squared = delta[:, 0] * delta[:, 0] + delta[:, 1] * delta[:, 1]
        best = candidates[np.lexsort((candidates, squared))[0]]
        return int(self._graph.members(int(best))[0])
