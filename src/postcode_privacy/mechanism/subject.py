"""The canonical string form of a subject identifier.

The identifier is hashed into the keyed stream, so one person must map to one string whatever
file carried them: the integer 42 from Parquet and the text " 42" from CSV both become ``"42"``.
Rules (docs/spec.md, "Subject identifiers"):

* integers (including numpy integers, decimals of scale 0, as a Parquet ``decimal(20, 0)``
  column or Spark's reading of an unsigned 64-bit one holds, and floats that hold an exact
  integer below 2^53, as pandas makes of an integer column with gaps, judged exactly: a
  Fraction or a long double that is not an integer is refused, never rounded to one) become
  their decimal text; a subclass of int or str is read as the plain value it holds;
* text is Unicode NFC-normalised and stripped of surrounding whitespace; text that cannot be
  encoded as UTF-8 (a lone surrogate, as a file name decoded with ``surrogateescape`` may hold)
  is refused;
* anything else (booleans, bytes, non-integral floats, dates, times and durations, missing
  values) is refused, and so is text that is empty once stripped.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from decimal import Decimal

from ..errors import SubjectIdError


def canonical_subject_id(value: object) -> str:
    """Canonical identifier text; raises :class:`SubjectIdError` (an
    ``InvalidParameterError``, without echoing the value)."""
    if type(value).__name__ in ("NAType", "NaTType"):
        # pandas' missing-value scalars (pd.NA, pd.NaT), known by name: the core imports no
        # pandas, and their own comparisons raise.
        raise SubjectIdError("missing identifier")
    try:
        return _canonical(value)
    except SubjectIdError:
        raise
    except Exception:
        # Whatever an odd type's own methods raise (its words may quote the value).
        raise SubjectIdError("identifier has an unsupported type") from None


def _canonical(value: object) -> str:
    if isinstance(value, bool) or value is None:
        raise SubjectIdError("missing or boolean identifier")
    if getattr(getattr(value, "dtype", None), "kind", None) in ("m", "M"):
        # numpy files a timedelta64 under its integers; it is a duration, not an integer.
        raise SubjectIdError("identifier is a date, time or duration")
    # A subclass of int or str is read as the plain value it holds: its own methods (an
    # overridden strip, __int__ or __str__) neither decide the canonical form nor raise here.
    if isinstance(value, int):
        value = int.__int__(value)
    elif isinstance(value, str):
        value = str.__str__(value)
    if isinstance(value, numbers.Integral):
        try:
            return str(int(value))
        except ValueError:  # past Python's limit on digits (sys.set_int_max_str_digits)
            raise SubjectIdError("identifier is an integer of too many digits to write") from None
    if isinstance(value, Decimal):
        return _decimal_text(value)
    if isinstance(value, numbers.Real):
        try:
            as_float = float(value)
        except OverflowError:  # (a Fraction): past any float, so never exact as one
            raise SubjectIdError(
                "identifier is a floating-point number too large to be exact"
            ) from None
        if math.isnan(as_float):
            raise SubjectIdError("missing identifier")
        if not math.isfinite(as_float):
            raise SubjectIdError("identifier is a non-integral number")
        if abs(as_float) >= _every_integer_below(value):
            # Above 2^53 a float no longer holds every integer (2^24 for a 32-bit float, 2^11
            # for a 16-bit one): two people could merge.
            raise SubjectIdError("identifier is a floating-point number too large to be exact")
        # Exact comparisons: float() rounds a Fraction or a long double (1 + 2^-60 became 1),
        # and two people must not merge by rounding.
        if value != as_float or as_float != math.floor(as_float):
            raise SubjectIdError("identifier is a non-integral number")
        return str(int(as_float))
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # The codec's own message quotes the offending character: never pass it on.
            raise SubjectIdError(
                "identifier is not valid Unicode text (it holds a lone surrogate)"
            ) from None
        if not value.isascii() and holds_unassigned(value):
            raise SubjectIdError(
                "identifier holds a code point this Python's Unicode version "
                f"({unicodedata.unidata_version}) leaves unassigned, whose canonical form a "
                "later version could change"
            )
        text = unicodedata.normalize("NFC", value).strip()
        if not text:
            raise SubjectIdError("blank identifier")
        return text
    raise SubjectIdError("identifier has an unsupported type")


def _every_integer_below(value: object) -> int:
    """2^p for a binary float of p significant bits: below it the float's type holds every
    integer.  A numpy float says its width (``dtype``); a Python float is 64 bits."""
    dtype = getattr(value, "dtype", None)
    if getattr(dtype, "kind", None) == "f":
        width = int(getattr(dtype, "itemsize", 8))
        return 1 << {2: 11, 4: 24}.get(width, 53)
    return 2**53


def holds_unassigned(text: str) -> bool:
    """Whether ``text`` holds a code point the running Python's Unicode database leaves
    unassigned (category Cn, noncharacters included).

    Why refuse them: Unicode's normalisation stability policy guarantees that text made only of
    characters assigned in a version has the same NFC form under that version and every later
    one, so two Pythons with different Unicode versions (3.11 has 14.0, 3.12 has 15.0) give an
    identifier of assigned characters one canonical form.  An unassigned code point carries no
    such promise: U+1E08F is inert in 14.0 and a combining mark in 15.0, so NFC reorders it on
    one and not the other, and one person would become two subjects (docs/spec.md, "Subject
    identifiers")."""
    category = unicodedata.category
    return any(category(c) == "Cn" for c in set(text) if not c.isascii())


def _decimal_text(value: Decimal) -> str:
    """A decimal of scale 0 (a Parquet ``decimal(20, 0)`` value, Spark's reading of an unsigned
    64-bit one) as the text of the integer it holds, exactly as that integer's.  A decimal with
    digits after its point is refused even when they are zeros: the CSV text of ``1.00`` is
    ``"1.00"``, so taking it for the subject 1 would make one person two subjects across the
    formats a release is written in and read back from."""
    value = Decimal(value)  # a subclass's exact value, without its own methods
    if value.is_nan():
        raise SubjectIdError("missing identifier")
    if value.is_infinite():
        raise SubjectIdError("identifier is a non-integral number")
    exponent = value.as_tuple().exponent
    if exponent != 0:
        raise SubjectIdError(
            "identifier is a decimal whose scale is not 0 (it has digits after its point, or "
            "an exponent): store whole-number identifiers as integers or decimal(p, 0)"
        )
    try:
        return str(int(value))
    except ValueError:  # past Python's limit on digits, as for an integer
        raise SubjectIdError("identifier is an integer of too many digits to write") from None
