"""A graph's node labels, in one of two storage forms behind one interface.

Why two forms: a graph built in memory already holds its labels as Python strings, while the
national graph loaded from an artefact (graph/artefact.py) holds 1.7 M labels in one memory-mapped
fixed-width byte array, and turning those into Python objects up front would cost seconds on every
load.  :class:`ListLabels` is the first form, :class:`ByteLabels` the second; ``Graph`` talks only
to :class:`NodeLabels`, so no code outside this module needs to know which one it holds.

Both forms give the same answers and the same bytes for the content hash (docs/spec.md,
"Graph hash": the labels UTF-8 encoded and joined by newlines), so a graph's ``sha256`` does
not depend on how it was constructed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..errors import GraphError

__all__ = ["NodeLabels", "ListLabels", "ByteLabels"]

_SEARCHES_BEFORE_INDEX = 10_000  # label lookups by binary search before the dict is built


def _unique_index(labels: list[str]) -> dict[str, int]:
    """Label -> node number; GraphError if a label repeats."""
    index = {label: i for i, label in enumerate(labels)}
    if len(index) != len(labels):
        raise GraphError("postcodes must be unique")
    return index


class NodeLabels(ABC):
    """Node number <-> label, for a graph with at least one node and unique labels."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def label(self, node: int) -> str:
        """The label of one node."""

    @abstractmethod
    def as_list(self) -> list[str]:
        """Every label in node order.  The list is shared: callers must not modify it."""

    @abstractmethod
    def lookup(self, label: str) -> int | None:
        """The node whose label is exactly ``label``, or None."""

    def labels_of(self, nodes: np.ndarray) -> list[str]:
        """``label`` of each node of a 1-D integer array, in order."""
        return [self.label(node) for node in nodes.tolist()]

    def lookup_many(self, labels: list[str]) -> np.ndarray:
        """``lookup`` of each label as an int64 array, -1 for None."""
        found = [self.lookup(label) for label in labels]
        return np.array([-1 if i is None else i for i in found], dtype=np.int64)

    @abstractmethod
    def hash_bytes(self) -> bytes:
        """The labels UTF-8 encoded and joined by ``b"\\n"`` (the content hash's section)."""

    @abstractmethod
    def fixed_width(self) -> np.ndarray:
        """The labels as a 1-D fixed-width ``S`` array, the artefact's storage form.

        Raises GraphError if a label contains NUL, which that form cannot hold."""

    @property
    @abstractmethod
    def index_built(self) -> bool:
        """Whether the label -> node dict exists (it is built lazily for a loaded graph)."""


class ListLabels(NodeLabels):
    """Labels held as Python strings, with the label -> node dict built up front."""

    def __init__(self, labels: list[str]):
        if not labels:
            raise GraphError("a graph needs at least one node")
        self._labels = labels
        self._index = _unique_index(labels)

    def __len__(self) -> int:
        return len(self._labels)

    def label(self, node: int) -> str:
        return self._labels[node]

    def as_list(self) -> list[str]:
        return self._labels

    def lookup(self, label: str) -> int | None:
        return self._index.get(label)

    def hash_bytes(self) -> bytes:
        return "\n".join(self._labels).encode("utf-8")

    def fixed_width(self) -> np.ndarray:
        encoded = [label.encode("utf-8") for label in self._labels]
        if any(b"\x00" in label for label in encoded):
            raise GraphError("a node label contains a NUL character and cannot be stored")
        width = max(8, max(len(label) for label in encoded))  # S8 holds every postcode
        return np.array(encoded, dtype=f"S{width}")

    @property
    def index_built(self) -> bool:
        return True


class ByteLabels(NodeLabels):
    """Labels held UTF-8 encoded in a fixed-width ``S`` array (none contains NUL).

    The Python list and the label dict are built only when first needed.  While the dict does
    not exist and the labels are in strictly ascending byte order (as built graphs are), a
    lookup is a binary search; after ``_SEARCHES_BEFORE_INDEX`` of them the dict is built (about
    a second for the national graph), since the labels are then clearly in bulk use.
    """

    def __init__(self, label_bytes: np.ndarray):
        if label_bytes.ndim != 1 or label_bytes.dtype.kind != "S" or label_bytes.size == 0:
            raise GraphError("node labels must be a non-empty fixed-width byte array")
        self._bytes = label_bytes
        self._n = int(label_bytes.size)
        self._list: list[str] | None = None
        self._index: dict[str, int] | None = None
        self._searches = 0
        # Strict order proves uniqueness without decoding; otherwise the dict checks it now.
        self._sorted = bool(self._n == 1 or np.all(label_bytes[1:] > label_bytes[:-1]))
        if not self._sorted:
            self._label_index()

    def __len__(self) -> int:
        return self._n

    def label(self, node: int) -> str:
        return bytes(self._bytes[node]).decode("utf-8")

    def labels_of(self, nodes: np.ndarray) -> list[str]:
        if self._list is not None:
            return super().labels_of(nodes)
        # One gather and one bytes object per node: a release labels every output this way.
        return [b.decode("utf-8") for b in self._bytes[nodes].tolist()]

    def as_list(self) -> list[str]:
        if self._list is None:
            self._list = [b.decode("utf-8") for b in self._bytes.tolist()]
        return self._list

    def _label_index(self) -> dict[str, int]:
        if self._index is None:
            self._index = _unique_index(self.as_list())
        return self._index

    def lookup(self, label: str) -> int | None:
        if self._index is None and self._sorted and self._searches < _SEARCHES_BEFORE_INDEX:
            self._searches += 1
            key = label.encode("utf-8")
            arr = self._bytes
            if len(key) > arr.dtype.itemsize or b"\0" in key:
                return None
            j = int(np.searchsorted(arr, key))
            return j if j < self._n and arr[j] == key else None
        return self._label_index().get(label)

    def lookup_many(self, labels: list[str]) -> np.ndarray:
        if self._index is not None or not self._sorted:
            return super().lookup_many(labels)
        # One binary search for all, on the UTF-8 bytes as ``lookup`` compares them; keys that
        # cannot be a label (too long, holding NUL, which the fixed-width array would strip,
        # or not encodable) are left out first.
        arr = self._bytes
        width = arr.dtype.itemsize
        out = np.full(len(labels), -1, dtype=np.int64)
        where, keys = [], []
        for i, label in enumerate(labels):
            try:
                key = label.encode("utf-8")
            except UnicodeEncodeError:
                continue
            if len(key) <= width and b"\0" not in key:
                where.append(i)
                keys.append(key)
        if keys:
            wanted = np.array(keys, dtype=arr.dtype)
            j = np.minimum(np.searchsorted(arr, wanted), self._n - 1)
            hit = arr[j] == wanted
            out[np.asarray(where, dtype=np.int64)[hit]] = j[hit]
        return out

    def hash_bytes(self) -> bytes:
        # Same bytes as ListLabels.hash_bytes without a Python object per label: append a
        # newline column, drop the NUL padding, drop the final newline.
        width = self._bytes.dtype.itemsize
        table = np.full((self._n, width + 1), ord("\n"), dtype=np.uint8)
        table[:, :width] = self._bytes.view(np.uint8).reshape(self._n, width)
        flat = table.reshape(-1)
        return flat[flat != 0][:-1].tobytes()

    def fixed_width(self) -> np.ndarray:
        return np.ascontiguousarray(self._bytes)

    @property
    def index_built(self) -> bool:
        return self._index is not None
