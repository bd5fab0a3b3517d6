"""The radius cap R and the teleport probability.

Teleport probability of x: the chance of a tail draw, T(x) = P_R * (Pi - pi(B(x))) / Z(x), where
B(x) is the ball of nodes within R - 1 hops.  A public bound (docs/methods.md, "Choosing the
radius") uses only the prior and epsilon, never the records released: Z(x) >= P_0 * pi(x) +
P_R * (Pi - pi(x)) and pi(B(x)) >= pi(x), so with m the smallest prior value and M = Pi - m,

    T(x) <= P_R * M / (P_0 * m + P_R * M)    for every node x.

The default R is the smallest radius whose bound is at most 1e-6.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from ..errors import InvalidParameterError
from .powers import MAX_RADIUS, Q_HAT_BITS, powers, q_hat_numerator

TELEPORT_TARGET = Fraction(1, 10**6)


def teleport_bound(epsilon: Decimal, radius: int, min_prior: int, total_prior: int) -> Fraction:
    """Graph-wide upper bound on the teleport probability at this radius (exact)."""
    p = powers(epsilon, radius)
    outside = total_prior - min_prior
    return Fraction(p[radius] * outside, p[0] * min_prior + p[radius] * outside)


def _lower_bound_exceeds_target(a: int, radius: int, min_prior: int, outside: int) -> bool:
    """True if even q_hat**R (<= P_R / P_0) leaves the bound above the target.

    The bound is increasing in P_R / P_0 >= q_hat**R, so this proves every radius <= R misses.
    """
    num = a**radius * outside
    den = (min_prior << (Q_HAT_BITS * radius)) + num
    # num / den > 1 / 10**6, cross-multiplied: Fraction would spend its time on gcds.
    return num * TELEPORT_TARGET.denominator > den * TELEPORT_TARGET.numerator


def default_radius(epsilon: Decimal, min_prior: int, total_prior: int) -> int:
    """Smallest R >= 1 whose teleport bound is at most 1e-6 (docs/spec.md, "Radius")."""
    outside = total_prior - min_prior
    if outside == 0:
        return 1  # a one-node graph (or all mass in one node): nothing to teleport to
    a = q_hat_numerator(Decimal(epsilon))
    # Binary search for the last radius that the cheap exact lower bound already rules out.
    lo, hi = 0, 1
    while _lower_bound_exceeds_target(a, hi, min_prior, outside):
        lo, hi = hi, hi * 2
        if hi > MAX_RADIUS:
            raise InvalidParameterError("epsilon is too small: the default radius exceeds 100000")
    while hi - lo > 1:  # invariant: lo ruled out (or 0), hi not ruled out by the lower bound
        mid = (lo + hi) // 2
        if _lower_bound_exceeds_target(a, mid, min_prior, outside):
            lo = mid
        else:
            hi = mid
    radius = max(lo + 1, 1)
    while teleport_bound(epsilon, radius, min_prior, total_prior) > TELEPORT_TARGET:
        radius += 1
        if radius > MAX_RADIUS:
            raise InvalidParameterError("epsilon is too small: the default radius exceeds 100000")
    return radius
