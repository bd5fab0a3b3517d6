"""Which side of the bracket on Z leaves records undecided, and what exact bounds would settle.

A record's shell is settled by bounds z_low <= Z <= z_high unless its U falls where they
disagree: within [C_h / z_high, C_h / z_low) for some known C_h, or at or past C_D / z_high
when only shells 0 .. D are known (docs/performance.md, "Deciding the shell, stage by stage").
For random postcodes this script explores each whole ball once (the exact Z), then, at each
depth asked for, takes the engine's own bounds there (the core's, the far-mass row's and the
floor's, as ``BoundSources.z_bounds`` and ``rows_z_high`` give them; with ``--landmarks`` the
landmark rows', as a release below ε 0.35 has them) and measures the share of
U that they leave undecided, four ways:

- ``engine``: both bounds as the engine has them;
- ``exact low``: the engine's z_high, with z_low = Z;
- ``exact high``: the engine's z_low, with z_high = Z;
- ``exact``: z_low = z_high = Z, which leaves only the U whose shell lies past the depth.

So it says how much a tighter upper or lower bound on the far mass could ever buy at that
depth, without building one.  The shares are measured in floats from exact integers: this is
a measurement, never an output.

    /work/main/.venv/bin/python benchmarks/bound_gaps.py --epsilon 0.5 --locations 300 --depths 44,56
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from postcode_privacy import Mechanism
from postcode_privacy.engine.fast import FastSampler
from postcode_privacy.engine.landmarks import graph_tables
from postcode_privacy.engine.profiles import BallProfiles, build_profiles, profiles_for
from postcode_privacy.graph.national import default_graph

WAYS = ("engine", "exact low", "exact high", "exact")


def undecided_share(cumulative: list[int], z_low: int, z_high: int) -> float:
    """The measure of the U in [0, 1) that bounds z_low <= Z <= z_high do not settle, with
    C_0 .. C_D known: the union of [C_h / z_high, C_h / z_low) and [C_D / z_high, 1)."""
    spans = [(c / z_high, min(c / z_low, 1.0)) for c in cumulative]
    spans.append((cumulative[-1] / z_high, 1.0))
    covered, reach = 0.0, 0.0
    for start, stop in sorted(spans):
        start = max(start, reach)
        if stop > start:
            covered += stop - start
            reach = stop
    return covered


def shares_at(
    sampler: FastSampler, node: int, masses: list[int], z: int, depth: int
) -> list[float]:
    """The four undecided shares (``WAYS``) for the source ``node`` with shells 0 .. depth
    known exactly, as a table row (depth 44) or an exploration would give them."""
    powers = sampler.powers
    cumulative, acc = [], 0
    for h in range(depth + 1):
        acc += powers[h] * masses[h]
        cumulative.append(acc)
    explored = sum(masses[: depth + 1])
    sampler.sources.forget_group_rows()
    search = sampler.search
    search.start(node)
    floor = sampler.sources.ball_floor()
    z_low, z_high = sampler.sources.z_bounds(cumulative, explored, None, floor)
    from_rows = sampler.sources.rows_z_high(node, cumulative, explored)
    if from_rows is not None:
        z_high = min(z_high, from_rows)
    if not z_low <= z <= z_high:
        raise SystemExit(f"bounds that do not hold for node {node} at depth {depth}")
    return [
        undecided_share(cumulative, z_low, z_high),
        undecided_share(cumulative, z, z_high),
        undecided_share(cumulative, z_low, z),
        undecided_share(cumulative, z, z),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", default="0.5")
    parser.add_argument("--locations", type=int, default=300, help="random postcodes sampled")
    parser.add_argument("--depths", default="44,56", help="known shells 0 .. depth, each")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--landmarks", action="store_true", help="the landmark rows too (a release below ε 0.35)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="3 postcodes at ε 2, a 3-hop table built here"
    )
    args = parser.parse_args()
    graph = default_graph(progress=False)
    tables = graph_tables(graph)
    if args.smoke:  # not the cached table, which a clean machine takes minutes to build
        args.epsilon, args.locations, args.depths = "2", 3, "3,8"
        profiles = BallProfiles(build_profiles(graph, tables.loc_mass, 3), graph)
    else:
        profiles = profiles_for(graph, tables.loc_mass, workers=1, progress=False)
    mechanism = Mechanism(graph, args.epsilon)
    radius, powers, total = mechanism.radius, mechanism.powers, graph.total_prior
    depths = [min(int(d), radius - 1) for d in args.depths.split(",")]
    sampler = FastSampler(mechanism, tables=tables, landmarks=args.landmarks, profiles=profiles)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    rows: dict[int, list[list[float]]] = {d: [] for d in depths}
    for _ in range(args.locations):
        node = rng.randrange(len(graph))
        search = sampler.search
        search.start(node)
        search.explore_to(radius)
        masses = search.masses[: search.n_shells].tolist()
        z = sum(p * m for p, m in zip(powers, masses)) + powers[radius] * (total - sum(masses))
        for depth in depths:
            rows[depth].append(shares_at(sampler, node, masses, z, depth))
    print(
        f"epsilon {args.epsilon}, R = {radius}, table depth {profiles.depth}, "
        f"{args.locations} random postcodes, landmark rows {'on' if args.landmarks else 'off'}, "
        f"{time.perf_counter() - started:.0f} s"
    )
    print("\n| shells known | " + " | ".join(f"undecided, {w}" for w in WAYS) + " |")
    print("|---" * (len(WAYS) + 1) + "|")
    for depth in depths:
        mean = np.mean(np.array(rows[depth]), axis=0)
        print(f"| 0 .. {depth} | " + " | ".join(f"{100 * v:.2f}%" for v in mean) + " |")


if __name__ == "__main__":
    main()
