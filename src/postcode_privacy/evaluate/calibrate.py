"""Choose epsilon from a utility target, on a sample of postcodes.

Targets (``--target NAME=VALUE``):

``median-displacement-km``
    the median displacement (``utility.measure_utility``) must be at most VALUE kilometres.  It
    falls as epsilon grows, so the target sets a *smallest* admissible epsilon.
``max-self-probability``
    the largest self-probability K(x)(x) over the sample must be at most VALUE.  It rises with
    epsilon, so the target sets a *largest* admissible epsilon.

The search runs over the grid of two-significant-figure values 0.010, 0.011, ..., 9.9, 10, which
is evenly spaced on a log scale within each decade, by bisection on the grid index (each
measure is assumed monotone in epsilon, which holds on every graph we have measured; the end
of the range most likely to meet the target is evaluated first, and where it fails the search
stops, since no epsilon in the range can meet it; otherwise the other end, then the bisection).  The answer is the smallest grid epsilon meeting every target
(the most privacy for the utility asked for), or, when only upper-bound targets are given, the
largest.  When no epsilon in [0.01, 10] meets the targets the result says why, in ``warnings``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from .._exact_numbers import float_above, significant_up
from ..errors import InvalidParameterError
from ..graph.graph import Graph
from ..mechanism.epsilon import canonical_text, decimal_from_text
from ..mechanism.mechanism import Mechanism
from ..mechanism.powers import MAX_RADIUS
from ..mechanism.radius import NoDefaultRadiusError
from .exact import ExactMechanism
from .utility import measure_utility, mixture_quantile_m

GRID: tuple[Decimal, ...] = tuple(
    Decimal(m).scaleb(e) for e in (-3, -2, -1) for m in range(10, 100)
) + (Decimal(10),)

# name -> True if the measure decreases as epsilon grows
TARGETS = {"median-displacement-km": True, "max-self-probability": False}
# The values a target may take: wide enough for any use, narrow enough that the exact
# arithmetic stays small (its digits are bounded by the text's length, decimal_from_text) ("1e999999999" would be a billion-digit integer, "1e999" overflowed a
# float in the warnings: a traceback).
TARGET_RANGES = {
    "median-displacement-km": (Decimal("0.000001"), Decimal(1_000_000)),
    "max-self-probability": (Decimal("1e-30"), Decimal(1)),
}


@dataclass
class CalibrationResult:
    epsilon: Decimal | None
    met: bool
    targets: dict[str, Fraction]
    achieved: dict[str, float]
    bounds: dict[str, Decimal | None]  # per target: the admissible limit it sets on epsilon
    warnings: list[str] = field(default_factory=list)
    evaluations: dict[str, dict[str, float]] = field(default_factory=dict)
    # the achieved figures as shown: a self-probability rounded up from its exact value
    achieved_text: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "epsilon": None if self.epsilon is None else canonical_text(self.epsilon),
            "met": self.met,
            "targets": {k: float(v) for k, v in self.targets.items()},
            "achieved": self.achieved,
            "achieved_text": self.achieved_text,
            "bounds": {k: None if v is None else canonical_text(v) for k, v in self.bounds.items()},
            "warnings": list(self.warnings),
            "evaluations": self.evaluations,
        }


def parse_target(text: str) -> tuple[str, Fraction]:
    """``"median-displacement-km=2"`` -> ("median-displacement-km", Fraction(2)): the exact
    value of plain decimal text, as ``--epsilon`` is read (no "1_0", no non-ASCII digits)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or name not in TARGETS:
        raise InvalidParameterError(
            f"a target must be NAME=VALUE with NAME one of {', '.join(sorted(TARGETS))}"
        )
    dec = decimal_from_text(value, f"target {name}", "2")
    if not dec > 0:
        raise InvalidParameterError(f"target {name} must be a positive finite number")
    if name == "max-self-probability" and dec > 1:
        raise InvalidParameterError("target max-self-probability must be at most 1")
    low, high = TARGET_RANGES[name]
    if not low <= dec <= high:  # compared as decimals: nothing huge is built
        raise InvalidParameterError(f"target {name} must be from {low} to {high}")
    return name, Fraction(dec)


def combine_targets(parsed) -> dict[str, Fraction]:
    """Targets given as (name, value) pairs, a name given twice kept at its strictest value
    (every target is an upper limit, so the smallest)."""
    combined: dict[str, Fraction] = {}
    for name, value in parsed:
        combined[name] = min(value, combined.get(name, value))
    return combined


class _Measures:
    """Utility measures per grid epsilon, computed once each."""

    def __init__(self, graph: Graph, nodes, progress=None, budget: int = 1):
        self.graph, self.nodes = graph, list(nodes)
        self.cache: dict[Decimal, dict[str, float]] = {}  # the measures as floats, shown
        self.exact: dict[Decimal, dict[str, Fraction]] = {}  # the same, exactly: compared
        self.progress, self.budget = progress, budget

    def meets(self, epsilon: Decimal, name: str, limit: Fraction) -> bool:
        """Whether the measure ``name`` at ``epsilon`` is at most ``limit``, compared exactly:
        a self-probability is a privacy figure, and a median's float (0.762 km is slightly
        above 0.762 as a float) failed a target equal to it."""
        self(epsilon)
        return self.exact[epsilon][name] <= limit

    @property
    def stage(self) -> str:
        return f"measuring epsilon values (at most {self.budget})"

    def __call__(self, epsilon: Decimal) -> dict[str, float]:
        if epsilon not in self.cache:
            if self.progress is not None:
                self.progress(self.stage, len(self.cache), self.budget)
            try:
                mechanism = Mechanism(self.graph, epsilon)
            except NoDefaultRadiusError:  # (its advice names options calibrate does not have)
                raise NoDefaultRadiusError(
                    f"epsilon {canonical_text(epsilon)}, which the search must measure, has no "
                    f"default radius within {MAX_RADIUS} hops on this graph (its prior is very "
                    "uneven): calibrate cannot search it; choose epsilon with evaluate instead"
                ) from None
            summary = measure_utility(ExactMechanism(mechanism), self.nodes)
            exact = {
                # the median is a whole number of metres
                "median-displacement-km": Fraction(
                    mixture_quantile_m(summary.histogram_m, 0.5), 1000
                ),
                "max-self-probability": max(r.self_probability for r in summary.per_postcode),
            }
            self.exact[epsilon] = exact
            # As floats for JSON, each from the exact value: a risk never below it.
            self.cache[epsilon] = {
                "median-displacement-km": float(exact["median-displacement-km"]),
                "max-self-probability": float_above(exact["max-self-probability"]),
            }
        return self.cache[epsilon]

    def text(self, epsilon: Decimal, name: str, target: Fraction | None = None) -> str:
        """The measure as shown: a self-probability rounded up, a median displacement exactly
        (a whole number of metres, in kilometres)."""
        self(epsilon)
        return measure_text(name, self.exact[epsilon][name], target)


def measure_text(name: str, value: Fraction, target: Fraction | None = None) -> str:
    """A calibration measure as text, from its exact value (docs/choosing-epsilon.md).  A
    self-probability is rounded up to four significant digits, or to as many more as it
    takes for one that meets ``target`` not to read as above it (0.29959 met a target of
    0.29959, and showed as 0.2996: a review)."""
    if name == "max-self-probability":
        digits = 4
        text = significant_up(value, digits)
        while target is not None and value <= target and digits < 40:
            if text.startswith("more than") or Fraction(text) <= target:
                break
            digits += 1
            text = significant_up(value, digits)
        return text
    metres = int(value * 1000)  # a whole number of metres
    return format(Decimal(metres).scaleb(-3).normalize(), "f")


def _search(ok, decreasing: bool) -> int | None:
    """Grid index of the limit the target sets: the smallest admissible index for a decreasing
    measure, the largest for an increasing one; None if no grid point is admissible."""
    lo, hi = 0, len(GRID) - 1
    if decreasing:
        if not ok(hi):
            return None
        if ok(lo):
            return lo
        while hi - lo > 1:  # invariant: lo fails, hi meets
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi
    if not ok(lo):
        return None
    if ok(hi):
        return hi
    while hi - lo > 1:  # invariant: lo meets, hi fails
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def calibrate(
    graph: Graph,
    targets: Mapping[str, float | Fraction],
    nodes,
    progress: Callable[[str, int, int], None] | None = None,
) -> CalibrationResult:
    """The epsilon on the two-significant-figure grid meeting ``targets`` on ``nodes``.

    ``progress``, if given, is called as ``progress(stage, done, total)`` before each utility
    measurement and once at the end with ``done == total``; ``total`` is the most the
    bisections can need, and stays the same.
    """
    if not targets:
        raise InvalidParameterError("give at least one target")
    for name in targets:
        if name not in TARGETS:
            raise InvalidParameterError(f"unknown target {name}")
    # Each bisection evaluates both ends, then halves the grid: at most 2 + ceil(log2 |GRID|).
    budget = len(targets) * (2 + math.ceil(math.log2(len(GRID))))
    measures = _Measures(graph, nodes, progress, budget)
    bounds: dict[str, Decimal | None] = {}
    warnings: list[str] = []
    found: dict[str, int] = {}  # target -> grid index of its limit, for targets that have one
    exact_targets = {name: Fraction(value) for name, value in targets.items()}
    for name, value in exact_targets.items():
        decreasing = TARGETS[name]

        def ok(i, name=name, value=value):
            return measures.meets(GRID[i], name, value)

        index = _search(ok, decreasing)
        if index is not None:
            found[name] = index
        bounds[name] = None if index is None else GRID[index]
        if index is None:
            edge = GRID[-1] if decreasing else GRID[0]
            warnings.append(
                f"{name} <= {float(value):g} cannot be met for epsilon in [0.01, 10]: at epsilon "
                f"{canonical_text(edge)} it is {measures.text(edge, name)}"
            )
        elif decreasing and index == 0:
            warnings.append(
                f"{name} <= {float(value):g} is met already at epsilon 0.01, the smallest "
                "searched; a smaller epsilon may also meet it"
            )
        elif not decreasing and index == len(GRID) - 1:
            warnings.append(
                f"{name} <= {float(value):g} is met even at epsilon 10, the largest searched"
            )
    epsilon: Decimal | None = None
    if len(found) == len(targets):
        lower = [found[n] for n in targets if TARGETS[n]]
        upper = [found[n] for n in targets if not TARGETS[n]]
        lo = max(lower) if lower else None
        hi = min(upper) if upper else None
        if lo is not None and hi is not None and lo > hi:
            warnings.append(
                f"the targets conflict: they need epsilon >= {canonical_text(GRID[lo])} and "
                f"<= {canonical_text(GRID[hi])}"
            )
        elif lo is not None:  # the smallest epsilon meeting every target
            epsilon = GRID[lo]
        elif hi is not None:  # only upper limits: the largest epsilon allowed
            epsilon = GRID[hi]
    achieved = measures(epsilon) if epsilon is not None else {}
    if progress is not None:
        # The total stays the most the searches could need, so the count never jumps back;
        # searches that ended early finish the stage.
        progress(measures.stage, measures.budget, measures.budget)
    return CalibrationResult(
        epsilon=epsilon,
        met=epsilon is not None,
        targets=exact_targets,
        achieved={k: achieved[k] for k in achieved},
        achieved_text=(
            {k: measures.text(epsilon, k, exact_targets.get(k)) for k in achieved}
            if epsilon is not None
            else {}
        ),
        bounds=bounds,
        warnings=warnings,
        evaluations={canonical_text(e): v for e, v in sorted(measures.cache.items())},
    )
