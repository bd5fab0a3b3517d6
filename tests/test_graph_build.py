"""Graph construction: locations, Delaunay edges, cut and restore, determinism, the default graph."""

from __future__ import annotations

import itertools
import os
import warnings

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import Delaunay

from postcode_privacy import GraphError, InvalidParameterError
from postcode_privacy.graph import build as build_module
from postcode_privacy.graph.build import build_graph
from postcode_privacy.graph.graph import Graph
from postcode_privacy.graph.shells import hop_distances


def names(n: int) -> list[str]:
    """Valid, distinct postcodes: AB1 0AA, AB1 0AB, ..."""
    units = ["".join(p) for p in itertools.product("ABDEFGHJLNPQRSTUWXYZ", repeat=2)]
    return [f"AB{1 + i // 4000} {(i // 400) % 10}{units[i % 400]}" for i in range(n)]


def location_edges(graph: Graph) -> set[tuple[int, int]]:
    rows = np.repeat(np.arange(graph.n_locations), np.diff(graph.loc_indptr))
    return {(int(a), int(b)) for a, b in zip(rows, graph.loc_indices, strict=True) if a < b}


def edge_coordinates(graph: Graph) -> set[tuple[tuple[float, float], tuple[float, float]]]:
    xy = graph.location_coordinates
    return {tuple(sorted((tuple(xy[a]), tuple(xy[b])))) for a, b in location_edges(graph)}


def is_connected(graph: Graph) -> bool:
    n = graph.n_locations
    adj = csr_matrix(
        (np.ones(graph.loc_indices.size), graph.loc_indices, graph.loc_indptr), shape=(n, n)
    )
    return connected_components(adj, directed=False)[0] == 1


def same_graph(a: Graph, b: Graph) -> bool:
    return (
        a.sha256 == b.sha256
        and a.postcodes == b.postcodes
        and all(
            np.array_equal(getattr(a, k), getattr(b, k))
            for k in ("node_location", "loc_indptr", "loc_indices", "prior", "location_coordinates")
        )
    )


def grid_points(w: int, h: int, step: float = 100.0, origin=(0.0, 0.0)):
    xs, ys = np.meshgrid(np.arange(w) * step + origin[0], np.arange(h) * step + origin[1])
    return xs.ravel(), ys.ravel()


# -- locations and node order ---------------------------------------------------------------------


def test_node_order_is_sorted_normalised_postcodes():
    labels = ["ab1 0ab", "AB10AA", "  AB1 0AD", "ab1 0ae"]
    g = build_graph(labels, [0, 100, 0, 100], [0, 0, 100, 100])
    assert g.postcodes == ["AB1 0AA", "AB1 0AB", "AB1 0AD", "AB1 0AE"]
    # Coordinates travel with their postcode through the sort.
    assert g.coordinates("AB1 0AA") == (100.0, 0.0)
    assert g.coordinates("AB1 0AB") == (0.0, 0.0)


def test_co_located_postcodes_form_one_location_with_clique_distances():
    # Three postcodes at one point, two at another, and four single ones around them.
    pts = [
        (0, 0),
        (0, 0),
        (0, 0),
        (300, 40),
        (300, 40),
        (-250, 200),
        (90, -310),
        (500, 500),
        (-400, -380),
    ]
    labels = names(len(pts))
    g = build_graph(labels, [p[0] for p in pts], [p[1] for p in pts])
    assert g.n_locations == 6
    assert len(g) == 9
    # Locations are numbered by first member in node order.
    assert g.node_location.tolist() == [0, 0, 0, 1, 1, 2, 3, 4, 5]
    assert g.members(0).tolist() == [0, 1, 2]
    assert g.params["builder"] == "delaunay-triangle"
    assert g.provenance["build"]["co_located_nodes"] == 3
    assert g.provenance["build"]["largest_location"] == 3

    # The hop metric equals that of the expanded graph: each location a clique of its
    # postcodes, joined to every postcode of every neighbouring location.
    expanded = []
    for loc in range(g.n_locations):
        expanded += itertools.combinations(g.members(loc).tolist(), 2)
    for a, b in location_edges(g):
        expanded += itertools.product(g.members(a).tolist(), g.members(b).tolist())
    plain = Graph.from_edges(g.postcodes, expanded)
    for source in range(len(g)):
        assert hop_distances(g, source, 10).tolist() == hop_distances(plain, source, 10).tolist()
    # Co-located postcodes are one hop apart.
    assert hop_distances(g, 0, 10)[[1, 2]].tolist() == [1, 1]


def test_delaunay_edges_match_an_independent_triangulation():
    rng = np.random.default_rng(7)
    xy = rng.uniform(0, 10_000, size=(300, 2)).round(3)
    g = build_graph(names(300), xy[:, 0], xy[:, 1])
    tri = Delaunay(xy)
    expected = set()
    for simplex in tri.simplices:
        for a, b in itertools.combinations(simplex, 2):
            expected.add(tuple(sorted((tuple(xy[a]), tuple(xy[b])))))
    assert edge_coordinates(g) == expected
    assert g.provenance["build"]["delaunay_edges"] == len(expected)
    assert g.provenance["build"]["cut_edges"] == 0


# -- degenerate inputs ----------------------------------------------------------------------------


def test_single_location():
    g = build_graph(names(1), [5.0], [7.0])
    assert (len(g), g.n_locations, g.n_location_edges) == (1, 1, 0)
    g = build_graph(names(4), [5.0] * 4, [7.0] * 4)
    assert (len(g), g.n_locations, g.n_location_edges) == (4, 1, 0)
    assert hop_distances(g, 0, 5).tolist() == [0, 1, 1, 1]


def test_two_locations():
    g = build_graph(names(3), [0, 0, 1000], [0, 0, 0])
    assert g.n_locations == 2
    assert location_edges(g) == {(0, 1)}


@pytest.mark.parametrize("direction", [(1.0, 0.0), (0.0, 1.0), (3.0, -2.0)])
def test_collinear_points_become_a_path_in_order_along_the_line(direction):
    steps = np.array([0, 1, 2, 3, 5, 8, 13])
    x, y = steps * direction[0] * 100, steps * direction[1] * 100
    perm = np.random.default_rng(3).permutation(steps.size)
    labels = names(steps.size)
    g = build_graph([labels[i] for i in perm], x[perm], y[perm])
    expected = {tuple(sorted(((x[i], y[i]), (x[i + 1], y[i + 1])))) for i in range(steps.size - 1)}
    assert edge_coordinates(g) == expected
    assert is_connected(g)


def test_collinear_points_with_a_long_gap_keep_the_path():
    x = np.array([0.0, 100.0, 200.0, 200_000.0, 200_100.0])
    g = build_graph(names(5), x, np.zeros(5), max_edge_km=50)
    assert g.n_location_edges == 4
    assert g.provenance["build"]["cut_edges"] == 1
    assert g.provenance["build"]["restored_edges"] == 1


# -- cutting and restoring ------------------------------------------------------------------------


def test_long_edges_cut_and_the_shortest_restored_between_two_clusters():
    x1, y1 = grid_points(5, 5, step=1000.0)
    x2, y2 = grid_points(4, 4, step=1000.0, origin=(100_000.0, 30_000.0))
    x, y = np.concatenate([x1, x2]), np.concatenate([y1, y2])
    g = build_graph(names(x.size), x, y, max_edge_km=50)
    b = g.provenance["build"]
    assert b["cut_edges"] > 1
    assert b["components_after_cut"] == 2
    assert b["restored_edges"] == 1
    assert is_connected(g)
    xy = g.location_coordinates
    far = xy[:, 0] >= 100_000
    bridges = [(a, c) for a, c in location_edges(g) if far[a] != far[c]]
    assert len(bridges) == 1
    # The restored edge is the closest pair between the clusters (always a Delaunay edge).
    d = np.hypot(
        xy[~far][:, None, 0] - xy[far][None, :, 0], xy[~far][:, None, 1] - xy[far][None, :, 1]
    )
    a, c = bridges[0]
    assert np.isclose(np.hypot(*(xy[a] - xy[c])), d.min())
    assert b["restored_edge_length_m"]["max"] == pytest.approx(d.min(), abs=0.1)
    # Every kept edge is within the limit except the restored one.
    lengths = [np.hypot(*(xy[p] - xy[q])) for p, q in location_edges(g)]
    assert sum(length > 50_000 for length in lengths) == 1


def test_three_clusters_are_joined_by_a_minimum_spanning_forest():
    parts = [grid_points(3, 3, 500.0, o) for o in [(0, 0), (120_000, 0), (0, 200_000)]]
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    g = build_graph(names(x.size), x, y, max_edge_km=50)
    b = g.provenance["build"]
    assert (b["components_after_cut"], b["restored_edges"]) == (3, 2)
    assert is_connected(g)
    # The two shortest gaps (about 119 km and 199 km) are used, not the longest (about 233 km).
    assert b["restored_edge_length_m"]["max"] < 200_000


def test_a_disconnected_result_is_refused(monkeypatch):
    def isolated(points):  # a triangulation that misses the last point
        m = points.shape[0]
        return np.arange(m - 2, dtype=np.int64), np.arange(1, m - 1, dtype=np.int64)

    monkeypatch.setattr(build_module, "_delaunay_edges", isolated)
    with pytest.raises(GraphError, match="connected"):
        build_graph(names(5), [0, 1, 2, 3, 9], [0, 5, 0, 5, 9])


# -- determinism ----------------------------------------------------------------------------------


def test_same_inputs_give_the_same_graph_and_hash():
    rng = np.random.default_rng(11)
    xy = rng.integers(0, 5000, size=(400, 2)).astype(float)
    xy[50:60] = xy[40]  # a co-located group
    labels = names(400)
    prior = rng.integers(1, 50, size=400)
    a = build_graph(labels, xy[:, 0], xy[:, 1], prior)
    b = build_graph(labels, xy[:, 0], xy[:, 1], prior)
    assert same_graph(a, b)
    assert a.provenance["build"]["versions"]["triangle"]


def test_input_order_does_not_matter():
    # A regular grid: every square is four cocircular points, the degenerate case for Delaunay.
    x, y = grid_points(12, 9, step=100.0)
    x, y = np.concatenate([x, [550.0, 550.0]]), np.concatenate([y, [420.0, 420.0]])
    labels = names(x.size)
    prior = np.arange(1, x.size + 1)
    reference = build_graph(labels, x, y, prior)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(x.size)
        shuffled = build_graph([labels[i] for i in perm], x[perm], y[perm], prior[perm])
        assert same_graph(reference, shuffled)


def test_params_and_provenance():
    g = build_graph(
        names(4),
        [0, 1, 0, 1],
        [0, 0, 1, 1],
        max_edge_km=25,
        params_extra={"source": "test"},
        provenance={"sources": ["x"]},
    )
    assert g.params == {
        "builder": "delaunay-triangle",
        "max_edge_km": 25.0,
        "format": 1,
        "source": "test",
    }
    assert g.provenance["sources"] == ["x"]
    b = g.provenance["build"]
    for key in (
        "nodes",
        "locations",
        "location_edges",
        "node_edges",
        "cut_edges",
        "restored_edges",
        "edge_length_m",
        "versions",
    ):
        assert key in b
    assert "seconds" not in b  # no wall time: the same inputs, the same bytes
    assert b["edge_length_m"]["p50"] >= 1.0
    # An integer limit hashes like the same float: the params are normalised.
    assert (
        build_graph(
            names(4), [0, 1, 0, 1], [0, 0, 1, 1], max_edge_km=25, params_extra={"source": "test"}
        ).sha256
        == g.sha256
    )
    other = build_graph(
        names(4), [0, 1, 0, 1], [0, 0, 1, 1], max_edge_km=26, params_extra={"source": "test"}
    )
    assert other.sha256 != g.sha256


# -- refused inputs -------------------------------------------------------------------------------


def test_refused_inputs():
    with pytest.raises(GraphError, match="unique"):
        build_graph(["AB1 0AA", "ab10aa"], [0, 1], [0, 1])
    with pytest.raises(GraphError, match="finite"):
        build_graph(names(2), [0, np.nan], [0, 1])
    with pytest.raises(GraphError):
        build_graph(names(2), [0, 1, 2], [0, 1])
    with pytest.raises(GraphError):
        build_graph([], [], [])
    for bad in (0, -1, float("inf"), float("nan"), "50", True):
        with pytest.raises(InvalidParameterError):
            build_graph(names(2), [0, 1], [0, 1], max_edge_km=bad)
    with pytest.raises(InvalidParameterError, match="reserved"):
        build_graph(names(2), [0, 1], [0, 1], params_extra={"builder": "mine"})
    with pytest.raises(InvalidParameterError):
        build_graph(names(2), [0, 1], [0, 1], prior=[1, 0])
    with pytest.raises(InvalidParameterError):
        build_graph(names(2), [0, 1], [0, 1], prior=[1, 2, 3])


# -- the default graph's cache, on a stand-in graph -----------------------------------------------


@pytest.fixture
def bundled(monkeypatch, tmp_path):
    from postcode_privacy.graph import national as bundled

    calls = []

    def fake_build(progress=False):
        calls.append(progress)
        return build_graph(
            names(6),
            [0, 1, 2, 0, 1, 2],
            [0, 0, 0, 1, 1, 1],
            params_extra={"source": "bundled-codepoint", "prior": "uniform"},
        )

    monkeypatch.setenv(bundled.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(bundled, "_default", None)
    monkeypatch.setattr(bundled, "_inputs_hash", lambda: "0" * 64)
    monkeypatch.setattr(bundled, "build_from_sources", fake_build)
    # The stand-in graph plays the pinned default graph.
    monkeypatch.setattr(bundled, "DEFAULT_GRAPH_SHA256", fake_build().sha256)
    calls.clear()
    bundled.calls = calls
    yield bundled
    del bundled.calls


def test_default_graph_is_built_once_then_cached(bundled, tmp_path):
    g = bundled.default_graph(progress=False)
    assert bundled.default_graph() is g  # in-process cache
    path = bundled.default_graph_path()
    assert path.parent == tmp_path and path.exists()
    assert "osv" in path.name and path.name.endswith(".ppgraph")
    assert bundled.calls == [False]
    bundled._default = None
    again = bundled.default_graph()
    assert bundled.calls == [False]  # loaded from the file, not rebuilt
    assert again.sha256 == g.sha256 and again is not g
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_default_graph_rebuilds_a_damaged_cache(bundled):
    g = bundled.default_graph(progress=False)
    path = bundled.default_graph_path()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    bundled._default = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = bundled.default_graph(progress=False)
    assert any("integrity" in str(w.message) for w in caught)
    assert len(bundled.calls) == 2 and again.sha256 == g.sha256
    bundled._default = None
    assert bundled.default_graph().sha256 == g.sha256
    assert len(bundled.calls) == 2


@pytest.mark.parametrize("blocked", ["directory at its name", "read-only directory"])
def test_a_cache_that_cannot_be_written_costs_a_warning_not_the_run(
    bundled, tmp_path, monkeypatch, blocked
):
    """A graph cache that could not be written failed the release after the graph was built,
    saying "cannot write in the output directory" of a writable output directory (a review
    across machines, round 30): the write goes through a release's writer, whose errors were
    not the OSError the fallback caught.  The run now goes on with the graph it built."""
    path = bundled.default_graph_path()
    if blocked == "directory at its name":
        path.mkdir()
    elif os.geteuid() == 0:  # (root writes anywhere: a directory under a file cannot be made)
        (tmp_path / "file").write_bytes(b"")
        monkeypatch.setenv(bundled.CACHE_ENV, str(tmp_path / "file" / "cache"))
    else:
        tmp_path.chmod(0o500)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graph = bundled.default_graph(progress=False)
    finally:
        tmp_path.chmod(0o700)
    assert graph.sha256 == bundled.DEFAULT_GRAPH_SHA256 and bundled.calls == [False]
    (failed,) = [str(w.message) for w in caught if "could not cache" in str(w.message)]
    assert failed.startswith("could not cache the national graph in ") and "output" not in failed
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "file"]


def test_a_default_build_with_a_perturbed_parameter_is_refused(bundled, monkeypatch, tmp_path):
    def perturbed_build(progress=False):  # 49.999 km instead of 50: another graph, another hash
        return build_graph(
            names(6),
            [0, 1, 2, 0, 1, 2],
            [0, 0, 0, 1, 1, 1],
            max_edge_km=49.999,
            params_extra={"source": "bundled-codepoint", "prior": "uniform"},
        )

    monkeypatch.setattr(bundled, "build_from_sources", perturbed_build)
    with pytest.raises(GraphError, match="not the pinned default graph"):
        bundled.default_graph(progress=False)
    assert list(tmp_path.iterdir()) == []  # nothing cached
    assert bundled._default is None


def test_a_cached_default_that_is_not_the_pinned_graph_is_refused(bundled):
    g = bundled.default_graph(progress=False)
    path = bundled.default_graph_path()
    # A valid artefact with the expected parameters but other content (one coordinate moved).
    other = build_graph(
        names(6),
        [0, 1, 2, 0, 1, 3],
        [0, 0, 0, 1, 1, 1],
        params_extra={"source": "bundled-codepoint", "prior": "uniform"},
    )
    assert other.params == g.params and other.sha256 != g.sha256
    path.unlink()
    other.save(path)
    bundled._default = None
    with pytest.raises(GraphError, match="not the pinned default graph"):
        bundled.default_graph(progress=False)
    assert bundled.calls == [False]  # refused, not silently rebuilt or used


def test_the_pinned_hash_is_the_published_one():
    from postcode_privacy.graph import national as bundled

    assert bundled.DEFAULT_GRAPH_SHA256 == (
        "fa62b94e917244d583a882e8cf3a2a75c86202274e1a942a9b59d1d131255d8c"
    )


def test_the_pinned_triangle_is_installed():
    from importlib import metadata

    assert metadata.version("triangle") == "20250106"


# -- exact graph-shaping arithmetic ---------------------------------------------------------------


def test_an_edge_of_exactly_the_limit_is_kept_and_one_just_longer_is_cut():
    # 3-4-5: exactly 50 km.  The third point keeps the graph connected without the long edge.
    exact = build_graph(names(3), [0, 30_000, 0], [0, 40_000, 1], max_edge_km=50)
    assert exact.provenance["build"]["cut_edges"] == 0
    longer = build_graph(names(3), [0, 30_000, 0], [0, 40_001, 1], max_edge_km=50)
    assert longer.provenance["build"]["cut_edges"] >= 1
    assert exact.sha256 != longer.sha256


def test_the_cut_is_exact_where_floating_point_rounds():
    # 100,000 km limit, an edge of sqrt(1e16 + 1) m: float hypot rounds it to exactly 1e8 m
    # (kept); exactly it is longer than the limit, so it is cut (then restored: the only bridge).
    assert np.hypot(1e8, 1.0) == 1e8
    g = build_graph(names(2), [0, 1e8], [0, 1], max_edge_km=100_000)
    b = g.provenance["build"]
    assert (b["cut_edges"], b["restored_edges"]) == (1, 1)
    at_limit = build_graph(names(2), [0, 1e8], [0, 0], max_edge_km=100_000)
    assert at_limit.provenance["build"]["cut_edges"] == 0


def test_the_limit_is_the_decimal_it_prints_as():
    # 0.3 km is exactly 300 m (the binary float 0.3 is slightly less).
    g = build_graph(names(3), [0, 300, 150], [0, 0, 1], max_edge_km=0.3)
    assert g.provenance["build"]["cut_edges"] == 0
    g = build_graph(names(3), [0, 301, 150], [0, 0, 1], max_edge_km=0.3)
    assert g.provenance["build"]["cut_edges"] == 1


def test_fractional_coordinates_are_measured_exactly_too():
    g = build_graph(names(3), [0.25, 30_000.25, 0.25], [0.5, 40_000.5, 1.5], max_edge_km=50)
    assert g.provenance["build"]["cut_edges"] == 0
    g = build_graph(names(3), [0.25, 30_000.25, 0.25], [0.5, 40_000.75, 1.5], max_edge_km=50)
    assert g.provenance["build"]["cut_edges"] == 1


def test_restoring_prefers_the_exactly_shorter_bridge_where_floats_tie():
    # N00 alone at the origin; N01 and N02 one metre apart, 100,000 km away.  The bridges
    # N00-N02 (exactly 1e8 m) and N00-N01 (sqrt(1e16 + 1) m) have equal float lengths, so a
    # float order falls back to location numbers and picks N00-N01; the exact order picks the
    # shorter N00-N02.
    assert np.hypot(1e8, 1.0) == np.hypot(1e8, 0.0)
    g = build_graph(names(3), [0, 1e8, 1e8], [0, 1, 0], max_edge_km=1)
    assert g.provenance["build"]["restored_edges"] == 1
    assert location_edges(g) == {(0, 2), (1, 2)}


def test_build_from_sources_refuses_two_sources():
    from postcode_privacy.graph.national import build_from_sources

    with pytest.raises(InvalidParameterError):
        build_from_sources(codepoint="a", onspd="b")


# -- the real national graph (about 20 s on two cores) --------------------------------------------


@pytest.mark.national  # builds its own copy from an empty cache: the build is what is tested
def test_national_default_graph(monkeypatch, tmp_path):
    from postcode_privacy.graph import national as bundled

    monkeypatch.setenv(bundled.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(bundled, "_default", None)
    g = bundled.default_graph(progress=False)
    assert len(g) == 1_739_034
    assert g.n_locations == 1_678_016
    assert is_connected(g)
    assert g.params == {
        "builder": "delaunay-triangle",
        "format": 1,
        "max_edge_km": 50.0,
        "source": "bundled-codepoint",
        "prior": "uniform",
    }
    labels = np.array(g.postcodes)
    assert np.all(labels[1:] > labels[:-1])
    assert g.provenance["build"]["location_edges"] == g.n_location_edges
    monkeypatch.setattr(bundled, "_default", None)
    loaded = bundled.default_graph()
    assert loaded.sha256 == g.sha256
    # Built from an empty cache by this platform's exact arithmetic: the pinned graph.
    assert g.sha256 == "fa62b94e917244d583a882e8cf3a2a75c86202274e1a942a9b59d1d131255d8c"
