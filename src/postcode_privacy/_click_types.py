"""Number options read as plain ASCII digits, as ``--epsilon`` is.

click's number types call ``int()`` and ``float()``, which also take ``1_0`` (ten) and digits
of other scripts (``٣``, ``３``): ``--radius ٣`` was radius 3, where ``--epsilon ٣`` is
refused, and a typo such as ``1_00`` must not silently mean something else.
"""

from __future__ import annotations

import math
import re

import click

from .errors import InvalidParameterError
from .mechanism.epsilon import decimal_from_text

__all__ = ["PlainDecimals", "WholeNumbers"]

_WHOLE_NUMBER = re.compile(r"\s*[+-]?[0-9]+\s*\Z", re.ASCII)


class WholeNumbers(click.IntRange):
    """click's IntRange (no bounds unless given), taking only ASCII digits, once signed, and
    saying its range in words ("at least 1") where click says ``x>=1``."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not _WHOLE_NUMBER.match(value):
            self.fail(f"{value!r} is not a whole number (digits 0 to 9 only).", param, ctx)
        number = click.INT.convert(value, param, ctx)
        if (self.min is not None and number < self.min) or (
            self.max is not None and number > self.max
        ):
            self.fail(f"{number} is out of range: it must be {self._describe_range()}.", param, ctx)
        return number

    def _describe_range(self) -> str:
        # (unbounded, it says nothing in --help; click's own would print "x<=None")
        if self.min is None and self.max is None:
            return ""
        if self.max is None:
            return f"at least {_number_text(self.min)}"
        if self.min is None:
            return f"at most {_number_text(self.max)}"
        return f"from {_number_text(self.min)} to {_number_text(self.max)}"


def _number_text(n: float | None) -> str:
    whole = int(n or 0)
    return "2^63 - 1" if whole == 2**63 - 1 else f"{whole:,}"


class PlainDecimals(click.FloatRange):
    """click's FloatRange, taking only plain ASCII decimal text ("2.5", "1e-3"), read by the
    rules of ``--epsilon`` (``decimal_from_text``), and never nan or infinity (nan compares
    false with every bound; "1e400" was called "inf")."""

    def convert(self, value, param, ctx):
        if not isinstance(value, str):  # (the default, a float already)
            return super().convert(value, param, ctx)
        try:
            number = float(decimal_from_text(value, "it", "2.5"))
        except InvalidParameterError as exc:
            self.fail(f"{exc}.", param, ctx)
        if not math.isfinite(number):  # (as text: "1e400", not "inf")
            self.fail(f"{value.strip()} is out of range: it must be {self._describe_range()}.",
                      param, ctx)  # fmt: skip
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        """The range in words ("above 0 and at most 10,000"), where click says 0<x<=10000.0."""
        low = (
            None if self.min is None else f"{'above' if self.min_open else 'at least'} {self.min:g}"
        )
        high = (
            None if self.max is None else f"{'below' if self.max_open else 'at most'} {self.max:,g}"
        )
        return " and ".join(part for part in (low, high) if part)
