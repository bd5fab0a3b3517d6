"""UK postcode normalisation and validation.

Normalisation changes case and whitespace only; nothing is guessed or corrected.  Only ASCII
text is normalised: anything else is refused first, since Unicode case mapping turns some
non-ASCII letters into ASCII ones (``"ß"`` upper-cases to ``"SS"``, the long s ``"ſ"`` to
``"S"``) and would make real postcodes of text that is not one.  The
normalised form is upper case with exactly one space before the three-character inward code,
e.g. ``"sw1a1aa "`` becomes ``"SW1A 1AA"``.  This form is what the graph stores, what the keyed
stream binds, and what every output contains.
"""

from __future__ import annotations

import re

# Outward code: area (1-2 letters), district digit, optional digit or letter.
# Inward code: sector digit and a unit of two letters (never C I K M O V).
_OUTWARD = r"[A-Z]{1,2}[0-9][A-Z0-9]?"
_INWARD = r"[0-9][ABD-HJLNP-UW-Z]{2}"
_POSTCODE = re.compile(rf"^(?:{_OUTWARD}{_INWARD}|GIR0AA)$")  # without spaces
_WHITESPACE = re.compile(r"\s+", re.ASCII)
# The normalised form itself (used with fullmatch, so a trailing newline never matches).
_NORMALISED = re.compile(rf"(?:{_OUTWARD} {_INWARD}|GIR 0AA)")

__all__ = [
    "normalise",
    "is_normalised",
    "is_valid",
    "try_normalise",
    "outward",
    "sector",
    "district",
    "area",
]


def try_normalise(text: object) -> str | None:
    """Return the normalised postcode, or None if ``text`` is not a UK postcode in form."""
    if not isinstance(text, str) or not text.isascii():
        return None
    compact = _WHITESPACE.sub("", text).upper()
    if not _POSTCODE.match(compact):
        return None
    return f"{compact[:-3]} {compact[-3:]}"


def is_normalised(text: str) -> bool:
    """True exactly when ``try_normalise(text) == text``: ``text`` is already a postcode in the
    normalised form (a quick test, for the many inputs that are)."""
    return _NORMALISED.fullmatch(text) is not None


def normalise(text: object) -> str:
    """Normalise a postcode, raising ``ValueError`` (without echoing it) if it is malformed."""
    result = try_normalise(text)
    if result is None:
        raise ValueError("not a UK postcode in form")
    return result


def is_valid(text: object) -> bool:
    """True if ``text`` is a UK postcode in form (after case and whitespace normalisation)."""
    return try_normalise(text) is not None


def outward(postcode: str) -> str:
    """Outward code of a normalised postcode: ``"SW1A 1AA"`` gives ``"SW1A"``."""
    return postcode.split(" ")[0]


def sector(postcode: str) -> str:
    """Postcode sector: ``"SW1A 1AA"`` gives ``"SW1A 1"``."""
    return postcode[:-2]


def district(postcode: str) -> str:
    """Postcode district (same as the outward code)."""
    return outward(postcode)


def area(postcode: str) -> str:
    """Postcode area, the leading letters: ``"SW1A 1AA"`` gives ``"SW"``."""
    out = outward(postcode)
    return out[:2] if out[1].isalpha() else out[:1]
