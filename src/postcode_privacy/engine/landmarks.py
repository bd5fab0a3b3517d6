"""Landmark bounds on ball masses: a tighter upper bound on Z, so less of the graph is explored.

The core's lazy decision bounds the unexplored part of Z by putting every unexplored node at the
next shell, h + 1 hops away.  On the national graph that treats 1.7 million people as
neighbours, and exploration must run until P_{h+1} times that mass is small.  Most of them are
in fact hundreds of hops away, and a precomputed landmark table proves it cheaply:

* For a few landmark locations L_1 .. L_k (chosen farthest-first) the hop distance from each
  landmark to every location is computed once per graph.
* The triangle inequality gives d(x, y) >= |d(L_i, x) - d(L_i, y)| for every landmark, so every
  node within j hops of x lies in the "square" of locations whose distances from L_i and L_m
  are within j of x's.
* For each pair of landmarks a cumulative 2-D table of prior mass by (d(L_i, .), d(L_m, .))
  gives the mass of any such square in four lookups.  Row j of ``bounds_for(x)`` is therefore an
  upper bound Q[j] >= pi(B_j(x)) on the prior mass within j hops, non-decreasing in j.

With Q, every node outside the explored ball B_h has weight at most P_{max(h+1, j)} times its
prior if it lies outside the square of half-width j - 1, which bounds Z from above (the
formula is in ``engine/bounds.py``, ``z_high_by_row``).  On the national graph this cuts the
locations explored per record at epsilon = 1 by more than half (docs/performance.md).

Cost: k full breadth-first searches and k(k-1)/2 tables of about (diameter in hops)^2 int64
entries; at k = 8 on the national graph about 3 s and 90 MB, built once per graph and kept
only while the graph is alive.
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from ..graph import compiled
from ..graph.compiled import location_masses
from ..graph.graph import Graph
from .forking import start_in_background
from .layout import SearchLayout, graph_layout, map_layout
from .search import ball_bounds, location_distances, pair_table

__all__ = ["GraphTables", "LandmarkBounds", "graph_tables"]

LANDMARKS = 8
ROWS_PER_SOURCE = 3  # pairs whose rows are computed for each source (the most promising ones)
MAX_TABLE_ENTRIES = 1 << 22  # per pair (32 MiB); graphs with a huge hop diameter skip such pairs
MAX_TOTAL_ENTRIES = 1 << 24  # all pairs together (128 MiB)


class LandmarkBounds:
    """Landmark distances and pair tables for one graph."""

    def __init__(self, graph: Graph, loc_mass: np.ndarray, count: int = LANDMARKS):
        n_loc = graph.n_locations
        count = max(1, min(int(count), n_loc))
        # Farthest-first: each new landmark is a location farthest from those already chosen
        # (unreachable counts as farthest, so other components get landmarks of their own).
        far = np.full(n_loc, np.iinfo(np.int32).max, dtype=np.int64)
        start = location_distances(graph, 0)
        reach = np.where(start < 0, np.iinfo(np.int32).max, start)
        landmark = int(np.argmax(reach))
        distances = []
        for _ in range(count):
            dist = location_distances(graph, landmark)
            distances.append(dist)
            far = np.minimum(far, np.where(dist < 0, np.iinfo(np.int32).max, dist))
            if far.max() == 0:
                break
            landmark = int(np.argmax(far))
        self.distances = np.ascontiguousarray(np.stack(distances, axis=1))  # (n_loc, k) int32
        k = self.distances.shape[1]
        pairs, tables, shapes, offsets, offset = [], [], [], [], 0
        for i, m in itertools.combinations(range(k), 2):
            d1, d2 = distances[i], distances[m]
            rows, cols = int(d1.max()) + 1, int(d2.max()) + 1
            entries = (rows + 1) * (cols + 1)
            if entries > MAX_TABLE_ENTRIES or offset + entries > MAX_TOTAL_ENTRIES:
                continue
            pairs.append((i, m))
            table = pair_table(d1, d2, loc_mass, rows, cols)
            tables.append(table.reshape(-1))
            shapes.append(table.shape)
            offsets.append(offset)
            offset += table.size
        self.pairs = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        self.shapes = np.array(shapes, dtype=np.int64).reshape(-1, 2)
        self.offsets = np.array(offsets, dtype=np.int64)
        self.flat = np.concatenate(tables) if tables else np.zeros(0, dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return self.distances.nbytes + self.flat.nbytes

    def bounds_for(self, location: int, radius: int) -> np.ndarray:
        """Rows Q (for the most promising landmark pairs reaching ``location``), each with
        Q[j] >= pi(B_j) for j < R and non-decreasing in j."""
        out = np.empty((ROWS_PER_SOURCE, radius), dtype=np.int64)
        n = ball_bounds(
            self.distances[location],
            self.pairs,
            self.offsets,
            self.shapes,
            self.flat,
            int(radius),
            ROWS_PER_SOURCE,
            out,
        )
        return out[:n]


class GraphTables:
    """Per-graph arrays the engine derives once: location masses and, on first use, the
    landmarks and the search's layout along the map."""

    def __init__(self, graph: Graph):
        self.loc_mass = location_masses(graph)
        self._graph = weakref.ref(graph)
        self.landmarks: LandmarkBounds | None = None
        self._layouts: dict[bool, SearchLayout] = {}
        self._making: threading.Thread | None = None  # the layout along the map, if started

    def _live_graph(self) -> Graph:
        graph = self._graph()
        if graph is None:
            raise RuntimeError("the graph these tables were derived from no longer exists")
        return graph

    def ensure_landmarks(self) -> LandmarkBounds:
        """The landmark tables, built on first use from the graph, which must still be alive
        (the tables hold it only weakly, so that ``graph_tables``'s cache never keeps a graph)."""
        built = self.landmarks  # read without the lock first: see search_layout
        if built is not None:
            return built
        with _LOCK:
            if self.landmarks is None:
                self.landmarks = LandmarkBounds(self._live_graph(), self.loc_mass)
            return self.landmarks

    def search_layout(self, along_map: bool) -> SearchLayout:
        """The location graph as the shell search reads it (engine/layout.py), in the graph's
        numbering or along the map, made on first use.

        One already made is returned without taking the lock.  Worker processes ask for the
        layout their parent made before forking, and a fork copies the lock as it was: held,
        if another thread of the parent held it then, by a thread the worker does not have.
        One being made by ``make_layout_in_background`` is waited for, outside the lock
        (the thread takes it to store the layout), also when that thread started while this
        one waited for the lock.
        """
        while True:
            built = self._layouts.get(along_map)
            if built is not None:
                return built
            making = self._background_layout() if along_map else None
            if making is not None:
                making.join()
                continue
            with _LOCK:
                layout = self._layouts.get(along_map)
                if layout is not None:
                    return layout
                if along_map and self._background_layout() is not None:
                    continue  # started while this thread waited for the lock
                make = map_layout if along_map else graph_layout
                layout = self._layouts[along_map] = make(self._live_graph(), self.loc_mass)
                return layout

    def _background_layout(self) -> threading.Thread | None:
        """The thread of ``make_layout_in_background`` while it runs (not this one), or None.

        Waited for with ``Thread.join``: in a process forked from this one the thread does not
        exist, and ``join`` knows that, where waiting for an event it would never set would
        hang.  (The price: a join that Ctrl-C interrupts can leave the thread looking ended,
        and the layout is then made twice, the same both times.)"""
        making = self._making
        if making is None or making is threading.current_thread() or not making.is_alive():
            return None
        return making

    def make_layout_in_background(self) -> None:
        """Start making the layout along the map in a thread (about 0.5 s on the national
        graph, most of it in numpy and compiled code that release the GIL), so that it is
        ready when a large batch sorts its records by it; ``search_layout`` waits for it.
        Made outside the lock, so a caller wanting the graph's own numbering meanwhile
        does not wait; any error is left for ``search_layout`` to meet again and report."""
        with _LOCK:
            if True in self._layouts or self._making is not None:
                return
            graph = self._live_graph()

            def make() -> None:
                try:
                    layout = map_layout(graph, self.loc_mass)
                except Exception:  # search_layout makes it again and reports what is wrong
                    return
                with _LOCK:
                    self._layouts.setdefault(True, layout)

            self._making = start_in_background(make, "postcode-privacy-layout")


# One entry per live graph, dropped with the graph: bounded by the graphs the caller holds.
_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()


def warm_up_in_background() -> None:
    """Load numba and the kernel ``graph_tables`` runs first in a thread, while this process
    loads the graph and reads its input (graph/compiled.py, ``warm_up``); any error is left
    for the real call to report."""

    def warm_up() -> None:
        try:
            compiled.warm_up()
        except Exception:  # reported, if it persists, by the call that needs the kernel
            pass

    start_in_background(warm_up, "postcode-privacy-warm-up")


def graph_tables(graph: Graph) -> GraphTables:
    """The engine's derived arrays for ``graph``, computed once while the graph is alive."""
    with _LOCK:
        tables = _TABLES.get(graph)
        if tables is None:
            tables = GraphTables(graph)
            _TABLES[graph] = tables
        return tables
