"""Hand-written release manifests for the report's tests: the fields a release writes from
its graph, epsilon and radius (the teleport bound, which a report checks, and the prior), made
to agree with the manifest's own epsilon and radius."""

from __future__ import annotations

import warnings

from postcode_privacy import Mechanism
from postcode_privacy.release.manifest import prior_kind


def self_consistent(graph, data: dict) -> dict:
    """The fields of a manifest (``data``) that its epsilon and radius fix on ``graph``; none
    where those are not a valid pair (a test of a bad epsilon or radius)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (a short radius's teleport warning)
            bound = Mechanism(graph, data["epsilon"], data["radius"]).teleport_bound
    except Exception:
        return {}
    return {
        "teleport_bound": {"exact": f"{bound.numerator}/{bound.denominator}"},
        "prior": prior_kind(graph),
    }
