"""Exact checks of the guarantee, shared by the proof tests and the mutation tests.

No floating point: every comparison is between integers, against rational lower bounds on
e^(epsilon * h) built from Taylor partial sums.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from functools import cache

from postcode_privacy.graph.shells import hop_distances
from postcode_privacy.mechanism.powers import exp_lower_bound


@cache
def exp_bound(epsilon_text: str, h: int, scale: int = 1) -> Fraction:
    """A rational lower bound on exp(epsilon * h / scale), accurate to about 1e-120 relative."""
    return exp_lower_bound(Fraction(Decimal(epsilon_text)) * h / scale) if h else Fraction(1)


def guarantee_violations(mechanism, limit: int = 5) -> list[tuple]:
    """Every triple (x, x', y) with K(x)(y) > e^(eps * dcap(x, x')) * K(x')(y), up to ``limit``.

    K(x)(y) / K(x')(y) = w_x(y) * Z(x') / (w_x'(y) * Z(x)); a zero denominator with a non-zero
    numerator is an unbounded ratio and always a violation.
    """
    graph, eps, radius = mechanism.graph, mechanism.epsilon.text, mechanism.radius
    labels = graph.postcodes
    weights = [mechanism.weights(x) for x in labels]
    totals = [sum(w) for w in weights]
    caps = [hop_distances(graph, i, radius).tolist() for i in range(len(labels))]
    found = []
    for x in range(len(labels)):
        for x2 in range(len(labels)):
            if x == x2:
                continue
            bound = exp_bound(eps, caps[x][x2])
            for y in range(len(labels)):
                lhs = weights[x][y] * totals[x2] * bound.denominator
                rhs = bound.numerator * weights[x2][y] * totals[x]
                if lhs > rhs:
                    found.append((labels[x], labels[x2], labels[y]))
                    if len(found) >= limit:
                        return found
    return found


def sharp_power_violations(epsilon_text: str, p: tuple[int, ...], limit: int = 5) -> list[tuple]:
    """Pairs (j, h) with P_{j+h} < q^h * P_j, q = exp(-epsilon/2).

    Uses e^(eps*h/2) >= L^h with L a lower bound on e^(eps/2): P_j <= L^h * P_{j+h} proves the
    inequality; the sharp check must hold for every j, h, whatever the graph.
    """
    half = exp_bound(epsilon_text, 1, 2)
    a = (half.numerator << 400) // half.denominator  # a / 2**400 <= L <= e^(eps/2)
    found = []
    radius = len(p) - 1
    a_pow = [1]
    for _ in range(radius):
        a_pow.append(a_pow[-1] * a)
    for h in range(1, radius + 1):
        for j in range(radius - h + 1):
            if p[j] << (400 * h) > a_pow[h] * p[j + h]:
                found.append((j, h))
                if len(found) >= limit:
                    return found
    return found
