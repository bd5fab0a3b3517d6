"""The graph of postcode units held in memory.

Representation
--------------
Postcodes that share a centroid are one *location*.  The graph is stored as:

* ``postcodes``: node labels (normalised postcodes), in node order;
* ``node_location``: the location of each node;
* ``loc_indptr``/``loc_indices``: a symmetric CSR adjacency over locations, each row sorted,
  with no self loops and no duplicates;
* ``prior``: a strictly positive integer weight per node (int64);
* ``location_coordinates``: optional easting/northing per location (OSGB36 metres).

Hop distance between two nodes (docs/methods.md, section "The graph"): 0 to itself, 1 to any
other postcode at the same location, and otherwise the hop distance between their locations.
That is exactly the shortest-path metric of the graph in which every location's postcodes form a
clique joined to every postcode of each neighbouring location, so the theorem applies to it
unchanged; the compact form just avoids materialising the cliques (1,168 postcodes share one
point in NW1).

Locations are numbered in order of their first member, which makes the representation
canonical: two graphs with the same nodes, co-location and adjacency have identical arrays and
therefore the same ``sha256``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._limits import MAX_TOTAL_PRIOR
from ..errors import GraphError, InvalidParameterError, UnknownPostcodeError
from ..postcodes import try_normalise
from ._labels import ByteLabels, ListLabels, NodeLabels
from .pinned import DEFAULT_GRAPH_SHA256

GRAPH_HASH_DOMAIN = b"postcode-privacy/graph/v1"


def _label(text: object) -> str:
    """Store valid postcodes in normal form; any other label (test graphs) as given."""
    if not isinstance(text, str) or not text.strip():
        raise GraphError("node labels must be non-empty strings")
    return try_normalise(text) or text


def validate_prior(prior: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """Check a prior and return it as int64.

    Preconditions the guarantee needs (docs/methods.md, "Supported priors"): every value an
    integer >= 1 (a zero-prior node can never be output, so the likelihood ratio against it is
    unbounded), and the total at most 2**62 so that int64 cumulative sums cannot wrap.  The
    total is checked in floating point *before* any integer sum, since an int64 sum of an
    oversized prior would already have wrapped.
    """
    if isinstance(prior, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in prior):
        raise InvalidParameterError("every prior value must be an integer")
    arr = np.asarray(prior)
    if arr.shape != (n,):
        raise InvalidParameterError(f"prior has {arr.size} values for {n} nodes")
    if arr.dtype == object:
        values = list(arr)
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
            raise InvalidParameterError("every prior value must be an integer")
        if any(int(v) < 1 for v in values):
            raise InvalidParameterError("every prior value must be at least 1")
        if (
            any(int(v) > MAX_TOTAL_PRIOR for v in values)
            or sum(int(v) for v in values) > MAX_TOTAL_PRIOR
        ):
            raise InvalidParameterError("total prior exceeds 2**62")
        return np.array([int(v) for v in values], dtype=np.int64)
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise InvalidParameterError("every prior value must be an integer")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
            raise InvalidParameterError("every prior value must be an integer")
    if n and arr.min() < 1:
        raise InvalidParameterError("every prior value must be at least 1")
    # Float check first: an int64 sum of an oversized prior wraps before it can be inspected.
    if float(np.sum(arr.astype(np.float64))) > float(MAX_TOTAL_PRIOR) * (1 + 1e-9):
        raise InvalidParameterError("total prior exceeds 2**62")
    if arr.dtype.kind == "u" and n and int(arr.max()) > MAX_TOTAL_PRIOR:
        raise InvalidParameterError("total prior exceeds 2**62")
    out = arr.astype(np.int64)
    if sum(int(v) for v in out.tolist()) > MAX_TOTAL_PRIOR:  # exact, now that it cannot wrap
        raise InvalidParameterError("total prior exceeds 2**62")
    return out


def _le_bytes(arr: np.ndarray, dtype: str) -> memoryview:
    """The array's bytes in the given little-endian dtype, as a view of them (a copy only if
    the array is in another dtype or layout; a loaded artefact's arrays are not)."""
    return np.ascontiguousarray(arr, dtype=dtype).reshape(-1).data.cast("B")


def _csr_from_pairs(n: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric, sorted, de-duplicated CSR from undirected pairs, self loops dropped."""
    keep = a != b
    a, b = a[keep], b[keep]
    src = np.concatenate([a, b]).astype(np.int64)
    dst = np.concatenate([b, a]).astype(np.int64)
    if src.size:
        key = np.unique(src * n + dst)
        src, dst = key // n, key % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst.astype(np.int32)


def _own_copy(values, dtype) -> np.ndarray:
    """A new C-ordered array of ``values``, shared with nobody."""
    return np.array(values, dtype=dtype, order="C", copy=True)


class Graph:
    """A finite undirected graph of postcode units with a strictly positive integer prior."""

    def __init__(
        self,
        postcodes: Sequence[str],
        node_location: np.ndarray,
        loc_indptr: np.ndarray,
        loc_indices: np.ndarray,
        prior: np.ndarray | Sequence[int] | None = None,
        coordinates: np.ndarray | None = None,
        params: dict[str, Any] | None = None,
        provenance: dict[str, Any] | None = None,
    ):
        self._labels: NodeLabels = ListLabels(list(postcodes))
        self._n = n = len(self._labels)
        # Copies: the structure is checked and hashed once, here, so the graph must not share
        # arrays the caller could change later (the sampler trusts them: an index out of
        # range would crash it, and a changed edge would change outputs under the same sha256).
        self.node_location = _own_copy(node_location, np.int32)
        self.loc_indptr = _own_copy(loc_indptr, np.int64)
        self.loc_indices = _own_copy(loc_indices, np.int32)
        self.prior = validate_prior(np.ones(n, dtype=np.int64) if prior is None else prior, n)
        self.location_coordinates = (
            None if coordinates is None else _own_copy(coordinates, np.float64)
        )
        self.params = dict(params or {})
        self.provenance = dict(provenance or {})
        # Read-only, as a loaded artefact's are: they are checked and hashed once, here.
        for array in (self.node_location, self.loc_indptr, self.loc_indices, self.prior):
            array.flags.writeable = False
        if self.location_coordinates is not None:
            self.location_coordinates.flags.writeable = False
        self._check_structure()
        self._members_indptr, self._members = self._location_members()
        self.total_prior = int(self.prior.sum(dtype=np.int64))
        self.prior_cumsum = np.cumsum(self.prior, dtype=np.int64)
        self.sha256 = self._content_hash()

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_edges(
        cls,
        postcodes: Iterable[str],
        edges: Iterable[tuple[object, object]],
        prior: np.ndarray | Sequence[int] | None = None,
    ) -> Graph:
        """A graph whose nodes are ``postcodes`` in the given order, each its own location.

        ``edges`` are pairs of labels (or of node indices).  Self loops and repeated edges are
        ignored.  Disconnected graphs are admissible: the cap makes every distance finite.
        """
        labels = [_label(p) for p in postcodes]
        index = {label: i for i, label in enumerate(labels)}
        if len(index) != len(labels):
            raise GraphError("postcodes must be unique")
        n = len(labels)
        pairs: list[tuple[int, int]] = []
        for edge in edges:
            u, v = edge
            pairs.append((cls._edge_end(u, index, n), cls._edge_end(v, index, n)))
        arr = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        indptr, indices = _csr_from_pairs(n, arr[:, 0], arr[:, 1])
        return cls(labels, np.arange(n, dtype=np.int32), indptr, indices, prior)

    @staticmethod
    def _edge_end(end: object, index: dict[str, int], n: int) -> int:
        if isinstance(end, (int, np.integer)) and not isinstance(end, bool):
            if not 0 <= int(end) < n:
                raise GraphError("edge refers to a node index out of range")
            return int(end)
        if isinstance(end, str):
            label = end if end in index else try_normalise(end)
            if label is not None and label in index:
                return index[label]
        raise GraphError("edge refers to a postcode that is not a node")

    @classmethod
    def _from_verified_arrays(
        cls,
        label_bytes: np.ndarray,
        node_location: np.ndarray,
        loc_indptr: np.ndarray,
        loc_indices: np.ndarray,
        prior: np.ndarray,
        coordinates: np.ndarray | None,
        params: dict[str, Any],
        provenance: dict[str, Any],
    ) -> Graph:
        """Fast construction for a graph read back from an artefact (graph/artefact.py).

        ``label_bytes`` holds the labels UTF-8 encoded in a fixed-width ``S`` array (no label
        contains a NUL).  The labels stay in that array (``ByteLabels``), so loading the national
        graph costs no per-label Python objects.  The structural checks run (symmetry is
        checked by a compiled binary search for each reversed edge instead of the O(E log E)
        sort; label uniqueness is checked by strict order when the labels are sorted, as built
        graphs are, else through the label index), except for content equal to the pinned
        default graph (``graph/pinned.py``), which was checked in full when it was built.

        Postcondition: ``sha256`` is the content hash of the arrays as given.  The caller must
        compare it with the hash recorded when the graph was built (and fully validated), and
        refuse the graph if they differ.
        """
        self = cls.__new__(cls)
        self._labels = ByteLabels(label_bytes)
        self._n = len(self._labels)
        self.node_location = np.ascontiguousarray(node_location, dtype=np.int32)
        self.loc_indptr = np.ascontiguousarray(loc_indptr, dtype=np.int64)
        self.loc_indices = np.ascontiguousarray(loc_indices, dtype=np.int32)
        prior = np.asarray(prior)
        # validate_prior's exact total is a Python loop over every value.  For int64 values
        # >= 1 the float64 total is within a relative (n + 1) * 2**-53 of the exact one, so a
        # float total of at most 2**61 proves the exact total is below 2**62.
        if (
            prior.dtype == np.int64
            and prior.shape == (self._n,)
            and prior.min() >= 1
            and float(prior.sum(dtype=np.float64)) <= 2.0**61
        ):
            self.prior = prior
        else:
            self.prior = validate_prior(prior, self._n)
        self.location_coordinates = (
            None if coordinates is None else np.ascontiguousarray(coordinates, dtype=np.float64)
        )
        self.params = dict(params)
        self.provenance = dict(provenance)
        self.sha256 = self._content_hash()
        if self.sha256 != DEFAULT_GRAPH_SHA256:
            # The pinned graph's content was checked in full when it was built; any other
            # content is checked here.
            self._check_structure(full=False)
        self._members_indptr, self._members = self._location_members()
        self.total_prior = int(self.prior.sum(dtype=np.int64))
        self.prior_cumsum = np.cumsum(self.prior, dtype=np.int64)
        return self

    def _check_structure(self, full: bool = True) -> None:
        n = self._n
        loc = self.node_location
        if loc.shape != (n,):
            raise GraphError("node_location must have one entry per node")
        n_loc = self.loc_indptr.size - 1
        if n_loc < 1 or loc.min() < 0 or loc.max() >= n_loc:
            raise GraphError("node_location refers to a location that does not exist")
        # Canonical location order: numbered by first member, every location non-empty.
        first = np.full(n_loc, n, dtype=np.int64)
        np.minimum.at(first, loc, np.arange(n))
        if np.any(first == n) or np.any(np.diff(first) <= 0):
            raise GraphError("locations must be numbered in order of their first member")
        ip, ix = self.loc_indptr, self.loc_indices
        if ip[0] != 0 or np.any(np.diff(ip) < 0) or ip[-1] != ix.size:
            raise GraphError("location adjacency is not a valid CSR structure")
        if ix.size and (ix.min() < 0 or ix.max() >= n_loc):
            raise GraphError("location adjacency refers to a location that does not exist")
        rows = np.repeat(np.arange(n_loc, dtype=np.int32), np.diff(ip))
        if np.any(rows == ix):
            raise GraphError("location adjacency has a self loop")
        same_row = rows[1:] == rows[:-1]
        if np.any(same_row & (ix[1:] <= ix[:-1])):
            raise GraphError("location adjacency rows must be sorted and free of duplicates")
        if full:
            fwd = rows.astype(np.int64) * n_loc + ix
            bwd = ix.astype(np.int64) * n_loc + rows
            symmetric = np.array_equal(np.sort(fwd), np.sort(bwd))
        else:
            from .symmetry import csr_is_symmetric  # compiled: no O(E log E) sort on load

            symmetric = csr_is_symmetric(ip, ix)
        if not symmetric:
            raise GraphError("location adjacency must be symmetric")
        if self.location_coordinates is not None and self.location_coordinates.shape != (n_loc, 2):
            raise GraphError("coordinates must give (easting, northing) per location")

    def _location_members(self) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(self.node_location, kind="stable").astype(np.int32)
        counts = np.bincount(self.node_location, minlength=self.n_locations)
        indptr = np.zeros(self.n_locations + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return indptr, order

    # -- identity -----------------------------------------------------------------------------

    def canonical_sections(self) -> list[tuple[str, bytes | memoryview]]:
        """The byte sections the content hash covers, in order (docs/spec.md, "Graph hash")."""
        sections: list[tuple[str, bytes | memoryview]] = [
            ("postcodes", self._labels.hash_bytes()),
            ("node_location", _le_bytes(self.node_location, "<i4")),
            ("loc_indptr", _le_bytes(self.loc_indptr, "<i8")),
            ("loc_indices", _le_bytes(self.loc_indices, "<i4")),
            ("prior", _le_bytes(self.prior, "<i8")),
        ]
        if self.location_coordinates is not None:
            sections.append(("coordinates", _le_bytes(self.location_coordinates, "<f8")))
        sections.append(
            ("params", json.dumps(self.params, sort_keys=True, separators=(",", ":")).encode())
        )
        return sections

    def _content_hash(self) -> str:
        h = hashlib.sha256()
        h.update(GRAPH_HASH_DOMAIN)
        for name, data in self.canonical_sections():
            for part in (name.encode("ascii"), data):
                h.update(len(part).to_bytes(8, "big"))
                h.update(part)
        return h.hexdigest()

    # -- queries ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __contains__(self, postcode: object) -> bool:
        return self.find(postcode) is not None

    def __repr__(self) -> str:
        return f"<Graph {len(self)} postcodes, {self.n_locations} locations, sha256={self.sha256[:12]}…>"

    @property
    def postcodes(self) -> list[str]:
        """Every postcode in node order, as a new list each time (the graph's own stays
        unchangeable): keep it in a variable rather than indexing it in a loop, where
        ``label(node)`` gives one postcode without the copy."""
        return list(self._labels.as_list())

    @property
    def n_locations(self) -> int:
        return self.loc_indptr.size - 1

    @property
    def n_location_edges(self) -> int:
        return self.loc_indices.size // 2

    def label(self, node: int) -> str:
        return self._labels.label(node)

    def labels_of(self, nodes: np.ndarray) -> list[str]:
        """The label of each node of a 1-D integer array, in order (``label`` in bulk)."""
        nodes = np.asarray(nodes)
        if nodes.ndim != 1 or (nodes.size and nodes.dtype.kind not in "iu"):
            raise TypeError("nodes must be a 1-D array of node numbers")
        if nodes.size and (int(nodes.min()) < 0 or int(nodes.max()) >= len(self)):
            raise IndexError("node number out of range")
        return self._labels.labels_of(nodes)

    def label_bytes(self) -> np.ndarray:
        """The labels as a fixed-width ``S`` array (the artefact's form); GraphError if a label
        contains NUL."""
        return self._labels.fixed_width()

    def find(self, postcode: object) -> int | None:
        """Node index of a label or postcode (any case and spacing), or None."""
        if isinstance(postcode, str):
            i = self._labels.lookup(postcode)
            if i is None:
                norm = try_normalise(postcode)
                i = self._labels.lookup(norm) if norm else None
            return i
        return None

    def find_labels(self, labels: list[str]) -> np.ndarray:
        """Node index of each exact label (int64, -1 where none): ``find`` for text that is
        already normalised, in one vectorised lookup."""
        return self._labels.lookup_many(labels)

    def index_of(self, postcode: object) -> int:
        i = self.find(postcode)
        if i is None:
            if try_normalise(postcode) is None:
                raise UnknownPostcodeError(
                    "the text given is not a UK postcode in form (nor a label of this graph)"
                )
            raise UnknownPostcodeError("the postcode is well-formed but not a node of this graph")
        return i

    def members(self, location: int) -> np.ndarray:
        """Node indices at a location, ascending."""
        return self._members[self._members_indptr[location] : self._members_indptr[location + 1]]

    @property
    def members_indptr(self) -> np.ndarray:
        return self._members_indptr

    @property
    def members_flat(self) -> np.ndarray:
        return self._members

    def location_neighbours(self, location: int) -> np.ndarray:
        return self.loc_indices[self.loc_indptr[location] : self.loc_indptr[location + 1]]

    def neighbour_indices(self, node: int) -> list[int]:
        loc = int(self.node_location[node])
        out = [int(m) for m in self.members(loc) if m != node]
        for nb in self.location_neighbours(loc):
            out.extend(int(m) for m in self.members(int(nb)))
        return sorted(out)

    def neighbours(self, postcode: str) -> list[str]:
        """Postcodes one hop away (co-located postcodes included), in node order."""
        return [self._labels.label(i) for i in self.neighbour_indices(self.index_of(postcode))]

    def require_coordinates(self) -> np.ndarray:
        """``location_coordinates`` (n_locations x 2, OSGB36 metres); GraphError if this graph
        carries none."""
        if self.location_coordinates is None:
            raise GraphError("this graph carries no coordinates")
        return self.location_coordinates

    def coordinates(self, postcode: str) -> tuple[float, float]:
        """(easting, northing) of a postcode's centroid, OSGB36 metres."""
        e, n = self.require_coordinates()[self.node_location[self.index_of(postcode)]]
        return float(e), float(n)

    def prior_of(self, postcode: str) -> int:
        """The prior weight of a postcode (its population count, or 1 for a uniform prior)."""
        return int(self.prior[self.index_of(postcode)])

    # -- persistence (implemented in graph/artefact.py) -----------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        from .artefact import save_graph

        save_graph(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Graph:
        from .artefact import load_graph

        return load_graph(path)
