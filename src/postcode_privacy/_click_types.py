"""Whole-number options read as plain ASCII digits, as ``--epsilon`` is.

click's integer types call ``int()``, which also takes ``1_0`` (ten) and digits of other
scripts (``٣``, ``３``): ``--radius ٣`` was radius 3, where ``--epsilon ٣`` is refused, and a
typo such as ``1_00`` must not silently mean something else.
"""

from __future__ import annotations

import re

import click

__all__ = ["WholeNumbers"]

_WHOLE_NUMBER = re.compile(r"\s*[+-]?[0-9]+\s*\Z", re.ASCII)


class WholeNumbers(click.IntRange):
    """click's IntRange (no bounds unless given), taking only ASCII digits, once signed."""

    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not _WHOLE_NUMBER.match(value):
            self.fail(f"{value!r} is not a whole number in the digits 0 to 9.", param, ctx)
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        # (unbounded, it says nothing in --help; click's own would print "x<=None")
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()
