"""The one-off cost of the ball-mass profile table (engine/profiles.py) and of the far-mass
rows (engine/cluster_balls.py): time, memory, disk.

Builds both for the national graph into an empty temporary cache directory, exactly as a
first release on the embedded graph does (``profiles_for`` with all usable CPUs), in a child
process whose wall time, CPU time and peak summed PSS (with its build workers) are measured;
then loads them back (content hashes checked), compares the table rows of a sample of
locations with single-source breadth-first searches, checks that their far-mass rows bound
those searches from above, and compares a few clusters' rows with searches from all their
members.  ``--smoke`` does the same on a small generated graph.

    /work/main/.venv/bin/python benchmarks/profiles_build.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perturb_national import load_average, run_cli  # noqa: E402

from postcode_privacy.engine import cluster_balls  # noqa: E402
from postcode_privacy.engine import profiles as engine_profiles  # noqa: E402
from postcode_privacy.engine.batch import usable_cpus  # noqa: E402
from postcode_privacy.engine.landmarks import graph_tables  # noqa: E402
from postcode_privacy.engine.search import location_distances  # noqa: E402
from postcode_privacy.engine.sweep import LocationSearch  # noqa: E402

_BUILD = """
import sys
from postcode_privacy.engine import profiles
from postcode_privacy.engine.landmarks import graph_tables
{graph}
profiles.CACHE_MIN_LOCATIONS = 1
profiles.profiles_for(graph, graph_tables(graph).loc_mass, workers={workers})
"""
_NATIONAL = "from postcode_privacy import default_graph\ngraph = default_graph(progress=False)"
_SMOKE = (
    "import numpy as np\nfrom postcode_privacy import Graph\n"
    "n = 3000\nnames = [f'N{i:05d}' for i in range(n)]\n"
    "edges = [(i, i + 1) for i in range(n - 1)] + [(i, i + 50) for i in range(n - 50)]\n"
    "graph = Graph.from_edges(names, edges)"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a small generated graph, seconds")
    parser.add_argument("--sample", type=int, default=200, help="rows checked against BFS")
    args = parser.parse_args()
    workers = usable_cpus()
    source = _SMOKE if args.smoke else _NATIONAL
    with tempfile.TemporaryDirectory() as cache:
        if not args.smoke:  # the graph itself comes from the usual cache: not measured here
            from postcode_privacy.graph.national import default_graph, default_graph_path

            default_graph(progress=False)
            graph_file = default_graph_path()
            os.symlink(graph_file, Path(cache) / graph_file.name)
        env_before = os.environ.get("POSTCODE_PRIVACY_CACHE")
        os.environ["POSTCODE_PRIVACY_CACHE"] = cache
        try:
            load_before = load_average()
            code = _BUILD.format(graph=source, workers=workers)
            # One run, sampled for its peak memory: a build of minutes is slowed only a little.
            measured = run_cli([sys.executable, "-W", "error", "-c", code], sample_memory=True)
            files = sorted(p for p in Path(cache).iterdir() if not p.is_symlink())
            headers = [json.loads(p.read_text()) for p in files if p.suffix == ".json"]
            size = sum(p.stat().st_size for p in files)
            namespace: dict = {}
            exec(source, namespace)  # the same graph, in this process
            graph = namespace["graph"]
            engine_profiles.CACHE_MIN_LOCATIONS = 1
            started = time.perf_counter()
            table = engine_profiles.load_profiles(graph)
            far = cluster_balls.load_cluster_balls(graph)
            load_seconds = time.perf_counter() - started
        finally:
            if env_before is None:
                del os.environ["POSTCODE_PRIVACY_CACHE"]
            else:
                os.environ["POSTCODE_PRIVACY_CACHE"] = env_before
        rng = np.random.default_rng(11)
        search = LocationSearch(graph)
        mass = graph_tables(graph).loc_mass
        locations = rng.choice(
            graph.n_locations, min(args.sample, graph.n_locations), replace=False
        )
        for loc in locations.tolist():
            expected = np.cumsum(search.shell_masses(loc, table.depth, mass))
            if not np.array_equal(np.asarray(table.cumulative[loc], dtype=np.int64), expected):
                raise SystemExit(f"location {loc}: the table differs from a breadth-first search")
            ball = np.cumsum(search.shell_masses(loc, far.depth, mass))
            if np.any(far.upper_row(loc, far.depth + 1) < ball):
                raise SystemExit(f"location {loc}: its far-mass row is below its balls")
        for loc in locations[:3].tolist():
            members = np.flatnonzero(far.cluster_of == far.cluster_of[loc])
            nearest = np.full(graph.n_locations, np.iinfo(np.int64).max)
            for member in members.tolist():
                hops = location_distances(graph, member).astype(np.int64)
                nearest = np.minimum(nearest, np.where(hops < 0, nearest, hops))
            expected = [int(mass[nearest <= j].sum()) for j in range(far.depth + 1)]
            if far.balls[far.cluster_of[loc]].tolist() != expected:
                raise SystemExit(f"location {loc}: its cluster's row differs from a search")
        clusters = far.balls.shape[0]
        del table, far
    print(
        f"graph: {graph.n_locations:,} locations; table depth {engine_profiles.DEPTH}; "
        f"{clusters:,} clusters of at most {cluster_balls.SIZE} locations, rows to "
        f"{cluster_balls.DEPTH} hops; "
        f"{workers} build processes; load average {load_before} → {load_average()}\n"
        f"build (first use, from an empty cache): {measured['wall']:.1f} s wall, "
        f"{measured['cpu']:.1f} s CPU, peak PSS {measured['peak_pss'] / 2**30:.2f} GiB "
        f"(RSS summed {measured['peak_rss'] / 2**30:.2f} GiB)\n"
        f"on disk: {size / 2**20:.1f} MiB in {len(files)} files; "
        f"load with content-hash check: {load_seconds:.2f} s; content sha256 "
        f"{', '.join(h['sha256'] for h in headers)}\n"
        f"{len(locations)} sampled rows equal single-source breadth-first searches, and their "
        f"far-mass rows bound them; 3 clusters' rows equal searches from all their members"
    )


if __name__ == "__main__":
    main()
