"""Cumulative spend: exact sums of epsilon over distinct draws (docs/ledger.md, "Accounting").

A subject's cumulative spend is the sum of epsilon over its distinct draws (basic
composition, docs/threat-model.md: ``n`` independent draws are ``n·ε·d̃``-private, in each
draw's own graph's hops).  For a person who moved it bounds what the draws reveal about where
they lived; not whether they moved, which keyed determinism shows to anyone holding two
releases (docs/ledger.md, "Accounting").  All arithmetic is on :class:`fractions.Fraction`;
no float is ever involved.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fractions import Fraction

from ..mechanism.epsilon import MIN_EPSILON, refuse_other_floats

__all__ = [
    "ZERO",
    "spend_by",
    "distribution",
    "spend_text",
    "parse_budget",
    "budget_from",
    "ReleaseAccount",
    "REPEAT",
    "KNOWN_SUBJECT",
    "NEW_SUBJECT",
]

ZERO = Fraction(0)
MIN_BUDGET = MIN_EPSILON  # the smallest epsilon a release may use
MAX_BUDGET = Decimal(1_000_000)  # ten thousand releases at the largest epsilon
REPEAT, KNOWN_SUBJECT, NEW_SUBJECT = "repeat", "known_subject", "new_subject"


def spend_by(
    rows: Iterable[tuple[bytes, int, int]], epsilon_of: Mapping[int, Fraction]
) -> dict[bytes, Fraction]:
    """Spend per group from ``(group digest, release id, distinct draws)`` rows.

    Precondition: each draw is counted under exactly one release, whose epsilon is the draw's
    (epsilon is one of the draw's conditions, so every release holding it agrees).
    """
    out: dict[bytes, Fraction] = {}
    for group, release, count in rows:
        out[group] = out.get(group, ZERO) + count * epsilon_of[release]
    return out


def distribution(values: Iterable[Fraction]) -> list[tuple[Fraction, int]]:
    """``(spend, number of groups with exactly that spend)``, ascending."""
    return sorted(Counter(values).items())


def spend_text(value: Fraction) -> str:
    """Exact text: a plain decimal when the fraction has one (always, for sums of decimal
    epsilons), otherwise ``n/d``.  Integer arithmetic throughout: every digit is kept."""
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = value.numerator * (10**places // value.denominator)  # exact: value * 10**places
    sign, digits = ("-" if scaled < 0 else ""), str(abs(scaled))
    if not places:
        return sign + digits
    digits = digits.rjust(places + 1, "0")
    whole, fraction = digits[:-places], digits[-places:].rstrip("0")
    return sign + whole + ("." + fraction if fraction else "")


def parse_budget(value: object) -> Fraction:
    """A budget: an exact positive decimal, parsed by epsilon's own rules (``exact_decimal``,
    never a float), from 0.0001 to 1,000,000 with at most 30 significant digits (the range
    keeps the exact arithmetic and its text small: ``1e999999999`` would be a billion-digit
    integer)."""
    from ..errors import option_name
    from ..mechanism.epsilon import exact_decimal

    return Fraction(exact_decimal(value, option_name("budget"), "4", MIN_BUDGET, MAX_BUDGET))


def budget_from(value: object) -> Fraction | None:
    """A budget given to the Python API (``LedgerRecorder``, ``check_release``), read as a
    Mechanism reads epsilon: decimal text or a Decimal (:func:`parse_budget`), an int, a float
    by its shortest text (``0.3`` is 3/10, as ``--budget 0.3`` is, not the binary fraction
    nearest it), or a Fraction that is a plain decimal (what :func:`parse_budget` returns).
    ``None`` is no budget.  Anything else, NaN and infinities included, is refused: an unchecked
    value could switch the budget off or decide refusals in float arithmetic."""
    from ..errors import InvalidParameterError, option_name

    if value is None:
        return None
    name = option_name("budget")
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        raise InvalidParameterError(f"{name} must be a number")
    refuse_other_floats(value, name)
    if isinstance(value, Fraction):
        # (no decimal of at most 30 digits from 0.0001 to 1,000,000 needs more; spend_text on a
        # denominator of thousands of digits would take seconds, then pass Python's digit limit)
        if value.denominator.bit_length() > 256 or abs(value.numerator).bit_length() > 256:
            raise InvalidParameterError(f"{name} must be a plain decimal number such as 4")
        text = spend_text(value)
        if "/" in text:
            raise InvalidParameterError(f"{name} must be a decimal number, not {text}")
        return parse_budget(text)
    if isinstance(value, float):  # (numpy.float64 too; float.__repr__: see parse_epsilon)
        return parse_budget(Decimal(float.__repr__(value)))
    if isinstance(value, numbers.Integral):
        return parse_budget(Decimal(int(value)))
    return parse_budget(value)


class ReleaseAccount:
    """One release's records against a ledger snapshot, record by record, in input order.

    For each record :meth:`classify` says whether its draw repeats one the ledger holds (or one
    earlier in this release), is a new draw of a subject the ledger knows, or belongs to a new
    subject, and whether the budget refuses it.  A new draw is refused when the subject's
    spend with it would exceed the budget; a repeated draw costs nothing and is never refused.
    Refused draws are not counted, so a later record of the same subject may still fit.
    """

    def __init__(self, epsilon: Fraction, budget: Fraction | None):
        self.epsilon = epsilon
        self.budget = budget
        self.known_draws: set[bytes] = set()  # draws the ledger holds (loaded chunk by chunk)
        self.base: dict[bytes, Fraction] = {}  # spend in the ledger, for subjects seen so far
        self.new_count: dict[bytes, int] = {}  # new draws of each subject in this release
        self.seen: dict[bytes, str] = {}  # new draws of this release -> their category
        self.new_draws: list[tuple[bytes, bytes, bytes]] = []  # (draw, subject, pair), in order
        # Repeated draws that only a pending release holds so far: recorded as shared, so that
        # they stay in the ledger if that release is abandoned.
        self.pending_held: set[bytes] = set()
        self.borrowed: list[tuple[bytes, bytes, bytes]] = []
        self.records: Counter[str] = Counter()  # releasable records by category

    def needs(self, subjects: Iterable[bytes]) -> set[bytes]:
        """Subjects whose ledger spend has not been loaded yet."""
        return {s for s in subjects if s not in self.base}

    def load(
        self,
        known_draws: Iterable[bytes],
        base: Mapping[bytes, Fraction],
        subjects: Iterable[bytes],
        pending_held: Iterable[bytes] = (),
    ) -> None:
        self.known_draws.update(known_draws)
        self.pending_held.update(pending_held)
        for s in subjects:
            self.base[s] = base.get(s, ZERO)

    def classify(self, subject: bytes, pair: bytes, draw: bytes) -> bool:
        """Account one releasable record; return False if the budget refuses it."""
        if draw in self.known_draws:
            self.records[REPEAT] += 1
            if draw in self.pending_held:
                self.pending_held.discard(draw)
                self.borrowed.append((draw, subject, pair))
            return True
        category = self.seen.get(draw)
        if category is not None:
            self.records[category] += 1
            return True
        base = self.base[subject]
        count = self.new_count.get(subject, 0) + 1
        if self.budget is not None and base + count * self.epsilon > self.budget:
            self.records["over_budget"] += 1
            return False
        category = KNOWN_SUBJECT if base > 0 else NEW_SUBJECT
        self.new_count[subject] = count
        self.seen[draw] = category
        self.new_draws.append((draw, subject, pair))
        self.records[category] += 1
        return True

    def spend_after(self) -> dict[bytes, Fraction]:
        """Cumulative spend after this release of every subject it draws anew."""
        eps = self.epsilon
        return {s: self.base[s] + n * eps for s, n in self.new_count.items()}
