"""Gathering everything the report shows (the numbers; figures are drawn in ``_maps`` and
``_figures``).

All privacy figures come from the mechanism's exact integer weights (``evaluate.exact``) and
become floats only for display.  The attacker figures are those of ``postcode-privacy evaluate``
(docs/choosing-epsilon.md, "`evaluate`: both sides of one release") on a smaller, named sample: a seeded draw of postcodes by prior, never
anyone's true data, with stand-in keys derived from the seed.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Context, Decimal, localcontext
from fractions import Fraction
from typing import cast

import numpy as np

from .._environment import source_date_epoch
from .._exact_numbers import float_above
from .._input_files import visible_text
from .._limits import DEFAULT_HOPS, MAX_HOPS, MAX_RELEASES, REPORT_SAMPLE
from ..errors import InvalidParameterError, warn_at_caller
from ..evaluate.adversary import summarise
from ..evaluate.exact import ExactMechanism, OutputDistribution
from ..evaluate.run import (
    adversary_scenarios,
    check_count,
    check_seed,
    identify_mechanism,
    select_sample,
)
from ..evaluate.truncation import group_codes, truncation_baseline
from ..evaluate.utility import measure_utility, mixture_quantile_m
from ..graph.graph import Graph
from ..mechanism.epsilon import EXACT, parse_epsilon
from ..mechanism.mechanism import Mechanism
from ..mechanism.radius import TELEPORT_TARGET
from ..release.manifest import prior_kind
from ._examples import example_postcodes
from ._figures import histogram_figure
from ._manifest import ReleaseFacts
from ._maps import place_map, probability_in

FORMAT = "postcode-privacy-report"
# 3: probability_within_1km and map_outside_share are exact (fraction_json), not floats
# 4: probability_within_1km counts postcodes exactly 1,000 m away (it was under 1,000 m)
# 5: likelihood_ratio_bounds give two_candidates_upper; figures_drawn_with
# 6: the independent-releases attacker row gives below_one_release
# 7: risks as text rounded up from their exact fractions (unchanged_rate_text,
#    median_/max_self_probability_text, the truncation rows' identification_rate_text); with
#    --manifest, the release's on_error and terminated policies; chosen_postcode_given
# 8: teleport_above_target, default_radius
FORMAT_VERSION = 8

CONDITIONS = (
    ("the key", "a different key is a fresh, independent draw"),
    ("the subject identifier", "it is hashed into the draw; a new identifier is a new draw"),
    (
        "the true postcode",
        "it is hashed too: someone who moves is drawn again (a terminated postcode counts as "
        "the live postcode it is mapped to)",
    ),
    ("the graph artefact (its sha256)", "node order and prior feed every output"),
    (
        "with --terminated nearest, the terminated-postcode table (its sha256)",
        "it decides which live postcode a terminated one is released from",
    ),
    ("epsilon and the radius R", "both set the weights and are hashed into the draw"),
    (
        "the library's output-stability version",
        "a new version re-draws everyone (see the changelog)",
    ),
)


@dataclass
class Report:
    """The report's data (JSON-ready) and its figures (PNG bytes, by name)."""

    data: dict
    figures: dict[str, bytes] = field(default_factory=dict)
    # Kept out of ``data``: the written report must be the same bytes for the same inputs.
    seconds: float = 0.0


def fraction_json(value: Fraction, *, upper_bound: bool = False) -> dict:
    """An exact value with its float for readers; the float of an ``upper_bound`` is the
    least float at or above it, never one below (``float_above``)."""
    return {
        "numerator": str(value.numerator),
        "denominator": str(value.denominator),
        "approx": float_above(value) if upper_bound else float(value),
    }


def generated_at() -> str:
    """Now, in UTC; ``SOURCE_DATE_EPOCH`` (the reproducible-builds convention) overrides it,
    and a malformed value is refused (``_environment.source_date_epoch``)."""
    moment = source_date_epoch() or _dt.datetime.now(_dt.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def place_summary(exact: ExactMechanism, node: int) -> tuple[dict, OutputDistribution, np.ndarray]:
    """Exact displacement, self- and teleport probability of one true postcode, with its
    distribution and displacement histogram (whole metres)."""
    g = exact.graph
    dist = exact.distribution(node)
    distances = exact.distances_m(dist.location)
    expected = exact.expected_displacement_m(dist, distances)
    hist = np.zeros(int(exact.max_distance_m()) + 2)
    exact.add_displacement_histogram(dist, hist, distances)
    neighbours = g.location_neighbours(dist.location)
    xy = g.require_coordinates()
    spacing = (
        float(np.hypot(*(xy[neighbours] - xy[dist.location]).T).mean())
        if neighbours.size
        else math.nan
    )
    summary = {
        # a --graph is user input too: its labels are shown with no control or direction
        # character that could make one read as another
        "postcode": visible_text(g.label(node)),
        "expected_displacement_m": fraction_json(expected),
        "self_probability": fraction_json(exact.self_probability(dist)),
        "teleport_probability": fraction_json(exact.teleport_probability(dist)),
        "median_m": mixture_quantile_m(hist, 0.5),
        "p95_m": mixture_quantile_m(hist, 0.95),
        # exact (a float sum near 1 could print as 100%): the locations at most 1,000 m away,
        # as "within 1 km" reads (Code-Point's whole-metre grid puts some at exactly 1,000 m)
        "probability_within_1km": fraction_json(probability_in(exact, dist, distances <= 1000.0)),
        "neighbour_spacing_m": None if not math.isfinite(spacing) else float(spacing),
    }
    return summary, dist, hist


def _map_half_width_m(summary: dict) -> float:
    """Frame a map on the 95th percentile of displacement, never tighter than a few neighbours."""
    spacing = summary["neighbour_spacing_m"] or 0.0
    return max(1.15 * summary["p95_m"], 4.0 * spacing, 1000.0)


def attacker_figures(
    graph: Graph,
    mechanism: Mechanism,
    exact: ExactMechanism,
    nodes: np.ndarray,
    releases: int,
    seed: int,
    hops: int,
    progress: Callable[[str, int, int], None] | None,
) -> dict:
    """The adversary rows of ``evaluate`` for ``nodes``, with sector and district alongside."""
    scenarios = adversary_scenarios(
        mechanism,
        exact,
        nodes,
        releases,
        seed,
        hops,
        progress=None if progress is None else (lambda d, t: progress("attacker", d, t)),
    )
    rows = []
    for name, label, outcomes in (
        ("one_release", "one release", scenarios.one),
        ("keyed_releases", f"{releases} keyed releases (same key, re-run)", scenarios.keyed),
        (
            "independent_draws",
            f"{releases} independent releases (new key each time)",
            scenarios.independent,
        ),
    ):
        s = summarise(outcomes)
        row = {
            "scenario": name,
            "label": label,
            "identification_rate": s.identification_rate,
            "identification": "simulated: one set of draws per sampled postcode",
            "median_rank": s.median_rank,
            "median_posterior": s.median_posterior,
        }
        if name != "independent_draws":  # keyed releases are the one release, drawn once
            # The chance over the draw itself, exact for each sampled postcode: one simulated
            # draw of a few postcodes would say 0% or 10% where the truth is 2.6%.
            row.update(scenarios.expected_rate())
            row["identification"] = "exact for each sampled postcode, over its draw"
        rows.append(row)
    # More releases only tell the attacker more, so a simulated figure under the exact
    # one-release one is the sample's noise: flagged where it is shown, never left bare.
    one, independent = rows[0], rows[2]
    below = cast(float, independent["identification_rate"]) < cast(
        float, one["identification_rate"]
    )
    independent["below_one_release"] = below
    if below:
        independent["identification"] = (
            f"{independent['identification']}; below the one-release figure, which more "
            "releases cannot truly fall under"
        )
    for level in ("sector", "district"):
        codes = group_codes(graph, level)
        t = truncation_baseline(graph, nodes, level, None, codes) if codes is not None else None
        if t is not None:
            rows.append(
                {
                    "scenario": level,
                    "label": f"publish only the postcode {level}",
                    "identification_rate": t.identification_rate,
                    "identification_rate_text": t.identification_rate_text,
                    "identification": "exact for each sampled postcode",
                    "median_rank": t.median_rank,
                    "median_posterior": t.median_posterior,
                    "median_displacement_km": t.median_displacement_km,
                    "p95_displacement_km": t.p95_displacement_km,
                }
            )
    return {"releases": int(releases), "hops": int(hops), "rows": rows}


def build_report(
    graph: Graph,
    epsilon=None,
    radius: int | None = None,
    postcode: str | None = None,
    sample: int | None = REPORT_SAMPLE,
    seed: int = 0,
    releases: int = 20,
    adversary_hops: int = DEFAULT_HOPS,
    release: ReleaseFacts | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> Report:
    """Everything the report shows, computed exactly; figures rendered with matplotlib (Agg).

    ``release`` (from ``read_manifest``) describes an actual release: its epsilon and radius are
    used, and its graph must be ``graph``.  ``sample=None`` leaves out the attacker figures and
    the sample summary.  ``progress(stage, done, total)`` is called while it runs.
    """
    started = time.perf_counter()

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    if release is not None:
        if release.graph_sha256 != graph.sha256:
            raise InvalidParameterError(
                "the manifest's release used another graph (its graph sha256 differs from the "
                "loaded graph's); give the release's graph with --graph"
            )
        if epsilon is not None and parse_epsilon(epsilon) != parse_epsilon(release.epsilon):
            # compared as exact numbers: "1.0" and "1" are one epsilon
            raise InvalidParameterError("--epsilon differs from the manifest's epsilon; omit it")
        if radius is not None and radius != release.radius:
            raise InvalidParameterError("--radius differs from the manifest's radius; omit it")
        epsilon, radius = release.epsilon, release.radius
    if epsilon is None:
        raise InvalidParameterError("give --epsilon, or --manifest of a release")
    releases = check_count("releases", releases, MAX_RELEASES)
    adversary_hops = check_count("adversary_hops", adversary_hops, MAX_HOPS)
    seed = check_seed(seed)  # (before any work, as the command line refuses it)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        mechanism = Mechanism(graph, epsilon, radius)
    if release is not None:  # (refused before a warning about the radius it gives)
        release.check_against(mechanism.teleport_bound)
    for warning in said:
        warn_at_caller(str(warning.message), warning.category)
    exact = ExactMechanism(mechanism)
    places = [dict(e) for e in example_postcodes(graph)]
    if postcode is not None:
        places.append({"kind": "chosen", "node": graph.index_of(postcode), "how": "--postcode"})

    figures: dict[str, bytes] = {}
    rows = []
    for i, place in enumerate(places):
        report("places and maps", i, len(places))
        summary, dist, hist = place_summary(exact, place["node"])
        half = _map_half_width_m(summary)
        name = f"map_{place['kind']}"
        figures[name], outside = place_map(
            exact,
            dist,
            summary["postcode"],
            half,
            f"Where {summary['postcode']} ({place['kind']}) can be released to",
        )
        rows.append(
            {
                "kind": place["kind"],
                "chosen_by": place["how"],
                **summary,
                "map": name,
                "map_half_width_m": half,
                "map_outside_share": fraction_json(outside),
            }
        )
        if place["kind"] == "chosen" or (postcode is None and i == 0):
            figures["histogram"] = histogram_figure(hist, f"true postcode {summary['postcode']}")
    report("places and maps", len(places), len(places))

    ratios = []
    for h in sorted({1, 2, 3, 5, 10, mechanism.radius}):
        if h <= mechanism.radius:
            upper = _exp_upper(EXACT.multiply(Decimal(mechanism.epsilon), Decimal(h)))
            ratios.append(
                {
                    "hops": h,
                    "max_ratio": _float_up(upper),
                    "max_ratio_upper": upper,
                    "two_candidates_upper": _two_candidates_upper(upper),
                }
            )
    data = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generated": generated_at(),
        # the one library whose version shapes the page's bytes beyond its numbers: the PNGs
        "figures_drawn_with": {"matplotlib": importlib.metadata.version("matplotlib")},
        **identify_mechanism(mechanism),
        "radius_is_default": mechanism.radius == mechanism.default_radius,
        "default_radius": mechanism.default_radius,  # (None: no radius meets the target)
        "prior": prior_kind(graph),
        "release": None if release is None else release.to_json(),
        "teleport_bound": fraction_json(mechanism.teleport_bound, upper_bound=True),
        # (the page says so too, not only the warning on the terminal of whoever ran it)
        "teleport_above_target": mechanism.teleport_bound > TELEPORT_TARGET,
        "likelihood_ratio_bounds": ratios,
        "conditions": [{"unchanged": a, "why": b} for a, b in CONDITIONS],
        "examples": rows,
        # (a postcode the user chose is shown on the page, which says so)
        "chosen_postcode_given": postcode is not None,
        "focus": rows[-1]["postcode"] if postcode is not None else rows[0]["postcode"],
        "sample": None,
        "attacker": None,
    }
    if sample is not None:
        nodes = select_sample(graph, sample, seed)
        report("sample utility", 0, 1)
        utility = measure_utility(exact, nodes)
        data["sample"] = {
            "seed": int(seed),
            "postcodes": [visible_text(graph.label(int(v))) for v in nodes],
            **utility.to_json(),
        }
        figures["sample_histogram"] = histogram_figure(
            utility.histogram_m, f"{utility.sample_size} postcodes drawn by prior (seed {seed})"
        )
        report("sample utility", 1, 1)
        data["attacker"] = attacker_figures(
            graph, mechanism, exact, nodes, releases, seed, adversary_hops, progress
        )
    return Report(data, figures, seconds=round(time.perf_counter() - started, 1))


def _exp_upper(x: Decimal) -> dict | None:
    """An exact rational upper bound on e^x (x a positive decimal), within 10^-40 of it in
    relative terms: decimal's exp is correctly rounded to 60 digits, and the slack covers that
    rounding (the report prints it rounded up, so its "largest ratio" is never understated).
    ``x`` must be exact (``EXACT``'s product): the ambient decimal context, which any caller
    may narrow, rounded ε·h down before, and the bound with it."""
    if x >= 709:  # e^709 > 10^307: reported as "more than 10^307"
        return None
    with localcontext(Context(prec=60)):  # (not a copy of the ambient context: see above)
        approx = x.exp()
    bound = Fraction(approx) * (1 + Fraction(1, 10**45))
    return {"numerator": str(bound.numerator), "denominator": str(bound.denominator)}


def _two_candidates_upper(upper: dict | None) -> dict | None:
    """How sure, at most, an observer can be which of two postcodes h hops apart, equally likely
    beforehand, was the true one: r/(1 + r) for the likelihood ratio r ≤ e^(εh) (Bayes' rule
    with even prior odds; increasing in r, so ``upper`` bounds it).  ``None`` past 10^307."""
    if upper is None:
        return None
    r = Fraction(int(upper["numerator"]), int(upper["denominator"]))
    return fraction_json(r / (1 + r), upper_bound=True)


def _float_up(upper: dict | None) -> float | None:
    """The float nearest above an exact upper bound (``_exp_upper``'s), for readers of the
    JSON: ``math.exp`` rounds to nearest, and so could print a largest ratio below e^(εh)."""
    if upper is None:
        return None
    return float_above(Fraction(int(upper["numerator"]), int(upper["denominator"])))
