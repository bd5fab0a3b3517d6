"""The guarantee, proved per graph in exact arithmetic (docs/methods.md, "The guarantee").

For every generated graph, epsilon and radius, every triple (x, x', y) satisfies
K(x)(y) <= e^(eps * min(d(x, x'), R)) * K(x')(y), compared as integers against a rational
lower bound on the exponential: no float tolerance anywhere.
"""

from __future__ import annotations

import pytest
from exact import guarantee_violations, sharp_power_violations
from graphs import shapes, spanning_prior

from postcode_privacy import Graph, Mechanism
from postcode_privacy.mechanism.powers import powers

EPSILONS = ["0.01", "0.1", "0.3", "0.5", "1", "2", "3.7", "5"]


@pytest.mark.parametrize("name,factory,n", shapes(seed=3), ids=[s[0] for s in shapes(3)])
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_every_triple_within_bound(name, factory, n, epsilon):
    for radius in range(1, 7):
        prior = spanning_prior(n, seed=radius * 31 + len(epsilon))
        mechanism = Mechanism(factory(prior), epsilon, radius=radius)
        assert guarantee_violations(mechanism) == [], (name, epsilon, radius)


@pytest.mark.parametrize("name,factory,n", shapes(seed=5), ids=[s[0] for s in shapes(5)])
def test_uniform_prior_too(name, factory, n):
    for epsilon in ("0.2", "1.5"):
        for radius in (1, 3, 6):
            assert guarantee_violations(Mechanism(factory(None), epsilon, radius=radius)) == []


def test_two_node_counterexample_regression():
    """Methods, "Rounding": eps = 0.3, R = 1, a prior spanning the 64-bit range.

    Independently rounded double-precision powers broke the bound here; ours must not.
    """
    graph = Graph.from_edges(["A", "B"], [("A", "B")], prior=[1, 2**62 - 1])
    mechanism = Mechanism(graph, 0.3, radius=1)
    assert guarantee_violations(mechanism) == []
    # And the ratio really is close to the bound, so the test is sharp enough to matter.
    w_a, w_b = mechanism.weights("A"), mechanism.weights("B")
    from fractions import Fraction

    ratio = Fraction(w_a[0] * sum(w_b), w_b[0] * sum(w_a))
    assert 1.349 < float(ratio) <= 1.3499  # e^0.3 = 1.34986...


@pytest.mark.parametrize(
    "epsilon", ["0.01", "0.05", "0.1", "0.3", "0.7", "1", "1.3", "2", "2.9", "4", "5"]
)
def test_sharp_inequality_on_powers(epsilon):
    """P_{j+h} >= q^h * P_j for all j, h: what makes the claim hold for every graph and prior."""
    for radius in (1, 2, 7, 60, 200):
        assert (
            sharp_power_violations(epsilon, powers(__import__("decimal").Decimal(epsilon), radius))
            == []
        )
