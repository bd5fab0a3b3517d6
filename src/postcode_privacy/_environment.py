"""``SOURCE_DATE_EPOCH``: the time a reproducible build (or report) claims to have been made.

The reproducible-builds convention (https://reproducible-builds.org/specs/source-date-epoch/)
makes it a decimal integer of seconds since 1970-01-01 UTC, as ``date +%s`` prints it, and asks
that a malformed value stop the build rather than be ignored.  Here it sets the date a report
says it was generated and a release's manifest its ``created`` time, and only ``report``, a
release (``perturb``, its dry run, ``demo``, ``release_file``) read it, before any work: every
other command, ``--help`` and ``keygen`` among them, runs whatever it holds.

numpy reads the same variable with ``int()`` when scipy is first imported (``numpy.f2py``
stamps the files it generates with it), so a malformed value would surface there as a
baffling error far from its cause (numba imports scipy when it compiles): the package calls
:func:`before_importing_scipy` when it is imported, so that scipy loads regardless.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys

from .errors import InvalidParameterError

__all__ = ["SOURCE_DATE_EPOCH", "before_importing_scipy", "source_date_epoch"]

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


def before_importing_scipy() -> None:
    """Call before importing scipy: a ``$SOURCE_DATE_EPOCH`` that ``int()`` cannot read
    (which ``report`` and a release's manifest use, and refuse) would otherwise stop the import
    with numpy's ValueError.  numpy.f2py, which scipy imports and which reads the variable
    once, for the date it stamps on the Fortran wrappers it generates (none here), is imported
    with the variable hidden; it is put back at once."""
    text = os.environ.get(SOURCE_DATE_EPOCH)
    if text is None or "numpy.f2py" in sys.modules:
        return
    try:
        int(text)
        return
    except ValueError:
        pass
    del os.environ[SOURCE_DATE_EPOCH]
    try:
        import numpy.f2py  # noqa: F401
    finally:
        os.environ[SOURCE_DATE_EPOCH] = text
