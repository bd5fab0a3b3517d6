"""What the shell search costs per location in each layout of the graph (engine/layout.py).

The same random sources are explored to each depth by three searches, which differ only in how
the location graph is laid out in memory:

- ``graph64``: the graph's own numbering and its int64 adjacency offsets (the search before the
  twelfth round read these);
- ``graph``: the graph's own numbering, int32 offsets (what a batch uses by default);
- ``map``: the locations numbered along a Hilbert curve of the map, int32 offsets (what a
  batch uses from radius 64 and 2,000 distinct postcodes).

The three take turns, in an order that alternates from pass to pass, and the median
nanoseconds per location explored over the passes is printed; every search must find the same
shell masses.  The time to build the map's layout is printed too.

    /work/main/.venv/bin/python benchmarks/search_layout.py
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time

import numpy as np

from postcode_privacy.engine.landmarks import graph_tables
from postcode_privacy.engine.layout import map_layout
from postcode_privacy.engine.search import ShellSearch
from postcode_privacy.graph.national import default_graph

# (depth, sources): about the drawn shells at epsilon 2 to 0.5, and the explorations of the
# records left undecided at 0.5
DEPTHS = [(8, 10_000), (14, 2_000), (30, 150), (55, 30)]
SMOKE_DEPTHS = [(4, 20), (8, 5)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=4, help="passes over each depth")
    parser.add_argument("--smoke", action="store_true", help="a few seconds; figures mean nothing")
    args = parser.parse_args()
    depths, passes = (SMOKE_DEPTHS, 2) if args.smoke else (DEPTHS, args.passes)

    graph = default_graph()
    tables = graph_tables(graph)
    graph_numbers = tables.search_layout(False)
    started = time.perf_counter()
    along_map = map_layout(graph, tables.loc_mass)
    built = time.perf_counter() - started
    layouts = {
        "graph64": dataclasses.replace(graph_numbers, indptr=graph.loc_indptr),
        "graph": graph_numbers,
        "map": along_map,
    }
    deepest = max(depth for depth, _ in depths)
    searches = {
        name: ShellSearch(graph, deepest, tables.loc_mass, layout)
        for name, layout in layouts.items()
    }
    for search in searches.values():  # load the kernels for each array type
        search.start(0)
        search.explore_to(3)
    print(f"map layout built in {built:.2f} s (includes compiling, on a first run)")
    for depth, count in depths:
        times: dict[str, list[float]] = {name: [] for name in searches}
        for p in range(passes):
            sources = random.Random(1000 * depth + p).sample(range(len(graph)), count)
            names = list(searches) if p % 2 == 0 else list(searches)[::-1]
            masses = {}
            for name in names:
                search, total, locations = searches[name], 0, 0
                started = time.perf_counter()
                for source in sources:
                    search.start(source)
                    search.explore_to(depth)
                    locations += search.locations_explored
                    total += int(search.masses[:depth].sum())
                times[name].append(1e9 * (time.perf_counter() - started) / locations)
                masses[name] = total
            if len(set(masses.values())) != 1:
                raise SystemExit(f"the layouts disagree at depth {depth}: {masses}")
        line = "  ".join(f"{name} {np.median(ns):.1f}" for name, ns in times.items())
        print(f"depth {depth} ({locations / count:,.0f} locations a source): {line} ns/location")


if __name__ == "__main__":
    main()
