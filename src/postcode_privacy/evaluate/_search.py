"""The evaluation's bounded searches: the engine's compiled location search, shared.

``LocationSearch`` (``engine/sweep.py``) is used by both the engine (to precompute ball-mass
profiles) and the evaluation (balls and shell masses around sampled postcodes); it lives with
the engine so there is one compiled search to maintain.
"""

from __future__ import annotations

from ..engine.sweep import LocationSearch

__all__ = ["LocationSearch"]
