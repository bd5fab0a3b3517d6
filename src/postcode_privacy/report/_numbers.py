"""Probabilities and ratios as the report's HTML, never rounded to an untrue extreme
(the plain-text rules, and why: ``_exact_numbers.py``)."""

from __future__ import annotations

from decimal import Context, Decimal, localcontext
from fractions import Fraction

from markupsafe import Markup, escape

from .._exact_numbers import exact_value, percent, percent_range, risk_percent

__all__ = ["exact_value", "percent", "percent_range", "risk_percent", "number"]


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
