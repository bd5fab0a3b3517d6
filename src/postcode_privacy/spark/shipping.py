"""What the driver ships to the executors, and how a Python worker finds it there.

The key travels inside the task closure, as :class:`_SealedKey`; the graph travels once per
session, as an artefact file named by its content hash (:func:`_ship_graph`), and each Python
worker loads it at most once (:func:`_worker_graph`).  The shipping records and the worker's
graph cache are module-level: one of each per Python process.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from pyspark import SparkFiles

from ..errors import ArtefactError
from ..graph.artefact import load_graph, save_graph
from ..graph.graph import Graph
from ..mechanism.keys import Key

ARTEFACT_PREFIX = "postcode-privacy-graph-"
_ARTEFACT_SUFFIX = ".ppgraph"
_WORKER_CACHE_SIZE = 2  # graphs kept per Python worker


# -- the key inside a closure ---------------------------------------------------------------------


class _SealedKey:
    """Key-file bytes carried to executors inside the task closure; never shown.

    ``Key`` refuses pickling so that it is never copied by accident; this holder is the one
    deliberate exception, and it only ever travels inside the closure Spark sends to its Python
    workers (never into a literal or a configuration value; on Spark Connect the closure is
    itself part of the plan the client sends, so debug logs of requests hold it: docs/spark.md).
    """

    __slots__ = ("_data",)

    def __init__(self, key: Key):
        self._data = key.to_file_bytes()

    def open(self) -> Key:
        return Key.from_file_bytes(self._data)

    def __repr__(self) -> str:
        return "<key withheld>"

    __str__ = __repr__

    def __reduce__(self):
        return (_unseal, (self._data,))


def _unseal(data: bytes) -> _SealedKey:
    sealed = _SealedKey.__new__(_SealedKey)
    sealed._data = data
    return sealed


# -- shipping the graph ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _GraphRef:
    """What a worker needs to find and verify the shipped artefact."""

    file_name: str
    sha256: str


_ship_lock = threading.Lock()
_shipped: set[tuple[str, str]] = set()  # (application id, file name) already added
_staging: Path | None = None


def _staging_dir() -> Path:
    global _staging
    if _staging is None:
        _staging = Path(tempfile.mkdtemp(prefix="postcode-privacy-spark-"))
        atexit.register(shutil.rmtree, _staging, ignore_errors=True)
    return _staging


def _artefact_name(sha256: str) -> str:
    return f"{ARTEFACT_PREFIX}{sha256}{_ARTEFACT_SUFFIX}"


_default_path: Path | None = None


def _default_artefact_path() -> Path | None:
    """The national graph's cached artefact, if it exists (located once per process: finding
    it hashes the installed source files).  Workers verify its content hash in any case."""
    global _default_path
    if _default_path is None:
        from ..graph.national import default_graph_path

        _default_path = default_graph_path()
    return _default_path if _default_path.is_file() else None


def _resolve_graph(graph) -> tuple[Graph, Path | None]:
    """The driver's graph and an artefact file holding exactly it (None: one must be written)."""
    if graph is None:
        from ..graph.national import default_graph

        resolved = default_graph(progress=False)
        return resolved, _default_artefact_path()
    if isinstance(graph, Graph):
        if graph.params.get("source") == "bundled-codepoint":
            from ..graph.national import default_graph

            path = _default_artefact_path()
            if path is not None and default_graph(progress=False).sha256 == graph.sha256:
                return graph, path
        return graph, None
    if isinstance(graph, (str, os.PathLike)):
        return load_graph(graph), Path(graph)
    raise TypeError("graph must be a postcode_privacy.Graph, the path of a graph artefact, or None")


def _is_connect(session) -> bool:
    """True for a Spark Connect session (no SparkContext on the client)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _session_id(session) -> str:
    return session.session_id if _is_connect(session) else session.sparkContext.applicationId


def _ship_graph(session, graph: Graph, path: Path | None) -> _GraphRef:
    """Ship the artefact to the session's executors once, under a name fixed by its content hash.

    Classic Spark: ``SparkContext.addFile``.  Spark Connect, which has no SparkContext on the
    client: ``SparkSession.addArtifacts(..., file=True)``, which uploads the file to the server
    for this session; on the executors both are found with ``SparkFiles.get``, and the worker
    checks the content hash either way.  The name makes shipping safe to repeat: one name is
    always one content.  A graph held only in memory is written once to a private temporary
    directory; an existing artefact is hard-linked there (copied where that is not possible) so
    that it can carry that name.
    """
    name = _artefact_name(graph.sha256)
    marker = (_session_id(session), name)
    with _ship_lock:
        if marker in _shipped:
            return _GraphRef(name, graph.sha256)
        target = _staging_dir() / name
        if not target.exists():
            if path is None:
                save_graph(graph, target)
            else:
                try:  # Spark resolves symbolic links to their target's name: hard link
                    os.link(path, target)
                except OSError:
                    shutil.copyfile(path, target)
        if _is_connect(session):
            session.addArtifacts(str(target), file=True)
        else:
            session.sparkContext.addFile(str(target))
        _shipped.add(marker)
    return _GraphRef(name, graph.sha256)


# Worker side: graphs loaded by this Python process, newest last, how often each was loaded, and
# how many tasks (partitions of either pass) asked for a graph here.
_worker_lock = threading.Lock()
_worker_graphs: OrderedDict[str, Graph] = OrderedDict()
_worker_loads: dict[str, int] = {}
_worker_tasks = 0


def _worker_graph(ref: _GraphRef) -> Graph:
    """The shipped graph, loaded from its file at most once per Python worker and verified.

    Postcondition: the returned graph's content hash is ``ref.sha256``, the driver's graph.
    Raises :class:`ArtefactError` if the file cannot be read or holds another graph.
    """
    global _worker_tasks
    with _worker_lock:
        _worker_tasks += 1
        graph = _worker_graphs.get(ref.sha256)
        if graph is None:
            graph = load_graph(SparkFiles.get(ref.file_name))  # hash-checked against its header
            if graph.sha256 != ref.sha256:
                raise ArtefactError(
                    "the graph artefact on this executor is not the driver's "
                    "graph (its sha256 differs)"
                )
            _worker_loads[ref.sha256] = _worker_loads.get(ref.sha256, 0) + 1
            _worker_graphs[ref.sha256] = graph
            while len(_worker_graphs) > _WORKER_CACHE_SIZE:
                _worker_graphs.popitem(last=False)
        else:
            _worker_graphs.move_to_end(ref.sha256)
        return graph


def worker_graph_loads() -> dict[str, int]:
    """How many times this Python process has loaded each shipped graph (a diagnostic)."""
    with _worker_lock:
        return dict(_worker_loads)


def worker_graph_tasks() -> int:
    """How many tasks in this Python process have asked for a shipped graph (a diagnostic)."""
    with _worker_lock:
        return _worker_tasks
