"""Radius choice and teleport probability (docs/methods.md, "Choosing the radius")."""

from __future__ import annotations

import warnings
from decimal import Decimal
from fractions import Fraction

import pytest
from graphs import colocated, disconnected, path, spanning_prior

from postcode_privacy import Mechanism
from postcode_privacy.errors import TeleportWarning
from postcode_privacy.graph.shells import hop_distances
from postcode_privacy.mechanism.radius import TELEPORT_TARGET, default_radius, teleport_bound


@pytest.mark.parametrize("eps", ["0.3", "0.5", "1", "2", "5"])
@pytest.mark.parametrize("min_prior,total", [(1, 10), (1, 1_739_034), (3, 500), (1, 2**62 - 1)])
def test_default_radius_is_the_smallest_meeting_the_target(eps, min_prior, total):
    radius = default_radius(Decimal(eps), min_prior, total)
    assert teleport_bound(Decimal(eps), radius, min_prior, total) <= TELEPORT_TARGET
    for smaller in range(1, radius):  # brute force: every smaller radius misses
        assert teleport_bound(Decimal(eps), smaller, min_prior, total) > TELEPORT_TARGET


def test_national_default_radii():
    """Uniform prior over the 1,739,034 live GB postcodes."""
    got = {e: default_radius(Decimal(e), 1, 1_739_034) for e in ("0.5", "1", "2")}
    # Independent estimate: R ~ ln(M / 1e-6) / (eps / 2), rounded up, within one of the rule.
    import math

    for e, r in got.items():
        estimate = math.log((1_739_034 - 1) / 1e-6) / (float(e) / 2)
        assert abs(r - math.ceil(estimate)) <= 1


@pytest.mark.parametrize(
    "factory", [lambda: path(9), lambda: disconnected(), lambda: colocated(spanning_prior(9, 2))]
)
@pytest.mark.parametrize("eps,radius", [("0.5", 2), ("1", 3), ("2", 1)])
def test_teleport_probability_is_exact_and_bounded(factory, eps, radius):
    graph = factory()
    m = Mechanism(graph, eps, radius=radius)
    for x in graph.postcodes:
        probs = m.probabilities(x)
        dist = hop_distances(graph, graph.index_of(x), radius)
        outside = sum((p for p, d in zip(probs, dist) if d >= radius), Fraction(0))
        assert m.teleport_probability(x) == outside
        assert m.teleport_probability(x) <= m.teleport_bound


def test_explicit_radius_missing_the_target_warns_with_the_bound():
    from fractions import Fraction

    for radius in range(1, 12):  # the bound printed is never below the exact one
        with pytest.warns(TeleportWarning, match="teleport probability bound") as caught:
            m = Mechanism(path(30), "1", radius=radius)
        shown = str(caught[0].message).split("bound of ")[1].split(",")[0]
        assert m.teleport_bound <= Fraction(shown) <= m.teleport_bound * Fraction(101, 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = Mechanism(path(30), "1")  # the default never warns
        Mechanism(path(30), "1", radius=m.radius)
    assert m.teleport_bound <= TELEPORT_TARGET


def test_an_epsilon_too_small_for_any_default_radius():
    """With no radius in range meeting the target, a mechanism needs an explicit radius, warns
    that none would do, and records that it has no default (the report's ``radius_is_default``)."""
    from postcode_privacy.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="too small for a default radius"):
        Mechanism(path(30), "0.0001")
    with pytest.warns(TeleportWarning, match="no radius within the supported range"):
        m = Mechanism(path(30), "0.0001", radius=5)
    assert m.default_radius is None and m.radius == 5


def test_default_radius_bound_uses_public_information_only():
    """The bound depends on the prior's minimum and total, not on any record or postcode."""
    a = Mechanism(path(10, [1] * 10), "1")
    b = Mechanism(path(10, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), "1")
    assert a.radius == b.radius
    assert a.radius == default_radius(Decimal(1), 1, 10)


def test_printed_teleport_bounds_are_rounded_up():
    """The CLI's closing lines say "teleport bound X": X is never below the exact bound (a
    float's %.3g printed 7.29e-07 for 7.2931e-07)."""
    import random
    from fractions import Fraction

    from postcode_privacy.mechanism.radius import bound_text

    rng = random.Random(3)
    for _ in range(3000):
        x = Fraction(rng.randrange(1, 10**15), rng.randrange(1, 10**15)) * Fraction(10) ** rng.randrange(-20, 5)  # fmt: skip
        shown = Fraction(bound_text(x))
        assert x <= shown <= x * Fraction(101, 100)
        assert Fraction(bound_text(f"{x.numerator}/{x.denominator}")) == shown
    exact = "3877703155313451367156129768875/5316915860842818805066595397251147179"
    assert bound_text(exact) == "7.30e-07"


def test_the_float_of_a_bound_is_never_below_it():
    """The manifest's and the report's ``teleport_bound.approx`` was ``float(bound)``, the
    nearest float, below the bound about half the time."""
    import math
    import random

    from postcode_privacy._exact_numbers import float_above as float_at_least

    rng = random.Random(5)
    below = 0
    for _ in range(3000):
        x = Fraction(rng.randrange(1, 10**30), rng.randrange(1, 10**30)) * Fraction(10) ** rng.randrange(-30, 5)  # fmt: skip
        up = float_at_least(x)
        assert Fraction(up) >= x and Fraction(math.nextafter(up, 0)) < x
        below += Fraction(float(x)) < x
    assert below > 1000  # the nearest float is below that often
    assert float_at_least(Fraction(1, 4)) == 0.25  # exact when a float holds it


@pytest.mark.parametrize("epsilon", ["0.1", "0.4", "0.6", "1", "1.1", "2"])
def test_the_manifest_and_report_floats_of_the_teleport_bound_are_at_least_it(epsilon):
    """(On this graph the nearest float is below the bound at 0.4, 0.6, 1.1 and 2.)"""
    from postcode_privacy import Graph, Key
    from postcode_privacy.release.plan import ReleasePlan
    from postcode_privacy.report._data import fraction_json

    codes = [f"AB{i // 10 + 1} {i % 10}AA" for i in range(40)]
    graph = Graph.from_edges(codes, [(i, i + 1) for i in range(39)])
    plan = ReleasePlan(
        key=Key.from_bytes(b"t" * 32), epsilon=epsilon, graph=graph, id_column="i",
        postcode_column="p",
    )  # fmt: skip
    bound = plan.mechanism.teleport_bound
    for shown in (
        plan.describe()["teleport_bound"]["approx"],
        fraction_json(bound, upper_bound=True)["approx"],
    ):
        assert Fraction(shown) >= bound


def test_evaluates_float_of_the_teleport_bound_is_at_least_it():
    """``evaluate``'s JSON gave the nearest float, below the bound at some epsilons (a review
    of round 27; the manifest's and the report's were mended a round before)."""
    from test_evaluate_graphs import postcode_graph

    from postcode_privacy.evaluate.run import evaluate_release

    (graph, laua), nearest_below = postcode_graph(n=30), 0
    for epsilon in ("0.4", "0.6", "1.1", "2", "2.5", "3"):
        run = evaluate_release(graph, epsilon, sample=2, releases=1, adversary_hops=1,
                               compromise_hops=1, laua=laua, match_truncation=False)  # fmt: skip
        exact = Fraction(run["teleport_bound_exact"])
        assert Fraction(run["teleport_bound"]) >= exact
        nearest_below += Fraction(float(exact)) < exact
    assert nearest_below  # (so the old float would have been below it here)
