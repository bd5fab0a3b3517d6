"""The graph of postcode units: in memory, on disk, and its hop-shell search."""

from .graph import Graph

__all__ = ["Graph"]
