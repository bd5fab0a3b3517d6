"""Exact integer powers P_0 ... P_R standing in for 2^s * q^h, with q = exp(-epsilon/2).

Proof obligation (docs/methods.md, "Rounding that cannot weaken the bound"): the guarantee holds
for every graph and prior if and only if P_{j+h} >= q^h * P_j for all j, h.  We discharge it by
construction: q_hat >= q is a dyadic rational, and P_{j+1} = ceil(q_hat * P_j), so each step
satisfies P_{j+1} >= q_hat * P_j >= q * P_j and the general case follows by induction.  All
errors are one-sided: the weights decay slightly more slowly than the ideal ones.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction
from functools import lru_cache

from ..errors import InvalidParameterError
from .epsilon import EXACT

Q_HAT_BITS = 256  # q_hat = numerator / 2**Q_HAT_BITS
DECIMAL_DIGITS = 60  # precision of the decimal exponential q_hat is rounded up from
TAIL_BITS = 80  # P_R >= 2**TAIL_BITS: the smallest power keeps at least 80 significant bits
MAX_RADIUS = 10_000
# Keeps P_0 below about 2^13,800 bits: bounded memory, and every exact fraction a release,
# evaluation or report writes (the teleport bound, with a prior of up to 2^63) under Python's
# default limit of 4,300 digits for an integer's text.  At 20,000 they passed it (a traceback).
MAX_EPSILON_TIMES_RADIUS = 19_000


def exp_lower_bound(x: Fraction, rel_error_exponent: int = 120) -> Fraction:
    """A rational L with exp(x) * (1 - 10**-rel_error_exponent) <= L <= exp(x), for x >= 0."""
    if x < 0:
        raise ValueError("x must be non-negative")
    # Add terms until the next one is below the target relative error (the tail is then tiny,
    # since terms decrease geometrically once k > 2x).
    total, term, k = Fraction(1), Fraction(1), 0
    limit = Fraction(1, 10**rel_error_exponent)
    while True:
        k += 1
        term = term * x / k
        total += term
        if k > 2 * x + 1 and term < limit * total:
            return total


@lru_cache(maxsize=256)
def q_hat_numerator(epsilon: Decimal) -> int:
    """Numerator a of q_hat = a / 2**256, with q_hat >= exp(-epsilon/2), proved exactly.

    The decimal exponential is correctly rounded to 60 digits (round-half-even), so adding one
    unit in its last place gives an upper bound; rounding that up to a multiple of 2**-256 keeps
    it one.  The bound is then confirmed without trusting the decimal module: exp(epsilon/2) >= L
    for a Taylor partial sum L, so q_hat * L >= 1 implies q_hat >= exp(-epsilon/2).
    """
    ctx = Context(prec=DECIMAL_DIGITS, rounding=ROUND_HALF_EVEN, Emin=-(10**6), Emax=10**6)
    # Exact in an explicit 100-digit context (epsilon has at most 30 digits); the ambient
    # context must never round it.
    half = EXACT.divide(Decimal(epsilon), 2)
    nearest = ctx.exp(half.copy_negate())
    ulp = Decimal((0, (1,), nearest.adjusted() - DECIMAL_DIGITS + 1))
    upper = Fraction(nearest) + Fraction(ulp)
    numerator = -((-upper.numerator << Q_HAT_BITS) // upper.denominator)  # ceiling
    lower_exp = exp_lower_bound(Fraction(half))
    if Fraction(numerator, 2**Q_HAT_BITS) * lower_exp < 1:
        raise ArithmeticError("q_hat is not an upper bound on exp(-epsilon/2)")
    if numerator >= 2**Q_HAT_BITS:  # P must strictly decrease; epsilon >= 0.0001 guarantees it
        raise InvalidParameterError("epsilon is too small for the integer powers")
    return numerator


def _sequence(a: int, scale: int, radius: int) -> list[int]:
    """P_0 = 2**scale, P_{j+1} = ceil(a * P_j / 2**256)."""
    powers = [1 << scale]
    for _ in range(radius):
        powers.append(-((-a * powers[-1]) >> Q_HAT_BITS))
    return powers


@lru_cache(maxsize=256)
def _powers_cached(epsilon: Decimal, radius: int) -> tuple[int, ...]:
    a = q_hat_numerator(epsilon)
    target = 1 << TAIL_BITS
    # Start below the answer using the exact lower bound P_R >= 2**s * q_hat**R, then take the
    # smallest s whose P_R reaches 2**80 (P_R is non-decreasing in s).
    decay_bits = (
        (2 ** (Q_HAT_BITS * radius)).bit_length() - (a**radius).bit_length() if radius else 0
    )
    scale = max(TAIL_BITS, TAIL_BITS + decay_bits - 2)
    while scale > TAIL_BITS and _sequence(a, scale - 1, radius)[-1] >= target:
        scale -= 1
    powers = _sequence(a, scale, radius)
    while powers[-1] < target:
        scale += 1
        powers = _sequence(a, scale, radius)
    return tuple(powers)


def epsilon_times_radius_too_large(epsilon: Decimal, radius: int) -> bool:
    """Whether ``epsilon * radius`` is past :data:`MAX_EPSILON_TIMES_RADIUS`, exactly: in the
    explicit exact context, as the ambient one (changeable by any caller) could round."""
    return EXACT.multiply(Decimal(epsilon), Decimal(radius)) > MAX_EPSILON_TIMES_RADIUS


def powers(epsilon: Decimal, radius: int) -> tuple[int, ...]:
    """P_0 ... P_radius as exact integers (docs/spec.md, "Powers").

    Postconditions: P_0 = 2**s is the smallest power of two for which P_R >= 2**80, and
    P_{j+1} >= q_hat * P_j >= exp(-epsilon/2) * P_j for every j.
    """
    if not isinstance(radius, int) or isinstance(radius, bool) or not 1 <= radius <= MAX_RADIUS:
        raise InvalidParameterError(f"radius must be an integer from 1 to {MAX_RADIUS}")
    if epsilon_times_radius_too_large(epsilon, radius):
        raise InvalidParameterError(
            f"epsilon times radius above {MAX_EPSILON_TIMES_RADIUS} is not supported"
        )
    return _powers_cached(Decimal(epsilon), radius)


def q_hat(epsilon: Decimal) -> Fraction:
    """q_hat as an exact fraction (``q_hat_numerator`` / 2**256), for checks and tests."""
    return Fraction(q_hat_numerator(Decimal(epsilon)), 2**Q_HAT_BITS)
