"""Epsilon as an exact decimal.

The value the mechanism guarantees is the shortest decimal the user's input denotes: the float
``0.1`` means exactly 1/10 (its shortest round-trip repr), not the binary fraction nearest to it.
That exact value drives the powers, is bound into every keyed draw, and is what reports print
(the rule: docs/spec.md, "Inputs"; the obligation it discharges: docs/methods.md, "Where each
obligation is discharged").
"""

from __future__ import annotations

import numbers
import re
from decimal import Context, Decimal, InvalidOperation
from fractions import Fraction

from ..errors import InvalidParameterError, option_name

MAX_EPSILON = Decimal(100)
MIN_EPSILON = Decimal("0.0001")  # keeps q_hat < 1 with a wide margin, and radii finite
MAX_DIGITS = 30
MAX_TEXT = 1000  # characters of epsilon text; anything longer is refused unread
# Every operation below runs in this explicit context: the thread's ambient decimal context
# (28 digits by default, and changeable by any caller) must never round epsilon.
EXACT = Context(prec=100, Emin=-(10**6), Emax=10**6)
_DECIMAL_TEXT = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE](?P<exponent>[+-]?[0-9]+))?\Z",
    re.ASCII,
)
# Past this exponent Decimal() itself refuses the text (InvalidOperation, a traceback); long
# before it every bound here is passed, so a larger one is read as this one: the value is then
# still far above (or below) every limit and refused for it, in the option's own words.
_LARGEST_EXPONENT = 10**6


class Epsilon(Decimal):
    """An exact positive decimal.  Compares equal to a float whose shortest repr is the same."""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, float):
            try:
                other = Decimal(repr(other))
            except InvalidOperation:
                return False
        return bool(Decimal.__eq__(self, other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = Decimal.__hash__

    @property
    def text(self) -> str:
        """Canonical text: plain notation, no exponent, no trailing zeros (``"0.5"``, ``"2"``)."""
        return canonical_text(self)

    @property
    def fraction(self) -> Fraction:
        return Fraction(self)

    def __repr__(self) -> str:
        return f"Epsilon('{self.text}')"

    def __str__(self) -> str:
        return self.text


def canonical_text(value: Decimal) -> str:
    text = format(Decimal(value).normalize(EXACT), "f")
    return text


def parse_epsilon(value: object) -> Epsilon:
    """Exact epsilon from a float (``numpy.float64`` included), an integer, a str or a Decimal.

    Postcondition: 0.0001 <= result <= 100, finite, at most 30 significant digits, and exactly
    the value given: nothing is rounded, so a value that would need rounding is refused.
    Rejects booleans, NaN, infinities, zero, negatives and text that is not a plain number;
    messages name the option as the user wrote it (``--epsilon`` on the command line).
    """
    name = option_name("epsilon")
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise InvalidParameterError(f"{name} must be a number")
    refuse_other_floats(value, name)
    if isinstance(value, str):
        dec = exact_decimal(value, name, "0.5", MIN_EPSILON, MAX_EPSILON)
        return Epsilon(dec.normalize(EXACT))  # exact: at most 30 digits in a 100-digit context
    if not isinstance(value, (float, numbers.Integral, Decimal)):  # (a Fraction, a complex)
        raise InvalidParameterError(f"{name} must be an int, a float, a Decimal or decimal text")
    try:
        if isinstance(value, float):
            # float.__repr__, not repr(): numpy.float64 is a float whose repr is
            # "np.float64(0.1)"; the shortest round-trip text is the same for both.
            dec = Decimal(float.__repr__(value))
        else:
            dec = Decimal(value if isinstance(value, Decimal) else int(value))
    except (InvalidOperation, ValueError, OverflowError):
        raise InvalidParameterError(f"{name} must be a number") from None
    dec = exact_decimal(dec, name, "0.5", MIN_EPSILON, MAX_EPSILON)
    return Epsilon(dec.normalize(EXACT))  # exact: at most 30 digits in a 100-digit context


def refuse_other_floats(value: object, name: str) -> None:
    """Refuse a binary float other than a 64-bit one (numpy's float16, float32, longdouble)
    with a message saying so: only a 64-bit float is read by its shortest round-trip text
    (docs/spec.md, "Inputs").  ``np.float32(0.1)`` prints as 0.1 but holds
    0.100000001490116…, and no reading of it is the one every user would expect."""
    dtype = getattr(value, "dtype", None)
    # (numpy.float64 is a float, read as one)
    if isinstance(value, numbers.Real) and not isinstance(value, float) and dtype is not None:
        if getattr(dtype, "kind", None) == "f":
            raise InvalidParameterError(
                f"{name} is a numpy {dtype.name}: give it as a Python float, a Decimal or "
                "decimal text"
            )


def exact_decimal(value: object, name: str, example: str, low: Decimal, high: Decimal) -> Decimal:
    """The one set of rules for an exact positive decimal option (``--epsilon``,
    ``--budget``): plain ASCII decimal text (:func:`decimal_from_text`) or a Decimal, finite,
    above zero, from ``low`` to ``high``, at most 30 significant digits, and never rounded
    (a value that would need rounding is refused).  Checked in that order, so each bad
    value always gets the same message."""
    dec = value if isinstance(value, Decimal) else decimal_from_text(value, name, example)
    if not dec.is_finite():
        raise InvalidParameterError(f"{name} must be finite")
    if dec <= 0:
        raise InvalidParameterError(f"{name} must be greater than zero")
    if dec < low:
        raise InvalidParameterError(f"{name} below {canonical_text(low)} is not supported")
    if dec > high:
        raise InvalidParameterError(f"{name} above {canonical_text(high)} is not supported")
    # Count significant digits on the exact value, before anything that could round it.
    if significant_digits(dec) > MAX_DIGITS:
        raise InvalidParameterError(f"{name} may have at most {MAX_DIGITS} significant digits")
    return dec


def decimal_from_text(value: object, name: str, example: str) -> Decimal:
    """The exact Decimal of plain ASCII decimal text (``--epsilon``, ``--budget``), or
    InvalidParameterError naming the option ``name`` with an ``example``.  Decimal() alone
    also takes "1_0" (= 10) and non-ASCII digits, and a typo must not silently multiply the
    privacy loss; text over ``MAX_TEXT`` characters is refused unread."""
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise InvalidParameterError(
            f"{name} is too long ({len(value):,} characters; at most {MAX_TEXT:,}): give a "
            f"plain decimal number such as {example}"
        )
    text = value.strip() if isinstance(value, str) else None
    parts = None if text is None else _DECIMAL_TEXT.match(text)
    if parts is None:
        raise InvalidParameterError(f"{name} must be a plain decimal number such as {example}")
    exponent = int(parts["exponent"] or 0)
    if abs(exponent) > _LARGEST_EXPONENT:
        clamped = _LARGEST_EXPONENT if exponent > 0 else -_LARGEST_EXPONENT
        return Decimal(f"{parts['number']}e{clamped}")
    return Decimal(parts[0])  # exact: the constructor never rounds


def significant_digits(value: Decimal) -> int:
    """Significant digits of a finite decimal, trailing zeros not counted (no rounding)."""
    digits = "".join(map(str, value.as_tuple().digits)).strip("0")
    return max(len(digits), 1)
