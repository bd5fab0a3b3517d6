"""Probabilities and ratios as text, never rounded to an untrue extreme.

A data protection officer reads "100.0%" as "always" and "0" as "never": a figure that is not
exactly 1 (or 0) must not print as one, whatever the rounding.  Every value may be given
exactly (a Fraction, or ``fraction_json``'s dict) or as a float; a float is taken as the exact
value it holds.  Near an extreme the text says on which side the figure lies ("more than
99.9%", "less than 0.1%"), which stays true.  A range is rounded outward (its lower bound
down, its upper bound up), so that the stated range holds the exact one.
"""

from __future__ import annotations

import math
from decimal import Context, Decimal, localcontext
from fractions import Fraction

from markupsafe import Markup, escape

__all__ = ["exact_value", "percent", "percent_range", "number"]


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


def percent_range(
    low: float | Fraction | dict | None, high: float | Fraction | dict | None, decimals: int = 1
) -> str:
    """A range of probabilities as percentages, rounded outward: "2.5% to 2.7%" for
    [0.0251, 0.0262], so that the stated range holds every value of the exact one, whatever
    the rounding.  Equal bounds are one value (:func:`percent`).  A bound that would round
    to 0% or 100% without being exactly so prints as :func:`percent` prints it ("less than
    0.1%", "more than 99.9%"), which stays true."""
    if low is None or high is None:
        return "n/a"
    lo, hi = exact_value(low), exact_value(high)
    if lo == hi:
        return percent(lo, decimals)
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


def number(value: float | Fraction | dict | None, digits: int = 3) -> Markup:
    """A probability or ratio as readable text: 0.0123, 1.23 x 10^-7, 12,345.

    Rounded to ``digits`` significant digits, except that a value below 1 never prints as "1"
    ("more than 0.999" instead), and an exact value too small for a float still prints as
    itself (never as 0)."""
    if value is None:
        return Markup("more than 10<sup>308</sup>")
    x = exact_value(value)
    if x == 0:
        return Markup("0")
    f = float(x) if abs(x) < 10**300 else float("inf")
    if f == 0 or f in (float("inf"), float("-inf")):  # beyond a float: decimal, exactly
        # enough digits that the final rounding is the only one, and not the ambient context,
        # which a caller may have narrowed or given another rounding
        with localcontext(Context(prec=digits + 30)):
            mantissa, exponent = f"{Decimal(x.numerator) / x.denominator:.{digits - 1}e}".split("e")
        return Markup(f"{escape(mantissa)} &times; 10<sup>{int(exponent)}</sup>")
    if abs(f) >= 1e6 or abs(f) < 1e-3:
        mantissa, exponent = f"{f:.{digits - 1}e}".split("e")
        return Markup(f"{escape(mantissa)} &times; 10<sup>{int(exponent)}</sup>")
    text = f"{f:.{digits}g}"
    if abs(f) >= 1000 or "e" in text:  # 999.7 would print as "1e+03"
        return Markup(f"{f:,.0f}")
    if 0 < x < 1 and float(text) >= 1:  # 0.9996 would print as "1"
        return Markup("more than 0." + "9" * digits)
    return Markup(escape(text))
