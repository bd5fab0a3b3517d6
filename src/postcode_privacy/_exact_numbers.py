"""Exact values as text and as floats, never rounded to an untrue figure.

A data protection officer reads "100.0%" as "always" and "0" as "never": a figure that is not
exactly 1 (or 0) must not print as one, whatever the rounding.  Every value may be given
exactly (a Fraction, or ``fraction_json``'s dict) or as a float; a float is taken as the exact
value it holds.  Near an extreme the text says on which side the figure lies ("more than
99.9%", "less than 0.1%"), which stays true.  A range is rounded outward (its lower bound
down, its upper bound up), so that the stated range holds the exact one; a risk given as one
figure (the chance of naming a postcode, or of its coming back unchanged) is rounded up, so
that the page never states less risk than there is; and the float a JSON file gives for a
bound is never on the wrong side of it.  Shared by the release's manifest, ``evaluate`` and
the report (docs/choosing-epsilon.md).
"""

from __future__ import annotations

import math
from fractions import Fraction

from .mechanism.radius import round_up

__all__ = [
    "exact_value",
    "float_above",
    "float_below",
    "honest_float",
    "percent",
    "percent_range",
    "risk_percent",
    "significant_up",
]


def exact_value(value: float | Fraction | dict) -> Fraction:
    """The exact value of a float, a Fraction, or ``fraction_json``'s dict."""
    if isinstance(value, dict):
        return Fraction(int(value["numerator"]), int(value["denominator"]))
    return Fraction(value)


def percent(value: float | Fraction | dict | None, decimals: int = 1) -> str:
    """A probability as a percentage with ``decimals`` decimals: "2.6%".

    Exactly 0 and exactly 1 print as "0.0%" and "100.0%"; any other value that would round to
    one of them (or to nothing at all) prints as "less than 0.1%" or "more than 99.9%"."""
    if value is None:
        return "n/a"
    x = exact_value(value)
    step = Fraction(1, 100 * 10**decimals)  # the smallest share printed: 0.1% at one decimal
    if x <= 0 or x >= 1:  # the extremes, exactly (or a float's rounding beyond them)
        return f"{(0 if x <= 0 else 100):.{decimals}f}%"
    if x < step:
        return f"less than {float(100 * step):.{decimals}f}%"
    if x > 1 - step:
        return f"more than {float(100 - 100 * step):.{decimals}f}%"
    # step <= x <= 1 - step: rounding to ``decimals`` decimals cannot reach 0% or 100%
    return _steps_text(round(x / step), decimals)  # exact, half to even


def risk_percent(value: float | Fraction | dict | None, decimals: int = 1) -> str:
    """A risk (a probability that tells an attacker something) as a percentage rounded *up*
    to ``decimals`` decimals: "9.4%" for 0.093103, never the nearer "9.3%", which would state
    less risk than there is.  As :func:`percent`, only an exact 0 or 1 prints as "0.0%" or
    "100.0%"; a risk below the smallest step prints as "less than 0.1%", one that would round
    up to 100% as "more than 99.9%".  Give it the exact value: a float's own rounding error
    can carry it one step up (0.1 is a little more than 1/10)."""
    if value is None:
        return "n/a"
    x = exact_value(value)
    if 0 < x < Fraction(1, 100 * 10**decimals):
        return percent(x, decimals)  # "less than 0.1%": true, where "0.1%" would overstate
    return _bound(x, decimals, math.ceil)


def percent_range(
    low: float | Fraction | dict | None, high: float | Fraction | dict | None, decimals: int = 1
) -> str:
    """A range of risks as percentages, rounded outward: "2.5% to 2.7%" for [0.0251, 0.0262],
    so that the stated range holds every value of the exact one, whatever the rounding.
    Equal bounds are one risk, rounded up (:func:`risk_percent`).  A bound that would round
    to 0% or 100% without being exactly so prints as :func:`percent` prints it ("less than
    0.1%", "more than 99.9%"), which stays true."""
    if low is None or high is None:
        return "n/a"
    lo, hi = exact_value(low), exact_value(high)
    if lo == hi:
        return risk_percent(lo, decimals)
    return f"{_bound(lo, decimals, math.floor)} to {_bound(hi, decimals, math.ceil)}"


def _bound(x: Fraction, decimals: int, rounding) -> str:
    scale = 100 * 10**decimals  # steps of 0.1% at one decimal
    steps = rounding(x * scale)  # exact: x is a Fraction
    if x <= 0 or x >= 1 or not 0 < steps < scale:
        return percent(x, decimals)  # an exact extreme, or one it would round to untruly
    return _steps_text(steps, decimals)


def _steps_text(steps: int, decimals: int) -> str:
    """``steps`` steps of 10^-``decimals`` percent as text: 26 at one decimal is "2.6%"."""
    whole, part = divmod(steps, 10**decimals)
    return f"{whole}.{part:0{decimals}d}%" if decimals else f"{whole}%"


def honest_float(x: Fraction) -> float:
    """``float(x)``, except that it is 0.0 or 1.0 only when ``x`` is exactly 0 or 1: a
    probability nearer to either than a float can tell apart moves one float step inside, so
    that no reader (nor a formatter) takes 1 - 10^-20 for "always" or 10^-400 for "never"."""
    f = float(x)
    if f == 0.0 and x != 0:
        return math.nextafter(0.0, 1.0 if x > 0 else -1.0)
    if f == 1.0 and x != 1:
        return math.nextafter(1.0, 0.0 if x < 1 else 2.0)
    return f


def float_below(x: Fraction) -> float:
    """The largest float at most ``x``: a range's lower bound, so that the stated range holds
    the exact value (docs/choosing-epsilon.md).  Unlike :func:`honest_float` it may be 0.0 for
    a positive ``x`` (below the smallest float, 5e-324): a bound must hold before it reads well,
    and the range's text says "less than 0.1%" where it matters."""
    f = float(x)  # correctly rounded: within half a step of x
    if Fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


def float_above(x: Fraction) -> float:
    """The smallest float at least ``x``: a range's upper bound (:func:`float_below`).  It may
    be 1.0 for an ``x`` just below 1 (1 - 10^-20): a float below 1 would cut the exact value
    out of the range; the text says "more than 99.9%"."""
    f = float(x)
    if Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def significant_up(x: Fraction, digits: int = 4) -> str:
    """``x`` (a probability, 0 ≤ x ≤ 1) rounded up to ``digits`` significant digits, as
    decimal text ("0.02544" for 0.0254341…), computed from the exact value: a risk shown to a
    few digits is never below the risk (calibrate printed 0.02543, rounded to nearest, beside
    a target of 0.025434 it had just said was not met: a hostile review).  A value below 1
    that would round up to 1 is "more than 0.9999", never "1"."""
    if x <= 0:
        return "0"
    mantissa, e = round_up(x, digits)  # (the bounds' own rounding, as ``bound_text``'s)
    if x < 1 and e >= 0:
        return "more than 0." + "9" * digits
    if e < -4:  # as Python's "g" format writes it: 2.544e-05
        return f"{_decimal_text(mantissa, digits - 1)}e-{-e:02d}"
    return _decimal_text(mantissa, digits - 1 - e)


def _decimal_text(mantissa: int, shift: int) -> str:
    """mantissa / 10^shift as plain decimal text, without trailing zeros after the point."""
    if shift <= 0:
        return str(mantissa * 10**-shift)
    digits = str(mantissa).rjust(shift + 1, "0")
    whole, part = digits[:-shift], digits[-shift:].rstrip("0")
    return f"{whole}.{part}" if part else whole
