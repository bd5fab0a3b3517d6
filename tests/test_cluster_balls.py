"""The far-mass rows (engine/cluster_balls.py) and the engine path that reads them.

Each cluster's row must be the exact mass within j hops of the cluster; the row a location gets
must bound every one of its nodes' balls from above (the only property the engine relies on);
the engine with the rows must give exactly the reference sampler's outputs and must actually
settle records with them; a row that is too small must be caught or change outputs (so the
identity tests would see it); and a cached file must be refused unless every byte checks out.
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest
from test_fast_path import planar_graph, random_case

from postcode_privacy import Key, Mechanism
from postcode_privacy.engine import FastSampler, ball_sweeps, cluster_balls, perturb_many
from postcode_privacy.engine import batch as engine_batch
from postcode_privacy.engine import profiles as engine_profiles
from postcode_privacy.engine.landmarks import GraphTables
from postcode_privacy.engine.search import location_distances
from postcode_privacy.graph.shells import node_shells
from postcode_privacy.mechanism.subject import canonical_subject_id


def loc_mass(graph) -> np.ndarray:
    return GraphTables(graph).loc_mass


def small_clusters(monkeypatch, size: int, hops: int, depth: int) -> None:
    monkeypatch.setattr(cluster_balls, "SIZE", size)
    monkeypatch.setattr(cluster_balls, "HOPS", hops)
    monkeypatch.setattr(cluster_balls, "DEPTH", depth)


def cluster_hops(graph, members: np.ndarray) -> np.ndarray:
    """Hop distance from the nearest member to every location (a large number if none)."""
    far = np.iinfo(np.int64).max // 4
    best = np.full(graph.n_locations, far, dtype=np.int64)
    for m in members.tolist():
        d = location_distances(graph, m).astype(np.int64)
        best = np.minimum(best, np.where(d < 0, far, d))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_rows_are_the_clusters_balls_and_bound_every_node(seed, monkeypatch):
    """Every cluster's row is the exact mass within j hops of the cluster (an independent
    search from each member), the clusters partition the locations within the size and hop
    limits, and every node's reference balls weigh no more than its location's row."""
    rng = random.Random(700 + seed)
    size, hops, depth = [(1, 0, 5), (3, 1, 9), (8, 2, 4), (64, 6, 12), (5, 3, 0), (2, 1, 30)][seed]
    small_clusters(monkeypatch, size, hops, depth)
    checked = 0
    for keep in (1.0, 0.5):
        graph = planar_graph(rng, rng.randrange(2, 60), 80, keep, rng.choice([1, 30]), seed % 2)
        mass = loc_mass(graph)
        balls, cluster_of = cluster_balls.build_cluster_balls(graph, mass)
        far = cluster_balls.ClusterBalls(balls, cluster_of, graph)
        assert balls.shape == (cluster_of.max() + 1, depth + 1)
        for c in range(balls.shape[0]):
            members = np.flatnonzero(cluster_of == c)
            assert 1 <= members.size <= size
            spread = [cluster_hops(graph, np.array([m]))[members].max() for m in members]
            assert min(spread) <= hops  # some member reaches every other within the limit
            distance = cluster_hops(graph, members)
            expected = [int(mass[distance <= j].sum()) for j in range(depth + 1)]
            assert balls[c].tolist() == expected
        radius = depth + 4
        for node in range(len(graph)):
            row = far.upper_row(int(graph.node_location[node]), radius).tolist()
            shells = node_shells(graph, node, radius - 1)
            ball = np.cumsum([int(graph.prior[s].sum()) for s in shells]).tolist()
            assert all(q >= b for q, b in zip(row, ball)), (node, row, ball)
            assert row == sorted(row) and row[-1] <= graph.total_prior
            assert row[depth + 1 :] == [graph.total_prior] * (radius - depth - 1)
            checked += 1
    assert checked > 100


def test_the_engine_settles_records_with_the_rows_and_equals_the_reference(monkeypatch):
    """With a shallow profile table and small clusters, records are settled by the rows (the
    ``row_hits`` path is taken, and the floor's after it) and every output is the reference
    sampler's."""
    small_clusters(monkeypatch, 4, 1, 30)
    rng = random.Random(41)
    row_hits = floor_hits = records = 0
    cases = [random_case(rng) for _ in range(40)]  # odd shapes, radii and priors
    for eps in ("0.5", "1.2", "1.5", "2"):  # and larger graphs where the rows do the work
        graph = planar_graph(rng, 300, 330, rng.choice([1.0, 0.9]), 8)
        codes = [graph.label(rng.randrange(len(graph))) for _ in range(200)]
        ids = [str(rng.randrange(10**9)) for _ in codes]
        cases.append((Mechanism(graph, eps), Key.from_bytes(rng.randbytes(32)), ids, codes))
    for mechanism, key, ids, codes in cases:
        graph = mechanism.graph
        table = engine_profiles.BallProfiles(
            engine_profiles.build_profiles(graph, loc_mass(graph), rng.choice([1, 2, 4])), graph
        )
        table.far = cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=False)
        floor = rng.random() < 0.8  # mostly with the floor; its outputs are the same without
        sampler = FastSampler(mechanism, profiles=table, landmarks=rng.random() < 0.3, floor=floor)
        context = mechanism.stream_context(key)
        got = []
        for subject, code in zip(ids, codes):
            node = graph.index_of(code)
            draw = sampler.sample_group(context, node, [canonical_subject_id(subject)])
            got.append(graph.label(draw[0]))
        assert got == mechanism.perturb_reference(key, ids, codes)
        row_hits += sampler.stats["row_hits"]
        floor_hits += sampler.stats["floor_hits"]
        records += len(ids)
    assert row_hits > records / 20, (row_hits, records)  # the path is taken, often
    assert floor_hits > 0  # and so is the floor's


def test_the_rows_bound_kept_by_cluster_is_the_bound_from_the_whole_row(monkeypatch):
    """``FastSampler`` keeps the part of a far-mass row's bound on Z that depends on the row
    alone, by cluster: for every node, at several depths, asked first and again (kept), the
    bound is ``bounds.z_high_by_row``'s from the node's whole row, and None where that is None (here a
    row made unusable by a step down, and one whose first entry is below the explored
    mass)."""
    from postcode_privacy.engine import bounds, fast

    small_clusters(monkeypatch, 6, 2, 12)
    rng = random.Random(17)
    graph = planar_graph(rng, 120, 140, 1.0, 8)
    mechanism = Mechanism(graph, "0.6")
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, loc_mass(graph), 3), graph
    )
    far = cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=False)
    balls = far.balls.copy()
    balls[0, 5:] = balls[0, 4] - 1  # cluster 0's row steps down: unusable from there on
    table.far = cluster_balls.ClusterBalls(balls, far.cluster_of, graph)
    sampler = FastSampler(mechanism, profiles=table)
    radius, powers, total = mechanism.radius, mechanism.powers, graph.total_prior
    seen = set()
    for _ in range(2):  # the second time from what was kept
        for node in range(len(graph)):
            for depth in (2, 3, 6):
                sampler.search.start(node)
                sampler.search.explore_to(depth)
                walk = fast._CompiledWalk(sampler.search, powers)
                for explored in (walk.explored_mass, walk.explored_mass + 10**6):
                    got = sampler.sources.rows_z_high(node, walk.cumulative, explored)
                    row = table.far.upper_row(int(graph.node_location[node]), radius)
                    want = bounds.z_high_by_row(
                        walk.cumulative, explored, row, powers, radius, total
                    )
                    assert got == want, (node, depth, explored)
                    seen.add(want is None)
    assert seen == {True, False}


def test_outputs_do_not_depend_on_the_rows(monkeypatch):
    """Rows on or off, clusters small or large, one worker or two: the same outputs."""
    rng = random.Random(5)
    graph = planar_graph(rng, 200, 240, 1.0, 20)
    mechanism = Mechanism(graph, "0.7")
    key = Key.from_bytes(rng.randbytes(32))
    ids = [str(rng.randrange(10**9)) for _ in range(3000)]
    nodes = np.array([rng.randrange(len(graph)) for _ in range(3000)])
    base = engine_batch.perturb_nodes(mechanism, key, ids, nodes, workers=1, profiles=False)
    monkeypatch.setattr(engine_profiles, "DEPTH", 2)
    for size, hops in ((1, 0), (6, 2), (64, 6)):
        small_clusters(monkeypatch, size, hops, 20)
        engine_profiles._TABLES.clear()
        for workers in (1, 2):
            got = engine_batch.perturb_nodes(
                mechanism, key, ids, nodes, workers=workers, profiles=True
            )
            assert np.array_equal(got, base), (size, workers)
        assert engine_profiles._TABLES[graph].far is not None  # the rows were in use


def test_rows_that_are_too_small_are_caught(monkeypatch):
    """Mutation check: rows lowered below the true balls are refused by the engine's check
    against the balls it explores, or change outputs (which the identity tests see)."""
    small_clusters(monkeypatch, 3, 1, 30)
    rng = random.Random(29)
    differing = refused = 0
    for _ in range(40):
        mechanism, key, ids, codes = random_case(rng)
        graph = mechanism.graph
        table = engine_profiles.BallProfiles(
            engine_profiles.build_profiles(graph, loc_mass(graph), 0), graph
        )
        balls, cluster_of = cluster_balls.build_cluster_balls(graph, loc_mass(graph))
        wrong = balls.copy()
        wrong[:, 1:] = np.maximum(wrong[:, :1], wrong[:, 1:] // 4)  # too small, still monotone
        table.far = cluster_balls.ClusterBalls(wrong, cluster_of, graph)
        monkeypatch.setattr(engine_batch, "profiles_to_use", lambda *a, table=table, **k: table)
        try:
            got = perturb_many(mechanism, key, ids, codes, workers=1)
        except RuntimeError as exc:
            assert "disagree" in str(exc)
            refused += 1
            continue
        differing += got != mechanism.perturb_reference(key, ids, codes)
    assert refused > 0 and differing + refused > 20, (differing, refused)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory, and small clusters."""
    monkeypatch.setenv("POSTCODE_PRIVACY_CACHE", str(tmp_path))
    small_clusters(monkeypatch, 4, 1, 7)
    return tmp_path


def test_a_cached_build_in_workers_equals_the_in_memory_build(cache):
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    built = cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=True, workers=2)
    balls, cluster_of = cluster_balls.build_cluster_balls(graph, loc_mass(graph))
    assert np.array_equal(np.asarray(built.balls), balls)
    assert np.array_equal(built.cluster_of, cluster_of)
    assert not [p for p in cache.iterdir() if ".partial-" in p.name]
    loaded = cluster_balls.load_cluster_balls(graph)
    assert np.array_equal(np.asarray(loaded.balls), balls)


def test_rows_of_other_parameters_are_removed_after_a_build(cache):
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    mine = f"clusters-{graph.sha256[:32]}-"
    stale = [cache / f"{mine}s128-h8-d96.npy", cache / f"{mine}s128-h8-d96.json"]
    kept = [cache / f"{mine}s4-h1-d7.partial-1.npy", cache / f"clusters-{'0' * 32}-s1-h1-d1.npy"]
    for path in stale + kept:
        path.write_bytes(b"x")
    cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=True)
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in kept)


def test_a_cached_file_is_refused_unless_every_byte_checks_out(cache):
    """A corrupt, truncated, stale or mislabelled file is refused with a warning and rebuilt,
    never used."""
    graph = planar_graph(random.Random(9), 60, 70, 1.0, 8)
    cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=True)
    balls_path, of_path, header_path = cluster_balls._paths(graph)
    good_balls, good_of = balls_path.read_bytes(), of_path.read_bytes()
    header = json.loads(header_path.read_text())

    def refused(match):
        fresh = planar_graph(random.Random(9), 60, 70, 1.0, 8)  # same content, new object
        with pytest.raises(ValueError, match=match):
            cluster_balls.load_cluster_balls(fresh)
        with pytest.warns(RuntimeWarning, match="refused"):
            assert cluster_balls.cached_cluster_balls(fresh) is None
        with pytest.warns(RuntimeWarning, match="refused"):
            cluster_balls.cluster_balls_for(fresh, loc_mass(fresh), cache=True)
        assert balls_path.read_bytes() == good_balls and of_path.read_bytes() == good_of

    flipped = bytearray(good_balls)
    flipped[-3] ^= 1  # one mass, one bit
    balls_path.write_bytes(bytes(flipped))
    refused("content hash")
    moved = bytearray(good_of)
    moved[-4] ^= 1  # one location moved to another cluster
    of_path.write_bytes(bytes(moved))
    refused("content hash")
    header_path.write_text(json.dumps({**header, "graph_sha256": "0" * 64}))
    refused("another graph")
    header_path.write_text(json.dumps({**header, "size": 5}))
    refused("other parameters")
    balls_path.write_bytes(good_balls[: len(good_balls) // 2])
    refused(None)


def test_pinned_rows_are_refused_even_with_a_recomputed_header(cache, monkeypatch):
    """For a graph whose rows are pinned (the embedded one), edited rows are refused even when
    the header's hash was rewritten; a build that differs from the pin is not used."""
    graph = planar_graph(random.Random(12), 60, 70, 1.0, 8)
    built = cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=True)
    balls_path, _, header_path = cluster_balls._paths(graph)
    good = balls_path.read_bytes()
    pin = (graph.sha256, 4, 1, 7)
    monkeypatch.setitem(
        cluster_balls.PINNED_SHA256,
        pin,
        ball_sweeps.table_sha256(built.cluster_of, np.asarray(built.balls)),
    )
    edited = np.load(balls_path)
    edited[:, 2:] = edited[:, 2:] // 2 + 1
    np.save(balls_path, edited)
    header = json.loads(header_path.read_text())
    header["sha256"] = ball_sweeps.table_sha256(built.cluster_of, edited)
    header_path.write_text(json.dumps(header))
    fresh = planar_graph(random.Random(12), 60, 70, 1.0, 8)
    with pytest.raises(ValueError, match="pinned"):
        cluster_balls.load_cluster_balls(fresh)
    with pytest.warns(RuntimeWarning, match="refused"):
        cluster_balls.cluster_balls_for(fresh, loc_mass(fresh), cache=True)
    assert balls_path.read_bytes() == good
    monkeypatch.setitem(cluster_balls.PINNED_SHA256, pin, "0" * 64)
    for path in cluster_balls._paths(graph):
        path.unlink()
    with pytest.raises(ValueError, match="pinned"):
        cluster_balls.cluster_balls_for(fresh, loc_mass(fresh), cache=True)
    assert list(cache.iterdir()) == []


def test_files_that_are_not_rows_are_refused_not_crashed_on(cache):
    """A header that is JSON but not an object, a one-dimensional array, clusters that do not
    exist and rows that cannot be this graph's (each with a recomputed header hash, as for a
    custom graph, which has no pin) are refused with a warning and rebuilt."""
    graph = planar_graph(random.Random(19), 60, 70, 1.0, 8)
    built = cluster_balls.cluster_balls_for(graph, loc_mass(graph), cache=True)
    balls_path, of_path, header_path = cluster_balls._paths(graph)
    good = [path.read_bytes() for path in (balls_path, of_path, header_path)]
    balls, cluster_of = np.asarray(built.balls).copy(), built.cluster_of.copy()

    def rewrite(new_balls, new_of):
        np.save(balls_path, new_balls)
        np.save(of_path, new_of)
        header = json.loads(good[2])
        header["sha256"] = ball_sweeps.table_sha256(new_of, new_balls)
        header_path.write_text(json.dumps(header))

    def refused():
        fresh = planar_graph(random.Random(19), 60, 70, 1.0, 8)
        with pytest.warns(RuntimeWarning, match="refused"):
            assert cluster_balls.cached_cluster_balls(fresh) is None
        for path, data in zip((balls_path, of_path, header_path), good):
            path.write_bytes(data)

    header_path.write_text("[1, 2]")
    refused()
    np.save(balls_path, balls[:, 0].copy())
    refused()
    moved = cluster_of.copy()
    moved[0] = -1
    rewrite(balls, moved)
    refused()
    moved[0] = balls.shape[0]
    rewrite(balls, moved)
    refused()
    shrunk = balls.copy()
    shrunk[:, 1:] = shrunk[:, :1]  # too small past hop 0, still non-decreasing
    shrunk[0, 0] -= 1  # and one cluster lighter than its own locations
    rewrite(shrunk, cluster_of)
    refused()
    assert cluster_balls.cached_cluster_balls(graph) is not None  # the good files still load


def test_a_build_that_is_not_the_pinned_one_is_not_used_and_not_repeated(
    cache, monkeypatch, count_calls
):
    """In memory (an unwritable cache) as in the cache, rows that differ from the pin are not
    used; the table keeps working without them, and later batches do not build them again."""
    monkeypatch.setattr(engine_profiles, "CACHE_MIN_LOCATIONS", 1)
    monkeypatch.setattr(engine_profiles, "DEPTH", 3)
    graph = planar_graph(random.Random(23), 80, 90, 1.0, 8)
    mass = loc_mass(graph)
    monkeypatch.setitem(cluster_balls.PINNED_SHA256, (graph.sha256, 4, 1, 7), "0" * 64)
    with pytest.raises(ValueError, match="pinned"):
        cluster_balls.cluster_balls_for(graph, mass, cache=False)
    builds = count_calls(cluster_balls, "build_cluster_balls")
    for unwritable in (False, True):
        engine_profiles._TABLES.clear()
        builds.clear()
        if unwritable:  # writing the rows fails: they are built in memory, and still refused
            monkeypatch.setattr(np.lib.format, "open_memmap", _denied)
        with pytest.warns(RuntimeWarning) as caught:
            table = engine_profiles.profiles_to_use(graph, mass, 1, True, 1)
        assert "not used" in str(caught[-1].message)
        assert table is not None and table.far is None and table.far_refused
        assert engine_profiles.profiles_to_use(graph, mass, 1, True, 1) is table
        assert len(builds) == (2 if unwritable else 1), unwritable  # not tried again


def test_the_rows_replace_the_landmark_tables_where_they_reach(monkeypatch):
    """A batch whose far-mass rows reach half the radius or more does not build the landmark
    tables (the rows bound the far mass more tightly); with shallower rows (records explore
    past them) or without rows it does, for as many distinct postcodes.  Outputs are the same."""
    monkeypatch.setattr(engine_batch, "LANDMARK_SHARE", 10**6)  # landmarks for any batch
    monkeypatch.setattr(engine_profiles, "DEPTH", 1)
    rng = random.Random(2)
    for rows, landmarks_built in (("deep", False), ("shallow", True), ("none", True)):
        graph = planar_graph(rng, 120, 130, 1.0, 8)
        mechanism = Mechanism(graph, "0.5")
        radius = mechanism.radius
        small_clusters(monkeypatch, 4, 1, radius // 2 if rows == "deep" else radius // 4)
        key = Key.from_bytes(rng.randbytes(32))
        nodes = np.arange(200) % len(graph)
        ids = [str(i) for i in range(200)]
        if rows == "none":
            monkeypatch.setattr(engine_profiles, "cluster_balls_for", _refuse)
            with pytest.warns(RuntimeWarning, match="not used"):
                got = engine_batch.perturb_nodes(
                    mechanism, key, ids, nodes, workers=1, profiles=True
                )
        else:
            got = engine_batch.perturb_nodes(mechanism, key, ids, nodes, workers=1, profiles=True)
        expected = mechanism.perturb_reference(key, ids, [graph.label(v) for v in nodes])
        assert [graph.label(v) for v in got] == expected
        assert (engine_batch.graph_tables(graph).landmarks is not None) == landmarks_built, rows


def _denied(*args, **kwargs):
    raise PermissionError(13, "Permission denied")


def _refuse(*args, **kwargs):
    raise ValueError("not the pinned rows")


def test_refused_rows_are_reported_once_and_rebuilt(cache, monkeypatch, count_calls):
    """A cached table whose rows are refused: the release that may build reports the refusal
    once (the rows are looked up and hashed once, when the table loads) and rebuilds them."""
    monkeypatch.setattr(engine_profiles, "CACHE_MIN_LOCATIONS", 1)
    monkeypatch.setattr(engine_profiles, "DEPTH", 5)
    graph = planar_graph(random.Random(4), 80, 90, 1.0, 8)
    mass = loc_mass(graph)
    engine_profiles.profiles_for(graph, mass)
    balls_path = cluster_balls._paths(graph)[0]
    good = balls_path.read_bytes()
    damaged = bytearray(good)
    damaged[-3] ^= 1
    balls_path.write_bytes(bytes(damaged))
    engine_profiles._TABLES.clear()
    loads = count_calls(cluster_balls, "load_cluster_balls")
    fresh = planar_graph(random.Random(4), 80, 90, 1.0, 8)
    with pytest.warns(RuntimeWarning) as caught:
        used = engine_profiles.profiles_to_use(fresh, mass, 1, True, 1)
    refusals = [w for w in caught if "far-mass rows were refused" in str(w.message)]
    assert len(refusals) == 1 and len(loads) == 1, ([str(w.message) for w in caught], loads)
    assert used is not None and used.far is not None
    assert balls_path.read_bytes() == good  # rebuilt, the same rows


def test_the_embedded_graphs_rows_are_pinned():
    from postcode_privacy.graph.national import DEFAULT_GRAPH_SHA256

    key = (DEFAULT_GRAPH_SHA256, cluster_balls.SIZE, cluster_balls.HOPS, cluster_balls.DEPTH)
    assert key in cluster_balls.PINNED_SHA256


def test_a_profile_table_gets_its_rows_when_a_build_is_allowed(cache, monkeypatch):
    """A table cached by an earlier version (no rows yet) gets its rows from the first release
    allowed to build; "cached" never builds them, and a cached table is found with its rows."""
    monkeypatch.setattr(engine_profiles, "CACHE_MIN_LOCATIONS", 1)
    monkeypatch.setattr(engine_profiles, "DEPTH", 5)
    graph = planar_graph(random.Random(3), 80, 90, 1.0, 8)
    mass = loc_mass(graph)
    engine_profiles.profiles_for(graph, mass)
    for path in cluster_balls._paths(graph):
        path.unlink()
    engine_profiles._TABLES.clear()
    fresh = planar_graph(random.Random(3), 80, 90, 1.0, 8)
    cached = engine_profiles.profiles_to_use(fresh, mass, 1, "cached", 1)
    assert cached is not None and cached.far is None
    used = engine_profiles.profiles_to_use(fresh, mass, 1, True, 1)
    assert used is cached and used.far is not None
    assert all(path.exists() for path in cluster_balls._paths(graph))
    engine_profiles._TABLES.clear()
    again = planar_graph(random.Random(3), 80, 90, 1.0, 8)
    assert engine_profiles.cached_profiles(again).far is not None


# -- the national graph ------------------------------------------------------------------------


def _partial_rows(graph, locations) -> cluster_balls.ClusterBalls:
    """True rows for the clusters of ``locations`` (zeros elsewhere): the builder's own
    clusters and kernel on the national graph, without the full build's minute."""
    net = ball_sweeps.Sweeps(graph, loc_mass(graph), cluster_balls.SIZE, cluster_balls.HOPS)
    cluster_of = net.source_of_location()
    balls = np.zeros((net.n_sources, cluster_balls.DEPTH + 1), dtype=np.int64)
    wanted = np.unique(cluster_of[locations])
    sweeps = np.unique(np.searchsorted(net.sweep_ptr, wanted, side="right") - 1)
    clusters = np.arange(net.n_sources)
    for g in sweeps.tolist():
        ball_sweeps._sweep_range(net, range(g, g + 1), cluster_balls.DEPTH, balls, clusters)
    return cluster_balls.ClusterBalls(balls, cluster_of.astype(np.int32), graph)


def test_national_rows_bound_the_balls_and_draws_equal_the_reference(national_graph):
    """On the national graph: two clusters' rows equal independent searches from all their
    members; every sampled location's row bounds its true balls; and draws at epsilon 0.5 and
    0.25 with the profile table and the rows equal the reference sampler's."""
    from test_profiles import _partial_table

    graph = national_graph
    rng = np.random.default_rng(77)
    key = Key.from_bytes(bytes(range(100, 132)))
    nodes = rng.choice(len(graph), 8, replace=False)
    locations = graph.node_location[nodes].astype(np.int64)
    far = _partial_rows(graph, locations)
    mass = loc_mass(graph)
    for location in locations[:2].tolist():
        members = np.flatnonzero(far.cluster_of == far.cluster_of[location])
        assert 1 <= members.size <= cluster_balls.SIZE
        distance = cluster_hops(graph, members)
        expected = [int(mass[distance <= j].sum()) for j in range(cluster_balls.DEPTH + 1)]
        assert far.balls[far.cluster_of[location]].tolist() == expected
    for location in locations.tolist():
        d = location_distances(graph, location).astype(np.int64)
        d = np.where(d < 0, 10**9, d)
        ball = np.cumsum(np.bincount(np.minimum(d, 200), weights=mass, minlength=201))
        row = far.upper_row(location, 200)
        assert np.all(row >= ball[:200].astype(np.int64))
    table = _partial_table(graph, locations, engine_profiles.DEPTH)
    table.far = far
    row_hits = 0
    for eps, picked in (("0.5", nodes[:6].tolist()), ("0.25", nodes[6:].tolist())):
        mechanism = Mechanism(graph, eps)
        codes = [graph.label(v) for v in picked]
        ids = [f"subject-{i}" for i in range(len(picked))]
        expected = mechanism.perturb_reference(key, ids, codes)
        sampler = FastSampler(mechanism, profiles=table)
        context = mechanism.stream_context(key)
        got = [graph.label(sampler.sample_group(context, v, [s])[0]) for v, s in zip(picked, ids)]
        assert got == expected, eps
        row_hits += sampler.stats["row_hits"]
    assert row_hits > 0


def _report_signals(sweeps: tuple[int, int]) -> int:
    """A build task that records, in the folder named by $SIGNALS_SEEN, how this worker
    handles SIGTERM and SIGINT."""
    folder = Path(os.environ["SIGNALS_SEEN"])
    quiet = signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ignores = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    (folder / f"{os.getpid()}-{sweeps[0]}").write_text(f"{quiet} {ignores}")
    return sweeps[1] - sweeps[0]


def test_build_workers_leave_signals_to_the_parent(tmp_path, monkeypatch):
    """The CLI turns SIGTERM into KeyboardInterrupt; build workers inherit that handler through
    fork, and printed a traceback when the pool was shut down.  They must take the default
    SIGTERM (die quietly) and ignore SIGINT (the parent handles it)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    monkeypatch.setenv("SIGNALS_SEEN", str(tmp_path))
    monkeypatch.setattr(ball_sweeps, "_build_task", _report_signals)
    graph = planar_graph(random.Random(6), 300, 320, 1.0, 8)
    net = ball_sweeps.Sweeps(graph, loc_mass(graph), 4, 1)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        ball_sweeps.sweep_table(
            net, 3, np.dtype(np.int64), np.arange(net.n_sources), path=tmp_path / "t.npy",
            workers=2,
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    seen = [p.read_text() for p in tmp_path.iterdir() if p.suffix != ".npy"]
    assert seen and set(seen) == {"True True"}
