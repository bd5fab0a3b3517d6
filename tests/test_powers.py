"""Exact powers and exact epsilon (docs/methods.md, "Rounding that cannot weaken the bound")."""

from __future__ import annotations

import sys
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from postcode_privacy import InvalidParameterError
from postcode_privacy.mechanism.epsilon import parse_epsilon
from postcode_privacy.mechanism.powers import (
    TAIL_BITS,
    exp_lower_bound,
    powers,
    q_hat,
)

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from power_deviation import worst_deviation  # noqa: E402


@pytest.mark.parametrize("eps", ["0.01", "0.3", "1", "2.5", "5", "37.5", "100"])
def test_q_hat_is_an_upper_bound_and_tight(eps):
    q = q_hat(Decimal(eps))
    assert 2**256 % q.denominator == 0  # dyadic, on the 2^-256 grid
    lower_exp = exp_lower_bound(Fraction(eps) / 2)  # <= e^(eps/2), so 1/lower >= q
    assert q * lower_exp >= 1  # q_hat >= exp(-eps/2)
    assert q * lower_exp < 1 + Fraction(1, 10**55)  # and within a few units in the 60th digit


@pytest.mark.parametrize("eps", ["0.01", "0.5", "1", "5"])
@pytest.mark.parametrize("radius", [1, 3, 57, 200])
def test_scale_is_the_smallest_keeping_80_bits(eps, radius):
    p = powers(Decimal(eps), radius)
    assert p[0] & (p[0] - 1) == 0  # a power of two
    assert p[-1] >= 2**TAIL_BITS
    scale = p[0].bit_length() - 1
    if scale > TAIL_BITS:
        # One bit less and P_R would fall below 2^80.
        a = q_hat(Decimal(eps)).numerator
        smaller = [1 << (scale - 1)]
        for _ in range(radius):
            smaller.append(-((-a * smaller[-1]) >> 256))
        assert smaller[-1] < 2**TAIL_BITS
    assert all(p[j + 1] < p[j] for j in range(radius))


def test_worst_relative_deviation_is_below_1e_18():
    """Measured over eps in [0.01, 5] and R up to 200 (full grid: benchmarks/power_deviation.py)."""
    eps = [Decimal(x) for x in ("0.01", "0.1", "1", "2.5", "5")]
    deviation, *_ = worst_deviation(eps, (1, 60, 200))
    assert 0 <= deviation < Decimal("1e-18")


@pytest.mark.parametrize(
    "given,text",
    [
        (0.1, "0.1"),
        ("0.10", "0.1"),
        (1, "1"),
        (2.0, "2"),
        ("1e-2", "0.01"),
        (Decimal("0.25"), "0.25"),
        (0.3, "0.3"),
        ("  1.5 ", "1.5"),
        (100, "100"),
    ],
)
def test_epsilon_is_the_shortest_decimal(given, text):
    eps = parse_epsilon(given)
    assert eps.text == text
    assert eps.fraction == Fraction(text)


def test_epsilon_float_comparison_is_exact_decimal():
    assert parse_epsilon(0.1) == 0.1
    assert parse_epsilon("0.1") == 0.1
    assert parse_epsilon(0.1) != 0.2


@pytest.mark.parametrize(
    "bad",
    [
        0,
        -1,
        0.0,
        -0.5,
        float("nan"),
        float("inf"),
        "nan",
        "inf",
        "-inf",
        "abc",
        "",
        "0x10",
        True,
        None,
        [1],
        "1e3",
        100.5,
        "0.00009",
        1e-70,
        "1_0",
        "\u0661",
        "1.0.0",
    ],
)
def test_bad_epsilon_rejected(bad):
    with pytest.raises(InvalidParameterError):
        parse_epsilon(bad)


def test_a_float_narrower_or_wider_than_64_bits_is_refused_saying_so():
    """numpy's float32 and float16 were refused as "epsilon must be a number", which they are
    (an independent checker of round 30): only a 64-bit float is read by its shortest text, and
    float32 0.1 is not one tenth.  The budget reads them the same way."""
    import numpy as np

    from postcode_privacy.ledger.accounting import budget_from

    for value in (np.float32(0.5), np.float16(1), np.longdouble(0.5)):
        for read, name in ((parse_epsilon, "epsilon"), (budget_from, "budget")):
            with pytest.raises(InvalidParameterError, match=f"^{name} is a numpy float"):
                read(value)
    assert parse_epsilon(np.float64(0.1)).text == "0.1"
    assert budget_from(np.float64(0.1)) == Fraction(1, 10)


@pytest.mark.parametrize("radius", [0, -1, 100_001, 1.5, "3", True])
def test_bad_radius_rejected(radius):
    with pytest.raises(InvalidParameterError):
        powers(Decimal(1), radius)


def test_ambient_decimal_context_never_rounds_epsilon():
    """Found in review: the thread's decimal context (28 digits by default, and changeable by
    any caller) must not reach the privacy arithmetic."""
    import decimal

    from postcode_privacy.mechanism.powers import _powers_cached, q_hat_numerator

    thirty = "0.123456789012345678901234567891"
    assert parse_epsilon(thirty).text == thirty
    assert parse_epsilon("9.999999999999999999999999999").text == "9.999999999999999999999999999"
    expected = {e: powers(Decimal(e), 12) for e in ("0.75", "9.999999999999999999999999999")}
    q_hat_numerator.cache_clear()
    _powers_cached.cache_clear()
    with decimal.localcontext(decimal.Context(prec=2)):
        assert parse_epsilon(thirty).text == thirty
        got = {e: powers(Decimal(e), 12) for e in expected}
    assert got == expected
    p = expected["9.999999999999999999999999999"]
    from exact import sharp_power_violations

    assert sharp_power_violations("9.999999999999999999999999999", p) == []


def test_small_epsilon_with_explicit_radius_works_and_default_is_refused_clearly():
    from postcode_privacy import Graph, Mechanism
    from postcode_privacy.errors import TeleportWarning

    graph = Graph.from_edges(["A", "B"], [("A", "B")])
    with pytest.warns(TeleportWarning):
        m = Mechanism(graph, "0.0001", radius=5)
    assert m.radius == 5
    with pytest.raises(InvalidParameterError, match="too small for a default radius"):
        Mechanism(Graph.from_edges(["A", "B", "C"], [("A", "B"), ("B", "C")]), "0.0001")
    with pytest.raises(InvalidParameterError, match="epsilon times radius"):
        powers(Decimal(100), 201)


def test_an_epsilon_text_too_long_to_read_says_so():
    """A 1,200-character epsilon (exactly 0.5) was refused as "not a plain decimal number",
    which it is (a hostile review): it is refused unread, and the message says why."""
    from postcode_privacy.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=r"too long \(1,201 characters; at most"):
        parse_epsilon("0." + "5" + "0" * 1198)
    assert parse_epsilon("0.5" + "0" * 997) == parse_epsilon("0.5")  # 1,000: read
