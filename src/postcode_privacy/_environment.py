"""``SOURCE_DATE_EPOCH``: the time a reproducible build (or report) claims to have been made.

The reproducible-builds convention (https://reproducible-builds.org/specs/source-date-epoch/)
makes it a decimal integer of seconds since 1970-01-01 UTC, as ``date +%s`` prints it, and asks
that a malformed value stop the build rather than be ignored.  Here it sets the date a report
says it was generated.  It is checked by every command before any work, not only by ``report``:
numpy reads the same variable with ``int()`` when scipy is first imported, so a malformed
value would otherwise surface as a baffling error far from its cause.
"""

from __future__ import annotations

import datetime as _dt
import os
import re

from .errors import InvalidParameterError

__all__ = ["SOURCE_DATE_EPOCH", "source_date_epoch"]

SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
_UNIX_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
# The moments a datetime can hold: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z.
_EARLIEST = int((_dt.datetime(1, 1, 1, tzinfo=_dt.UTC) - _UNIX_EPOCH).total_seconds())
_LATEST = int(
    (_dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=_dt.UTC) - _UNIX_EPOCH).total_seconds()
)
_WHOLE_SECONDS = re.compile(r"-?[0-9]+")  # ASCII digits only: no space, sign +, _ or exponent


def source_date_epoch() -> _dt.datetime | None:
    """The moment ``$SOURCE_DATE_EPOCH`` names, in UTC, or None if it is not set.

    Raises InvalidParameterError (naming the variable, never echoing its value) unless it is
    a decimal integer (ASCII digits, an optional minus sign, no spaces, no exponent) of
    seconds from year 1 to year 9999."""
    text = os.environ.get(SOURCE_DATE_EPOCH)
    if text is None:
        return None
    if not _WHOLE_SECONDS.fullmatch(text):
        raise InvalidParameterError(
            f"${SOURCE_DATE_EPOCH} must be a whole number of seconds since 1970-01-01 UTC, "
            "in decimal digits (as `date +%s` prints it); unset it or correct it"
        )
    # (more than 20 digits is out of range, and never handed to int(): it has a digit limit)
    if len(text) > 20 or not _EARLIEST <= int(text) <= _LATEST:
        raise InvalidParameterError(
            f"${SOURCE_DATE_EPOCH} is out of range: it must name a moment from year 1 to year 9999"
        )
    return _UNIX_EPOCH + _dt.timedelta(seconds=int(text))
