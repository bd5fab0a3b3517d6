"""The exploration no engine that searches each postcode on its own can avoid, on the national graph.

A draw ends by picking a member of the shell it chose, in the canonical order of that shell, so
the engine must know every member of that shell: it explores breadth-first from the true
postcode out to the drawn shell, whatever bounds settle Z.  This script measures that part
alone, for random postcodes:

1. each sampled postcode's whole ball (R shells) is explored once, giving the exact prior mass
   and the number of locations of every shell, and so the exact probability of each shell
   (the weights P_h of ``Mechanism.powers``, the tail at P_R);
2. the expected number of locations explored to the drawn shell is the sum over shells h of
   P(shell h) times the locations in shells 0 .. h; for a postcode with k records it is the
   same for the deepest of the k drawn shells, with k as in the national row of
   ``perturb_national.py`` (10,000,000 rows drawn uniformly from the graph: Poisson, at least 1);
3. the breadth-first search's cost per location is timed on a second search from each postcode,
   out to its median drawn shell, as a draw explores (a small ball costs more per location
   than a whole one: the call and the first cache misses weigh more; both are printed), so
   the floor is also given in time: records per second on all usable cores for distinct postcodes, and seconds
   for every postcode of the national file.

These are floors for the exploration only, before bounding Z, the keyed stream, the picks and
reading and writing the file.  Shell probabilities are computed in exact integers and only
then turned into floats: this is a measurement, never an output.

    /work/main/.venv/bin/python benchmarks/exploration_floor.py --locations 150
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time

import numpy as np

from postcode_privacy import Mechanism
from postcode_privacy.engine.batch import usable_cpus
from postcode_privacy.engine.search import ShellSearch
from postcode_privacy.graph.national import default_graph

NATIONAL_ROWS = 10_000_000  # the national row of perturb_national.py


def shell_probabilities(mechanism: Mechanism, masses: list[int], total: int) -> list[float]:
    """P(the draw lands in shell h) for h = 0 .. R (R: the tail), from the exact shell masses."""
    powers, radius = mechanism.powers, mechanism.radius
    weights = [powers[h] * masses[h] for h in range(radius)]
    weights.append(powers[radius] * (total - sum(masses)))
    z = sum(weights)
    return [w / z for w in weights]  # int / int: correctly rounded


def deepest_of(probabilities: np.ndarray, mean_records: float) -> np.ndarray:
    """Law of the deepest drawn shell among k records, k ~ Poisson(mean_records) given k >= 1."""
    cdf = np.cumsum(probabilities)
    ks = np.arange(1, int(mean_records * 4 + 20))
    pk = np.exp(-mean_records + ks * math.log(mean_records) - [math.lgamma(k + 1) for k in ks])
    pk /= pk.sum()
    cdf_max = (pk[:, None] * cdf[None, :] ** ks[:, None]).sum(axis=0)
    return np.diff(np.concatenate([[0.0], cdf_max]))


def floor_for(graph, epsilon: str, sources: list[int]) -> dict:
    mechanism = Mechanism(graph, epsilon)
    radius, total = mechanism.radius, int(graph.total_prior)
    mean_records = NATIONAL_ROWS / len(graph)
    search = ShellSearch(graph, radius + 1)
    one, deepest, ball, seconds, timed, whole = [], [], [], 0.0, 0, 0.0
    for source in sources:
        search.start(source)
        started = time.perf_counter()
        search.explore_to(radius)
        whole += time.perf_counter() - started
        explored = search._shell_ptr[1 : radius + 1].astype(np.float64)  # shells 0 .. h
        to_shell = np.append(explored, explored[-1])  # the tail needs the whole ball
        p = np.array(shell_probabilities(mechanism, search.masses[:radius].tolist(), total))
        one.append(float(p @ to_shell))
        deepest.append(float(deepest_of(p, mean_records) @ to_shell))
        ball.append(float(explored[-1]))
        median_shell = int(np.searchsorted(np.cumsum(p), 0.5))
        search.start(source)
        started = time.perf_counter()
        search.explore_to(median_shell + 1)
        seconds += time.perf_counter() - started
        timed += search.locations_explored
    per_location = seconds / timed
    cores = usable_cpus()
    return {
        "epsilon": epsilon,
        "radius": radius,
        "ns": per_location * 1e9,
        "ns_whole": whole / sum(ball) * 1e9,
        "ball": float(np.mean(ball)),
        "one": float(np.mean(one)),
        "one_median": float(np.median(one)),
        "rate_floor": cores / (float(np.mean(one)) * per_location),
        "mean_records": mean_records,
        "deepest": float(np.mean(deepest)),
        "national_s": float(np.mean(deepest)) * per_location * len(graph) / cores,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locations", type=int, default=150, help="random postcodes sampled")
    parser.add_argument("--epsilons", default="2,1,0.5,0.25")
    parser.add_argument("--smoke", action="store_true", help="3 postcodes at epsilon 2")
    args = parser.parse_args()
    if args.smoke:
        args.locations, args.epsilons = 3, "2"
    graph = default_graph(progress=False)
    sources = random.Random(11).sample(range(len(graph)), args.locations)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{args.locations} random postcodes, {usable_cpus()} usable CPUs, load average {load}\n\n"
        "| ε | R | whole ball (locations) | to the drawn shell, one record: mean (median) "
        "| floor, distinct postcodes | to the deepest drawn shell, national postcode "
        "| floor, national file | search cost a location: to the median drawn shell "
        "(whole ball) |\n|---|---|---|---|---|---|---|---|"
    )
    for epsilon in args.epsilons.split(","):
        f = floor_for(graph, epsilon, sources)
        print(
            f"| {f['epsilon']} | {f['radius']} | {f['ball']:,.0f} | {f['one']:,.0f} "
            f"({f['one_median']:,.0f}) | {f['rate_floor']:,.0f} records/s "
            f"| {f['deepest']:,.0f} ({f['mean_records']:.2f} records a postcode) "
            f"| {f['national_s']:,.0f} s | {f['ns']:.0f} ns ({f['ns_whole']:.0f} ns) |",
            flush=True,
        )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at end: {load}")


if __name__ == "__main__":
    main()
