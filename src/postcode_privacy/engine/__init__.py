"""The batch sampling engine: the mechanism's exact outputs, computed fast for many records.

The privacy core (``postcode_privacy.mechanism``) defines every output; this package computes
the same outputs with a compiled shell search (``engine/search.py``), shared work for records
with the same true postcode, and worker processes.  It adds no decision rule of its own: the
shell is chosen by the core's ``choose_shell`` and the draws use the core's keyed stream, so an
output here is identical to ``Mechanism.perturb_reference`` for the same inputs
(docs/performance.md, "Why the outputs are identical").
"""

from .batch import Draws, perturb_many, perturb_nodes, start_draws
from .fast import FastSampler

# ``start_draws``/``Draws`` are the release layer's way in: draws started in the background
# while it reads on (release/plan.py, release/draw_ahead.py).
__all__ = ["Draws", "FastSampler", "perturb_many", "perturb_nodes", "start_draws"]
