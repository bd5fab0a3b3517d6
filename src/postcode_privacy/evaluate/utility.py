"""Utility of a release on a sample of postcodes: displacement, self-probability, same area.

Every per-postcode quantity comes from the exact output distribution (``exact.py``), not from
simulated draws, so the figures are reproducible and carry no sampling noise beyond the choice
of sample:

* displacement quantiles are quantiles of the *mixture* of the sampled postcodes' output
  distributions (each postcode weighted equally, the sample being drawn by prior), binned to
  whole metres; a quantile is the smallest whole number of metres d with P(displacement < d + 1)
  >= p.  The mixture is accumulated in float64 from exact per-shell probabilities: its error is
  far below the one-metre binning;
* the self-probability K(x)(x) and the same-local-authority probability are exact fractions;
* the expected displacement is exact for centroid distances rounded to the millimetre.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .._exact_numbers import honest_float, risk_percent
from .exact import ExactMechanism


@dataclass
class PostcodeUtility:
    """Exact utility figures for one sampled postcode."""

    node: int
    self_probability: Fraction
    teleport_probability: Fraction
    expected_displacement_m: Fraction
    same_area_probability: Fraction | None


@dataclass
class UtilitySummary:
    """Utility over a sample.  Distances in kilometres; probabilities as floats for display
    (the exact per-postcode fractions are in ``per_postcode``)."""

    sample_size: int
    median_displacement_km: float
    p95_displacement_km: float
    mean_expected_displacement_km: float
    median_self_probability: float
    max_self_probability: float
    max_teleport_probability: float
    same_area_share: float | None
    histogram_m: np.ndarray = field(repr=False)
    per_postcode: list[PostcodeUtility] = field(repr=False)

    def self_probability_texts(self) -> tuple[str, str]:
        """The median and the largest chance of coming back unchanged over the sample, as
        risks: from the exact fractions, rounded up (``risk_percent``)."""
        selfs = sorted(r.self_probability for r in self.per_postcode)
        middle = len(selfs) // 2
        median = selfs[middle] if len(selfs) % 2 else (selfs[middle - 1] + selfs[middle]) / 2
        return risk_percent(median), risk_percent(selfs[-1])

    def to_json(self) -> dict:
        median_text, max_text = self.self_probability_texts()
        return {
            "sample_size": self.sample_size,
            "median_displacement_km": self.median_displacement_km,
            "p95_displacement_km": self.p95_displacement_km,
            "mean_expected_displacement_km": self.mean_expected_displacement_km,
            "median_self_probability": self.median_self_probability,
            "max_self_probability": self.max_self_probability,
            "median_self_probability_text": median_text,
            "max_self_probability_text": max_text,
            "max_teleport_probability": self.max_teleport_probability,
            "same_local_authority_share": self.same_area_share,
        }


def mixture_quantile_m(histogram: np.ndarray, p: float) -> int:
    """Smallest whole number of metres d with (mass of bins 0 .. d) >= p * total mass."""
    cumulative = np.cumsum(histogram)
    total = cumulative[-1]
    return int(np.searchsorted(cumulative, p * total, side="left"))


def sample_quantile(values, p: float) -> float:
    """The inverted-CDF quantile of a finite sample (the same definition as the mixture's)."""
    ordered = sorted(values)
    k = max(0, int(np.ceil(p * len(ordered))) - 1)
    return float(ordered[k])


def _median(values) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def measure_utility(
    exact: ExactMechanism,
    nodes,
    area: np.ndarray | None = None,
    area_mass: np.ndarray | None = None,
) -> UtilitySummary:
    """Utility of ``exact``'s mechanism over the sampled ``nodes``.

    ``area``/``area_mass``: integer area codes per node (-1 unknown) and each code's total prior,
    e.g. local authorities; the same-area share is then the mean over the sampled postcodes
    whose own area is known of the exact probability that the output shares it.
    """
    nodes = [int(v) for v in nodes]
    if not nodes:
        raise ValueError("the sample is empty")
    histogram = np.zeros(int(exact.max_distance_m()) + 2, dtype=np.float64)
    rows: list[PostcodeUtility] = []
    for node in nodes:
        dist = exact.distribution(node)
        distances = exact.distances_m(dist.location)
        exact.add_displacement_histogram(dist, histogram, distances, weight=1.0 / len(nodes))
        same = (
            exact.same_area_probability(dist, area, area_mass)
            if area is not None and area_mass is not None
            else None
        )
        rows.append(
            PostcodeUtility(
                node,
                exact.self_probability(dist),
                exact.teleport_probability(dist),
                exact.expected_displacement_m(dist, distances),
                same,
            )
        )
    known = [r.same_area_probability for r in rows if r.same_area_probability is not None]
    selfs = [r.self_probability for r in rows]
    return UtilitySummary(
        sample_size=len(nodes),
        median_displacement_km=mixture_quantile_m(histogram, 0.5) / 1000.0,
        p95_displacement_km=mixture_quantile_m(histogram, 0.95) / 1000.0,
        mean_expected_displacement_km=float(
            sum(r.expected_displacement_m for r in rows) / len(rows)
        )
        / 1000.0,
        median_self_probability=_median([honest_float(s) for s in selfs]),
        max_self_probability=honest_float(max(selfs)),
        max_teleport_probability=honest_float(max(r.teleport_probability for r in rows)),
        same_area_share=float(sum(known) / len(known)) if known else None,
        histogram_m=histogram,
        per_postcode=rows,
    )
