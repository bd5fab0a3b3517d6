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
3. the breadth-first search's cost per location is timed as a batch explores: from postcodes
   as far apart as a batch's are (100,000 distinct random postcodes, or every postcode for the
   national file), taken in the order the batch takes them (``engine.batch._places`` where its
   search reads the graph laid out along the map, from radius ``ALONG_MAP_RADIUS``; node order
   below), each out to the median drawn shell (the median deepest, for the national file),
   with the batch's layout.  Neighbouring postcodes' searches read much the same memory, so
   this costs about half what the same searches cost one by one from random places, which is
   printed too.  The floor is then given in time: records per second on all usable cores for
   distinct postcodes, and seconds for every postcode of the national file.

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
from postcode_privacy.engine.batch import ALONG_MAP_RADIUS, _places, usable_cpus
from postcode_privacy.engine.landmarks import graph_tables
from postcode_privacy.engine.search import ShellSearch
from postcode_privacy.graph.national import default_graph

NATIONAL_ROWS = 10_000_000  # the national row of perturb_national.py
DISTINCT_ROWS = 100_000  # the distinct rows of perturb_national.py
TIMED_SOURCES = 4_000  # consecutive sources of a batch timed for each cost


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


def seconds_a_location(search: ShellSearch, sources, depth: int) -> float:
    """Seconds a location when each of ``sources``, in turn, is explored to ``depth`` shells."""
    seconds, locations = 0.0, 0
    for source in sources:
        started = time.perf_counter()
        search.start(int(source))
        search.explore_to(depth)
        seconds += time.perf_counter() - started
        locations += search.locations_explored
    return seconds / locations


def batch_stretch(graph, places, rows: int, rng: random.Random) -> np.ndarray:
    """``TIMED_SOURCES`` consecutive distinct postcodes of a batch of ``rows`` random distinct
    postcodes (every postcode if ``rows`` is the graph's size), in the batch's order."""
    n = len(graph)
    nodes = np.array(rng.sample(range(n), rows)) if rows < n else np.arange(n)
    nodes = nodes[np.argsort(nodes if places is None else places[nodes], kind="stable")]
    first = rng.randrange(max(1, nodes.size - TIMED_SOURCES))
    return nodes[first : first + TIMED_SOURCES]


def floor_for(graph, epsilon: str, sources: list[int]) -> dict:
    mechanism = Mechanism(graph, epsilon)
    radius, total = mechanism.radius, int(graph.total_prior)
    mean_records = NATIONAL_ROWS / len(graph)
    tables = graph_tables(graph)
    along_map = radius >= ALONG_MAP_RADIUS  # as a batch of many distinct postcodes decides
    search = ShellSearch(graph, radius + 1, tables.loc_mass, tables.search_layout(along_map))
    one, deepest, ball, whole = [], [], [], 0.0
    median_shells, deepest_shells = [], []
    for source in sources:
        search.start(source)
        started = time.perf_counter()
        search.explore_to(radius)
        whole += time.perf_counter() - started
        explored = search._arrays.shell_ptr[1 : radius + 1].astype(np.float64)  # shells 0 .. h
        to_shell = np.append(explored, explored[-1])  # the tail needs the whole ball
        p = np.array(shell_probabilities(mechanism, search.masses[:radius].tolist(), total))
        one.append(float(p @ to_shell))
        law = deepest_of(p, mean_records)
        deepest.append(float(law @ to_shell))
        ball.append(float(explored[-1]))
        median_shells.append(int(np.searchsorted(np.cumsum(p), 0.5)))
        deepest_shells.append(int(np.searchsorted(np.cumsum(law), 0.5)))
    depth = int(np.median(median_shells)) + 1
    places = _places(tables) if along_map else None
    rng = random.Random(f"floor {epsilon}")
    batch = seconds_a_location(search, batch_stretch(graph, places, DISTINCT_ROWS, rng), depth)
    alone = seconds_a_location(search, rng.sample(range(len(graph)), TIMED_SOURCES // 4), depth)
    national_depth = int(np.median(deepest_shells)) + 1
    national = seconds_a_location(
        search, batch_stretch(graph, places, len(graph), rng), national_depth
    )
    cores = usable_cpus()
    return {
        "epsilon": epsilon,
        "radius": radius,
        "ns": batch * 1e9,
        "ns_alone": alone * 1e9,
        "ns_national": national * 1e9,
        "ns_whole": whole / sum(ball) * 1e9,
        "ball": float(np.mean(ball)),
        "one": float(np.mean(one)),
        "one_median": float(np.median(one)),
        "rate_floor": cores / (float(np.mean(one)) * batch),
        "mean_records": mean_records,
        "deepest": float(np.mean(deepest)),
        "national_s": float(np.mean(deepest)) * national * len(graph) / cores,
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
        "| floor, national file | search cost a location, to the median drawn shell: in a batch "
        "of distinct postcodes (one by one from random places; national file; whole ball) |"
        "\n|---|---|---|---|---|---|---|---|"
    )
    for epsilon in args.epsilons.split(","):
        f = floor_for(graph, epsilon, sources)
        print(
            f"| {f['epsilon']} | {f['radius']} | {f['ball']:,.0f} | {f['one']:,.0f} "
            f"({f['one_median']:,.0f}) | {f['rate_floor']:,.0f} records/s "
            f"| {f['deepest']:,.0f} ({f['mean_records']:.2f} records a postcode) "
            f"| {f['national_s']:,.0f} s | {f['ns']:.0f} ns ({f['ns_alone']:.0f}; "
            f"{f['ns_national']:.0f}; {f['ns_whole']:.0f}) |",
            flush=True,
        )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at end: {load}")


if __name__ == "__main__":
    main()
