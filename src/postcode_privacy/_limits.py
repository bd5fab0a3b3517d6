"""Bounds and defaults of numeric parameters, declared once for the library and the command line.

Each bound is far beyond any useful value and well below one that would exhaust memory or
time; the CLI's option types (``commands/_shared_options.py``) and the library's own checks
read them from here, so ``--releases 5000`` and ``evaluate_release(..., releases=5000)`` are
refused alike (docs/choosing-epsilon.md), and a default is the same from Python as on the
command line.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_HOPS",
    "DEFAULT_MAX_EDGE_KM",
    "EVALUATE_SAMPLE",
    "MAX_HOPS",
    "MAX_RELEASES",
    "MAX_SEED",
    "MAX_TOTAL_PRIOR",
    "REPORT_SAMPLE",
]

# Each release is a pass over the sample under its own stand-in key, all held in memory: a
# thousand already shows the trend of repeated releases, and more would only cost time.
MAX_RELEASES = 1_000

# Hop counts of the adversary and key-compromise searches: no more than a radius may be.
# (The largest radius, mechanism.powers.MAX_RADIUS: a test compares.  This module imports
# nothing, so that any layer may read it.)
MAX_HOPS = 10_000

# A graph's prior weights sum to at most this, so that every exact sum of them stays below the
# 64-bit integers compiled code adds them in (graph/graph.py; a population file: sources/).
MAX_TOTAL_PRIOR = 2**62

# Seeds are recorded in JSON reports: beyond a signed 64-bit integer many readers lose digits.
MAX_SEED = 2**63 - 1

# The adversary's candidates and the key-compromise search: postcodes within this many hops.
DEFAULT_HOPS = 6

# Postcodes sampled by prior: evaluate and calibrate (about four minutes at epsilon 1 on two
# cores: docs/choosing-epsilon.md, "Cost"), and the report's attacker figures.
EVALUATE_SAMPLE = 50
REPORT_SAMPLE = 10

# Edges longer than this are cut when a graph is built (docs/graph.md).
DEFAULT_MAX_EDGE_KM = 50.0
