"""Library version and the output-stability version.

``OUTPUT_STABILITY_VERSION`` changes whenever any release output could change for identical
inputs (key, subject, postcode, graph, epsilon, radius).  It is bound into every keyed draw, so
a new value re-perturbs everyone: see docs/threat-model.md and CHANGELOG.md.
"""

__version__ = "0.1.0"
OUTPUT_STABILITY_VERSION = "1"
