"""The canonical string form of a subject identifier.

The identifier is hashed into the keyed stream, so one person must map to one string whatever
file carried them: the integer 42 from Parquet and the text " 42" from CSV both become ``"42"``.
Rules (docs/spec.md, "Subject identifiers"):

* integers (including numpy integers, and floats that hold an exact integer below 2^53, as
  pandas makes of an integer column with gaps) become their decimal text;
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


def canonical_subject_id(value: object) -> str:
    """Canonical identifier text; raises ``ValueError`` (without echoing the value)."""
    if isinstance(value, bool) or value is None:
        raise ValueError("missing or boolean identifier")
    if getattr(getattr(value, "dtype", None), "kind", None) in ("m", "M"):
        # numpy files a timedelta64 under its integers; it is a duration, not an integer.
        raise ValueError("identifier is a date, time or duration")
    if isinstance(value, numbers.Integral):
        try:
            return str(int(value))
        except ValueError:  # past Python's limit on digits (sys.set_int_max_str_digits)
            raise ValueError("identifier is an integer of too many digits to write") from None
        except TypeError:  # an Integral that int() refuses
            raise ValueError("identifier has an unsupported type") from None
    if isinstance(value, numbers.Real):
        try:
            as_float = float(value)
        except OverflowError:  # (a Fraction): past any float, so never exact as one
            raise ValueError(
                "identifier is a floating-point number too large to be exact"
            ) from None
        if math.isnan(as_float):
            raise ValueError("missing identifier")
        if not math.isfinite(as_float) or as_float != math.floor(as_float):
            raise ValueError("identifier is a non-integral number")
        if abs(as_float) >= 2**53:
            # Above 2^53 a float no longer holds every integer: two people could merge.
            raise ValueError("identifier is a floating-point number too large to be exact")
        return str(int(as_float))
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # The codec's own message quotes the offending character: never pass it on.
            raise ValueError(
                "identifier is not valid Unicode text (it holds a lone surrogate)"
            ) from None
        text = unicodedata.normalize("NFC", value).strip()
        if not text:
            raise ValueError("blank identifier")
        return text
    raise ValueError("identifier has an unsupported type")
