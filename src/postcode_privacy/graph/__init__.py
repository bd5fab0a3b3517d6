"""The graph of postcode units: in memory (graph), on disk (artefact), built (build), and the
embedded national graph (national: built from the bundled Code-Point Open on first use, pinned)."""

from .graph import Graph

__all__ = ["Graph"]
