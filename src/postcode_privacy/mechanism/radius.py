"""The radius cap R and the teleport probability.

Teleport probability of x: the chance of a tail draw, T(x) = P_R * (Pi - pi(B(x))) / Z(x), where
B(x) is the ball of nodes within R - 1 hops.  A public bound (docs/methods.md, "Choosing the
radius") uses only the prior and epsilon, never the records released: Z(x) >= P_0 * pi(x) +
P_R * (Pi - pi(x)) and pi(B(x)) >= pi(x), so with m the smallest prior value and M = Pi - m,

    T(x) <= P_R * M / (P_0 * m + P_R * M)    for every node x.

The default R is the smallest radius whose bound is at most 1e-6.
"""

from __future__ import annotations

from decimal import Context, Decimal
from fractions import Fraction
from functools import lru_cache

from ..errors import InvalidParameterError, offers_option, option_name
from .powers import MAX_RADIUS, Q_HAT_BITS, powers, q_hat_numerator

TELEPORT_TARGET = Fraction(1, 10**6)


def teleport_bound(epsilon: Decimal, radius: int, min_prior: int, total_prior: int) -> Fraction:
    """Graph-wide upper bound on the teleport probability at this radius (exact)."""
    p = powers(epsilon, radius)
    outside = total_prior - min_prior
    return Fraction(p[radius] * outside, p[0] * min_prior + p[radius] * outside)


def round_up(x: Fraction, digits: int = 3) -> tuple[int, int]:
    """``(mantissa, exponent)`` with ``mantissa`` of exactly ``digits`` digits and
    ``mantissa * 10^(exponent - digits + 1)`` the smallest such number at or above ``x > 0``
    (exact: a printed bound must never be below the bound)."""
    exponent = len(str(x.numerator)) - len(str(x.denominator))  # within one of log10(x)
    while Fraction(10) ** exponent > x:
        exponent -= 1
    while Fraction(10) ** (exponent + 1) <= x:
        exponent += 1
    scaled = x * Fraction(10) ** (digits - 1 - exponent)
    mantissa = -(-scaled.numerator // scaled.denominator)  # ceiling
    if mantissa == 10**digits:
        mantissa, exponent = 10 ** (digits - 1), exponent + 1
    return mantissa, exponent


def bound_text(bound: Fraction | str, digits: int = 3) -> str:
    """A positive bound (a Fraction, or its ``"numerator/denominator"`` text) in scientific
    notation rounded *up* to ``digits`` significant digits (``round_up``): "at most 8.80e-07"
    must not print less than the bound, as a float's "%.3g" can."""
    x = Fraction(bound)
    if x <= 0:
        return "0"
    mantissa, exponent = round_up(x, digits)
    text = str(mantissa)
    return f"{text[0]}.{text[1:]}e{exponent:+03d}" if digits > 1 else f"{text}e{exponent:+03d}"


def _lower_bound_exceeds_target(a: int, radius: int, min_prior: int, outside: int) -> bool:
    """True if even q_hat**R (<= P_R / P_0) leaves the bound above the target.

    The bound is increasing in P_R / P_0 >= q_hat**R, so this proves every radius <= R misses.
    """
    num = a**radius * outside
    den = (min_prior << (Q_HAT_BITS * radius)) + num
    # num / den > 1 / 10**6, cross-multiplied: Fraction would spend its time on gcds.
    return bool(num * TELEPORT_TARGET.denominator > den * TELEPORT_TARGET.numerator)


class NoDefaultRadiusError(InvalidParameterError):
    """No radius up to :data:`MAX_RADIUS` meets the teleport target at this epsilon on this
    graph (a tiny epsilon, or a very uneven prior): the advice names only options the
    caller has (``errors.offers_option``)."""

    def __init__(self, message: str | None = None) -> None:
        if message is not None:  # (a caller's own words: calibrate's)
            super().__init__(message)
            return
        epsilon = option_name("epsilon")
        advice = (
            f"give {option_name('radius')} too, or a larger {epsilon}"
            if offers_option("radius")
            else f"give a larger {epsilon}"
        )
        super().__init__(
            f"{epsilon} is too small for a default radius within {MAX_RADIUS} hops; {advice}"
        )


@lru_cache(maxsize=256)
def default_radius(epsilon: Decimal, min_prior: int, total_prior: int) -> int:
    """Smallest R >= 1 whose teleport bound is at most 1e-6 (docs/spec.md, "Radius").

    The search only needs a starting point below the answer.  A decimal estimate of
    ln(M / (m * 1e-6)) / (epsilon / 2) gives one; the exact lower bound then proves that every
    radius up to the start misses the target (or the start is lowered by bisection), and the
    exact bound is evaluated upwards from there.  The estimate affects speed, never the result.
    """
    outside = total_prior - min_prior
    if outside == 0:
        return 1  # a one-node graph (or all mass in one node): nothing to teleport to
    a = q_hat_numerator(Decimal(epsilon))
    ctx = Context(prec=40)
    ratio = ctx.divide(ctx.multiply(Decimal(outside), Decimal(10**6)), Decimal(min_prior))
    estimate = ctx.divide(ctx.ln(ratio), ctx.divide(Decimal(epsilon), 2))
    start = min(max(int(estimate) - 3, 0), MAX_RADIUS)
    if start == MAX_RADIUS:
        raise NoDefaultRadiusError()
    lo = start
    if lo and not _lower_bound_exceeds_target(a, lo, min_prior, outside):
        lo = 0  # the estimate overshot; find the last radius the lower bound rules out
        hi = start
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _lower_bound_exceeds_target(a, mid, min_prior, outside):
                lo = mid
            else:
                hi = mid
    radius = lo + 1
    while teleport_bound(epsilon, radius, min_prior, total_prior) > TELEPORT_TARGET:
        radius += 1
        if radius > MAX_RADIUS:
            raise NoDefaultRadiusError()
    return radius
