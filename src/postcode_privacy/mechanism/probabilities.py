"""A readable form for the exact output distribution K(x) returned by ``Mechanism.probabilities``.

The values stay exact :class:`~fractions.Fraction` objects (the result *is* a list of them, in
graph order, so code that indexes, sums or zips it keeps working); only the printed form is new:
a table of postcode, hop distance and probability as a decimal, most likely outputs first.
Decimals are produced from the exact fractions in an explicit decimal context, never via float.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable
from fractions import Fraction
from typing import NamedTuple

_SHOWN = 10  # rows printed by repr(); the rest are summarised in one line
_DIGITS = decimal.Context(prec=6, rounding=decimal.ROUND_HALF_EVEN)


def decimal_text(value: Fraction) -> str:
    """``value`` to six significant digits, e.g. ``0.349927`` or ``1.23457E-9``."""
    quotient = _DIGITS.divide(decimal.Decimal(value.numerator), decimal.Decimal(value.denominator))
    return str(quotient)


class OutputProbability(NamedTuple):
    """One possible output: its postcode, its hop distance min(d, R) from x, and K(x)(y)."""

    postcode: str
    hops: int
    probability: Fraction

    def __str__(self) -> str:
        return f"{self.postcode}  {self.hops} hops  {decimal_text(self.probability)}"


class Probabilities(list[Fraction]):
    """K(x)(y) for every node y of the graph, in graph order, as exact fractions.

    ``.exact`` is the plain list of fractions; ``.rows()`` pairs each with its postcode and hop
    distance; ``repr``/``str`` print the most likely outputs as decimals.
    """

    def __init__(
        self, source: str, values: list[Fraction], labels: Iterable[str], hops: Iterable[int]
    ) -> None:
        super().__init__(values)
        self.source = source
        self._labels = list(labels)
        self._hops = [int(h) for h in hops]

    @property
    def exact(self) -> list[Fraction]:
        return list(self)

    def rows(self) -> list[OutputProbability]:
        """Every output (postcode, hops, exact probability), most likely first (ties: graph order)."""
        order = sorted(range(len(self)), key=lambda i: (-self[i], i))
        return [OutputProbability(self._labels[i], self._hops[i], self[i]) for i in order]

    def __repr__(self) -> str:
        rows = self.rows()
        width = max((len(r.postcode) for r in rows[:_SHOWN]), default=8)
        lines = [
            f"Probabilities of releasing {self.source} as each postcode "
            f"({len(rows)} postcodes; exact values in .exact):",
            f"  {'postcode':<{width}}  hops  probability",
        ]
        lines += [
            f"  {r.postcode:<{width}}  {r.hops:>4}  {decimal_text(r.probability)}"
            for r in rows[:_SHOWN]
        ]
        if len(rows) > _SHOWN:
            rest = sum((r.probability for r in rows[_SHOWN:]), Fraction(0))
            lines.append(f"  ... {len(rows) - _SHOWN} more, together {decimal_text(rest)}")
        return "\n".join(lines)

    __str__ = __repr__
