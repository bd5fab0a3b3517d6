"""The privacy core: exact powers, the keyed stream, the sampler, radius and teleport, keys.

Nothing in this package does I/O or uses floating point for anything that affects an output.
"""

from .keys import Key
from .mechanism import Mechanism

__all__ = ["Key", "Mechanism"]
