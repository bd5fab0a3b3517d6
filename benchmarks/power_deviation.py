"""Worst relative deviation of the integer powers P_h from the ideal 2^s * exp(-eps*h/2).

Run: python benchmarks/power_deviation.py [--smoke]
Prints the worst deviation over a grid of epsilon in [0.01, 5] and radii up to 200.
``--smoke`` checks a two-by-two corner of the grid in well under a second (used by the tests so
the script cannot rot).
"""

from __future__ import annotations

import argparse
from decimal import Context, Decimal

from postcode_privacy.mechanism.powers import powers

CTX = Context(prec=320, Emax=10**6, Emin=-(10**6))  # P_h reach 2^800 at eps = 5, R = 200
EPSILONS = [
    Decimal(x)
    for x in (
        "0.01",
        "0.02",
        "0.05",
        "0.1",
        "0.2",
        "0.3",
        "0.5",
        "0.7",
        "1",
        "1.5",
        "2",
        "2.5",
        "3",
        "3.5",
        "4",
        "4.5",
        "5",
    )
]
RADII = (1, 2, 5, 10, 30, 60, 100, 150, 200)


def worst_deviation(epsilons=EPSILONS, radii=RADII) -> tuple[Decimal, Decimal, int, int]:
    """(worst relative deviation, epsilon, radius, h) over the grid; the deviation is >= 0."""
    worst = (Decimal(-1), Decimal(0), 0, 0)
    for eps in epsilons:
        for radius in radii:
            p = powers(eps, radius)
            base = Decimal(p[0])
            for h, value in enumerate(p):
                ideal = CTX.multiply(base, CTX.exp(-eps * h / 2))
                deviation = CTX.divide(Decimal(value) - ideal, ideal)
                if deviation < 0:
                    raise AssertionError(f"P_{h} below the ideal at eps={eps}, R={radius}")
                if deviation > worst[0]:
                    worst = (deviation, eps, radius, h)
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="a tiny grid, to check the script runs"
    )
    args = parser.parse_args(argv)
    epsilons, radii = (EPSILONS[::8], RADII[:2]) if args.smoke else (EPSILONS, RADII)
    dev, eps, radius, h = worst_deviation(epsilons, radii)
    print(f"worst relative deviation {float(dev):.3e} at epsilon={eps}, R={radius}, h={h}")
    print(f"grid: {len(epsilons)} epsilons in [{epsilons[0]}, {epsilons[-1]}] x radii {radii}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
