"""The evaluation's bounded searches: the engine's compiled location search, shared.

``LocationSearch`` (``engine/sweep.py``) gives the evaluation balls and shell masses around
sampled postcodes; it lives with the engine's other compiled searches, so there is one place to
maintain them.
"""

from __future__ import annotations

from ..engine.sweep import LocationSearch

__all__ = ["LocationSearch"]
