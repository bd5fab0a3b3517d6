"""Upper bounds of numeric parameters, declared once for the library and the command line.

Each bound is far beyond any useful value and well below one that would exhaust memory or
time; the CLI's option types (``commands/_shared_options.py``) and the library's own checks
read them from here, so ``--releases 5000`` and ``evaluate_release(..., releases=5000)`` are
refused alike (docs/choosing-epsilon.md).
"""

from __future__ import annotations

from .mechanism.powers import MAX_RADIUS

__all__ = ["MAX_HOPS", "MAX_RELEASES"]

# Each release is a pass over the sample under its own stand-in key, all held in memory: a
# thousand already shows the trend of repeated releases, and more would only cost time.
MAX_RELEASES = 1_000

# Hop counts of the adversary and key-compromise searches: no more than a radius may be.
MAX_HOPS = MAX_RADIUS
