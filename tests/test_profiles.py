"""The ball-mass profile table (engine/profiles.py) and the engine path that reads it.

The table must hold exactly the masses the reference shells have (``graph.shells``), whatever
the graph shape, the sweep grouping and the depth; the engine reading it must give exactly the
reference sampler's outputs (also checked, with the table on and off, in test_fast_path.py); a
cached table must be refused unless it is byte for byte the one built for its graph.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import warnings
from pathlib import Path

import numpy as np
import pytest
from graphs import colocated
from hostile_files import fifo_nobody_writes
from test_fast_path import planar_graph, random_batch, random_case

from postcode_privacy import Key, Mechanism
from postcode_privacy.engine import (
    FastSampler,
    ball_sweeps,
    cluster_balls,
    perturb_many,
    perturb_nodes,
)
from postcode_privacy.engine import batch as engine_batch
from postcode_privacy.engine import fast as fast_module
from postcode_privacy.engine import landmarks as engine_landmarks
from postcode_privacy.engine import profiles as engine_profiles
from postcode_privacy.engine.layout import graph_layout, map_layout
from postcode_privacy.engine.search import ShellSearch, ball_disagreement
from postcode_privacy.errors import InvalidParameterError, WorkerLostError
from postcode_privacy.graph.shells import node_shells
from postcode_privacy.mechanism.subject import canonical_subject_id


def reference_masses(graph, node: int, depth: int) -> list[int]:
    """Masses of the reference node shells 0 .. depth of ``node``."""
    return [int(graph.prior[s].sum()) for s in node_shells(graph, node, depth)]


def loc_mass(graph) -> np.ndarray:
    return engine_landmarks.GraphTables(graph).loc_mass


@pytest.mark.parametrize("seed", range(6))
def test_profile_shells_equal_the_reference_shells(seed, monkeypatch):
    """Every node's shell masses from the table equal the reference shells', for sweep groups
    of one, a few or 64 sources, depths from 0 to beyond the graph's diameter, and graphs with
    coordinates (swept in map order) or without."""
    rng = random.Random(300 + seed)
    monkeypatch.setattr(ball_sweeps, "WORD", [1, 3, 64][seed % 3])
    monkeypatch.setattr(ball_sweeps, "_GROUP_HOPS", [0, 1, 6][seed // 3 % 3])
    checked = 0
    for keep in (1.0, 0.6, 0.3):
        graph = planar_graph(
            rng, rng.randrange(2, 70), 90, keep, rng.choice([1, 40]), seed % 2 == 0
        )
        for depth in (0, 1, 3, 12):
            table = engine_profiles.BallProfiles(
                engine_profiles.build_profiles(graph, loc_mass(graph), depth), graph
            )
            for node in range(len(graph)):
                location = int(graph.node_location[node])
                got = table.shell_masses(location, int(graph.prior[node]), depth)
                assert got == reference_masses(graph, node, depth), (seed, keep, depth, node)
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("with_coordinates", [False, True])
def test_groups_partition_the_locations(with_coordinates):
    """The renumbered graph is the same graph (each location keeps its neighbours and mass),
    and the groups partition its locations."""
    graph = planar_graph(random.Random(4), 300, 320, 0.7, 4, with_coordinates)
    mass = loc_mass(graph)
    net = ball_sweeps.Sweeps(graph, mass)
    assert sorted(net.order.tolist()) == list(range(graph.n_locations))
    assert net.seed_ptr.tolist() == list(range(graph.n_locations + 1))  # a source a location
    sizes = np.diff(net.sweep_ptr)
    assert sizes.min() >= 1 and sizes.max() <= 64 and sizes.sum() == graph.n_locations
    for new, location in enumerate(net.order.tolist()):
        neighbours = net.order[net.indices[net.indptr[new] : net.indptr[new + 1]]]
        assert sorted(neighbours.tolist()) == sorted(graph.location_neighbours(location).tolist())
        assert net.mass[new] == mass[location]


def test_map_order_follows_a_hilbert_curve():
    """Every cell of the grid has its own position, and consecutive positions are adjacent
    cells (what makes a ball lie in few stretches of memory)."""
    side = 16
    x, y = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    positions = ball_sweeps._curve_positions(x.ravel(), y.ravel(), side)
    assert sorted(positions.tolist()) == list(range(side * side))
    along = np.argsort(positions)
    steps = np.abs(np.diff(x.ravel()[along])) + np.abs(np.diff(y.ravel()[along]))
    assert steps.tolist() == [1] * (side * side - 1)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache directory, and tables cached for graphs of any size."""
    monkeypatch.setenv("POSTCODE_PRIVACY_CACHE", str(tmp_path))
    monkeypatch.setattr(engine_profiles, "CACHE_MIN_LOCATIONS", 1)
    monkeypatch.setattr(ball_sweeps, "WORD", 4)
    monkeypatch.setattr(ball_sweeps, "_SWEEPS_PER_TASK", 3)
    monkeypatch.setattr(engine_profiles, "DEPTH", 6)
    return tmp_path


def test_cached_build_in_workers_equals_the_in_memory_build(cache):
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    table = engine_profiles.profiles_for(graph, loc_mass(graph), workers=2)
    expected = engine_profiles.build_profiles(graph, loc_mass(graph), 6)
    assert np.array_equal(np.asarray(table.cumulative), expected)
    names = sorted(p.name for p in cache.iterdir())  # the table and the far-mass rows
    stem = f"{graph.sha256[:32]}-"
    assert names == [  # and no partial files
        f"clusters-{stem}s64-h6-d80-of.npy", f"clusters-{stem}s64-h6-d80.json",
        f"clusters-{stem}s64-h6-d80.npy", f"profiles-{stem}d6.json", f"profiles-{stem}d6.npy",
    ]  # fmt: skip
    loaded = engine_profiles.load_profiles(graph)
    assert np.array_equal(np.asarray(loaded.cumulative), expected)


def test_a_build_uses_the_table_it_built_not_whatever_is_at_the_name_later(cache, monkeypatch):
    """A shared cache's file can be replaced just after it is moved into place: the build
    returns the array it built and hashed, never the name opened again (a review swapped in a
    table of sevens there, and then a pipe, which blocked the build for ever)."""
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    table_path, _ = engine_profiles._paths(graph, 6)
    expected = engine_profiles.build_profiles(graph, loc_mass(graph), 6)

    def swap(*_):  # another file moved in at the name
        np.save(table_path.with_name("other.npy"), np.full_like(expected, 7))
        os.replace(table_path.with_name("other.npy"), table_path)

    monkeypatch.setattr(engine_profiles, "_remove_other_depths", swap)
    table = engine_profiles.profiles_for(graph, loc_mass(graph))
    assert np.array_equal(np.asarray(table.cumulative), expected)


@pytest.mark.parametrize("blocked", ["table", "rows"])
def test_a_header_that_cannot_be_written_means_a_table_in_memory(cache, blocked):
    """If the cache refuses a header (here a directory stands where it would go), the release
    goes on with the table or the rows built in memory and a warning, as when the cache cannot
    be written at all, not with an error; no partial file is left behind."""
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    header = (
        engine_profiles._paths(graph, 6)[1]
        if blocked == "table"
        else cluster_balls._paths(graph)[2]
    )
    header.mkdir()
    with pytest.warns(
        RuntimeWarning,
        match=f"could not cache the {'ball-mass' if blocked == 'table' else 'far-mass'}",
    ):
        table = engine_profiles.profiles_for(graph, loc_mass(graph))
    expected = engine_profiles.build_profiles(graph, loc_mass(graph), 6)
    assert np.array_equal(np.asarray(table.cumulative), expected)
    assert table.far is not None
    assert not [p for p in cache.iterdir() if ".partial-" in p.name]


def test_a_cached_build_removes_only_this_graphs_tables_of_other_depths(cache):
    """A table of another depth (left by an earlier version) is deleted once the new one is
    cached; another graph's tables and another build's partial file are left alone."""
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    mine = f"profiles-{graph.sha256[:32]}-d"
    stale = [cache / f"{mine}5.npy", cache / f"{mine}5.json", cache / f"{mine}32.npy"]
    kept = [cache / f"{mine}6.partial-1.npy", cache / f"profiles-{'0' * 32}-d5.npy"]
    for path in stale + kept:
        path.write_bytes(b"x")
    engine_profiles.profiles_for(graph, loc_mass(graph))
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in kept)
    assert (cache / f"{mine}6.npy").exists() and (cache / f"{mine}6.json").exists()


def test_a_stale_table_that_cannot_be_removed_costs_no_second_build(
    cache, monkeypatch, count_calls
):
    """The clean-up of other depths is best effort: a stale table this user may not delete (a
    shared cache directory with the sticky bit, as /tmp) must neither throw away the table just
    cached nor make the caller build the whole table again in memory."""
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    stale = cache / f"profiles-{graph.sha256[:32]}-d5.npy"
    stale.write_bytes(b"x")
    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        if self == stale:
            raise PermissionError(1, "Operation not permitted", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    builds = count_calls(engine_profiles, "build_profiles")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = engine_profiles.profiles_for(graph, loc_mass(graph))
    assert builds == [1]
    assert (cache / f"profiles-{graph.sha256[:32]}-d6.npy").exists()
    assert isinstance(table.cumulative, np.memmap)


def test_a_cached_table_is_refused_unless_every_byte_checks_out(cache):
    """A corrupt, truncated, stale or mislabelled file is refused with a warning and rebuilt,
    never used."""
    graph = planar_graph(random.Random(9), 60, 70, 1.0, 8)
    engine_profiles.profiles_for(graph, loc_mass(graph))
    table_path, header_path = engine_profiles._paths(graph, 6)
    good = table_path.read_bytes()
    header = json.loads(header_path.read_text())

    def refused(match):
        fresh = planar_graph(random.Random(9), 60, 70, 1.0, 8)  # same content, new object
        with pytest.raises(ValueError, match=match):
            engine_profiles.load_profiles(fresh)
        with pytest.warns(RuntimeWarning, match="refused"):
            assert engine_profiles.cached_profiles(fresh) is None
        with pytest.warns(RuntimeWarning, match="refused"):
            rebuilt = engine_profiles.profiles_for(fresh, loc_mass(fresh))
        assert table_path.read_bytes() == good  # rebuilt and rewritten
        assert np.array_equal(np.asarray(rebuilt.cumulative), np.load(table_path))

    flipped = bytearray(good)
    flipped[-3] ^= 1  # one mass, one bit
    table_path.write_bytes(bytes(flipped))
    refused("content hash")
    header_path.write_text(json.dumps({**header, "graph_sha256": "0" * 64}))
    refused("another graph or depth")
    header_path.write_text(json.dumps({**header, "depth": 5}))
    refused("another graph or depth")
    table_path.write_bytes(good[: len(good) // 2])
    refused(None)
    # The cache may be shared: a pipe at a cached name is refused, never waited on (a review
    # saw the load block for ever), and replaced by the rebuilt file.
    for path in (header_path, table_path):
        path.unlink()
        fifo_nobody_writes(path)
        refused("not a regular file|cannot read")
        assert path.is_file()
    assert not [p for p in table_path.parent.iterdir() if p.name.startswith(".building-")]


def test_a_table_loaded_in_the_background_is_the_table_or_is_refused_alike(cache):
    """``load_in_background`` (a release starts it before its check pass) hands
    ``cached_profiles`` the very table, or the refusal of a damaged file, reported once in
    the caller's thread; it starts nothing where the table would not be read."""
    import threading
    import warnings

    def fresh():
        return planar_graph(random.Random(10), 60, 70, 1.0, 8)

    def loaders():
        return [t for t in threading.enumerate() if t.name == "postcode-privacy-profiles"]

    graph = fresh()
    expected = np.asarray(engine_profiles.profiles_for(graph, loc_mass(graph)).cumulative)
    for wanted in (False, None):  # none wanted, or none by default for a graph not embedded
        other = fresh()
        engine_profiles.load_in_background(other, wanted)
        assert other not in engine_profiles._LOADING and loaders() == []
    other = fresh()
    engine_profiles.load_in_background(other, True)
    assert other in engine_profiles._LOADING
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = engine_profiles.cached_profiles(other)
    assert np.array_equal(np.asarray(table.cumulative), expected)
    assert other not in engine_profiles._LOADING and loaders() == []  # taken and joined

    table_path, _ = engine_profiles._paths(graph, 6)
    flipped = bytearray(table_path.read_bytes())
    flipped[-3] ^= 1
    table_path.write_bytes(bytes(flipped))
    damaged = fresh()
    engine_profiles.load_in_background(damaged, True)
    with pytest.warns(RuntimeWarning, match="content hash") as caught:
        assert engine_profiles.cached_profiles(damaged) is None
    assert len(caught) == 1 and loaders() == []


def test_a_pinned_table_is_refused_even_with_a_recomputed_header(cache, monkeypatch):
    """For a graph whose table is pinned (the embedded one), an edited table is refused even
    when whoever edited it also rewrote the header's hash; a build that differs from the pin
    is neither cached nor used."""
    graph = planar_graph(random.Random(12), 60, 70, 1.0, 8)
    table = engine_profiles.profiles_for(graph, loc_mass(graph))
    table_path, header_path = engine_profiles._paths(graph, 6)
    good = table_path.read_bytes()
    true_hash = ball_sweeps.table_sha256(np.asarray(table.cumulative))
    monkeypatch.setitem(engine_profiles.PINNED_SHA256, (graph.sha256, 6), true_hash)
    edited = np.load(table_path)
    edited[:, 4:] *= 2
    np.save(table_path, edited)
    header = json.loads(header_path.read_text())
    header["sha256"] = ball_sweeps.table_sha256(edited)
    header_path.write_text(json.dumps(header))
    fresh = planar_graph(random.Random(12), 60, 70, 1.0, 8)
    with pytest.raises(ValueError, match="pinned"):
        engine_profiles.load_profiles(fresh)
    with pytest.warns(RuntimeWarning, match="refused"):
        engine_profiles.profiles_for(fresh, loc_mass(fresh))
    assert table_path.read_bytes() == good
    # A build whose content is not the pinned one: a warning, no table, nothing cached.
    other = planar_graph(random.Random(12), 60, 70, 1.0, 8)
    monkeypatch.setitem(engine_profiles.PINNED_SHA256, (graph.sha256, 6), "0" * 64)
    for path in (table_path, header_path):
        path.unlink()
    with pytest.warns(RuntimeWarning, match="not the pinned table"):
        assert engine_profiles.profiles_to_use(other, loc_mass(other), 1, True, 1) is None
    assert [p for p in cache.iterdir() if p.name.startswith("profiles-")] == []


def test_the_embedded_graphs_table_is_pinned():
    from postcode_privacy.graph.national import DEFAULT_GRAPH_SHA256

    assert (DEFAULT_GRAPH_SHA256, engine_profiles.DEPTH) in engine_profiles.PINNED_SHA256


def test_an_engine_table_for_another_graph_is_refused():
    graph = planar_graph(random.Random(1), 20, 25, 1.0, 4)
    other = planar_graph(random.Random(2), 20, 25, 1.0, 4)
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(other, loc_mass(other), 3), other
    )
    with pytest.raises(ValueError, match="another graph"):
        FastSampler(Mechanism(graph, "1"), profiles=table)


def test_the_profile_path_is_taken_and_equals_the_reference():
    """With the table the engine decides most groups without exploring from shell 0 (so the
    identity checks exercise that path), and its outputs are the reference's."""
    rng = random.Random(17)
    hits = records = 0
    for _ in range(40):
        mechanism, key, ids, codes = random_case(rng)
        graph = mechanism.graph
        depth = rng.choice([1, 3, 30])
        table = engine_profiles.BallProfiles(
            engine_profiles.build_profiles(graph, loc_mass(graph), depth), graph
        )
        sampler = FastSampler(mechanism, profiles=table, landmarks=rng.random() < 0.5)
        context = mechanism.stream_context(key)
        got = []
        for subject, code in zip(ids, codes):
            node = graph.index_of(code)
            draw = sampler.sample_group(context, node, [canonical_subject_id(subject)])
            got.append(graph.label(draw[0]))
        assert got == mechanism.perturb_reference(key, ids, codes)
        hits += sampler.stats["profile_hits"] + sampler.stats["row_hits"]
        records += len(ids)
    assert hits > records / 2


def test_one_call_draws_what_the_search_and_its_pick_draw():
    """``ShellSearch.draw_one`` (start, explore, guard and pick in one compiled call, for a
    record with a postcode of its own) gives ``pick_one``'s node after ``start`` and
    ``explore_to``, leaves the search where they leave it, reports a disagreeing table row
    or floor (1) or far-mass row (2) before picking, and refuses a shell or draw out of
    range."""
    rng = random.Random(41)
    none = np.zeros(0, dtype=np.int64)
    checked = guarded = 0
    for _ in range(30):
        graph = planar_graph(rng, rng.randrange(1, 50), rng.randrange(50, 80), 1.0, 12)
        mechanism = Mechanism(graph, rng.choice(["0.3", "1", "2"]))
        table = engine_profiles.build_profiles(graph, loc_mass(graph), 12)
        one, two = FastSampler(mechanism).search, FastSampler(mechanism).search
        for _ in range(20):
            node = rng.randrange(len(graph))
            one.start(node)
            one.explore_to(one.max_shells)
            shell = rng.choice(np.flatnonzero(one.masses[: one.n_shells]).tolist())
            mass = int(one.masses[shell])
            draw = rng.randrange(mass)
            one.start(node)
            one.explore_to(shell + 1)
            row = table[graph.node_location[node]]
            picked = one.pick_one(shell, draw)
            assert two.draw_one(node, shell, draw, row, none, none) == (picked, 0)
            assert (two.source, two.n_shells) == (one.source, one.n_shells)
            assert two.locations_explored == one.locations_explored
            assert two.masses[: two.n_shells].tolist() == one.masses[: one.n_shells].tolist()
            one.explore_to(one.max_shells)  # and explores on as they do (shell 1's co-located)
            two.explore_to(two.max_shells)
            assert two.masses[: two.n_shells].tolist() == one.masses[: one.n_shells].tolist()
            one.start(node)
            one.explore_to(shell + 1)
            if 1 <= shell < row.size:  # the balls from 1 hop on are checked against the rows
                balls = np.cumsum(one.masses[: one.n_shells])
                assert two.draw_one(node, shell, draw, row, balls, balls) == (picked, 0)
                heavy, light, high = row.copy(), balls.copy(), balls.copy()
                heavy[shell] += 1
                light[shell] -= 1
                high[shell] += 1
                assert two.draw_one(node, shell, draw, heavy, none, none) == (-1, 1)
                assert two.draw_one(node, shell, draw, row, none, light) == (-1, 2)
                assert two.draw_one(node, shell, draw, row, high, none) == (-1, 1)
                guarded += 1
            with pytest.raises(InvalidParameterError):
                two.draw_one(node, shell, mass, row, none, none)
            checked += 1
        with pytest.raises(InvalidParameterError):
            two.draw_one(0, two.max_shells, 0, table[0], none, none)
    assert checked == 600 and guarded > 200, guarded


@pytest.mark.slow  # many draws each way: over a second
def test_records_alone_are_drawn_in_one_call_and_refused_alike(monkeypatch):
    """Records with a postcode of their own whose shell the table settles, with the core's
    bound or a far-mass row's, take the one-call path (``FastSampler._sample_one``) and draw
    the reference's outputs; the others fall back to the general path.  With near masses
    wrong, or far-mass rows lighter than the balls, the one-call path refuses them itself,
    as the general path does, before the general path is tried."""
    monkeypatch.setattr(cluster_balls, "SIZE", 3)
    monkeypatch.setattr(cluster_balls, "HOPS", 1)
    monkeypatch.setattr(cluster_balls, "DEPTH", 30)
    rng = random.Random(43)
    calls: list[tuple[bool, int]] = []  # (far-mass row given, what it found) of each call
    real_draw_one, real_decide = ShellSearch.draw_one, FastSampler.decide

    def counted(self, source, shell, draw, table_row, floor, far_row):
        found = real_draw_one(self, source, shell, draw, table_row, floor, far_row)
        calls.append((far_row.size > 0, found[1]))
        return found

    def general(self, *args, **kwargs):
        calls.append((False, -1))  # the general path was taken
        return real_decide(self, *args, **kwargs)

    monkeypatch.setattr(ShellSearch, "draw_one", counted)
    monkeypatch.setattr(FastSampler, "decide", general)
    refused = {1: 0, 2: 0}
    records = 0
    for case in range(80):
        graph = planar_graph(rng, rng.randrange(150, 250), 260, 1.0, 8)
        mechanism = Mechanism(graph, rng.choice(["1", "2"]))
        key = Key.from_bytes(rng.randbytes(32))
        codes = [graph.label(v) for v in rng.sample(range(len(graph)), 40)]  # groups of one
        ids = [f"s{rng.randrange(10**6)}" for _ in codes]
        depth = rng.choice([2, 3, 4])  # well short of the graph's reach: the rows decide too
        built = engine_profiles.build_profiles(graph, loc_mass(graph), depth)
        table = engine_profiles.BallProfiles(built, graph)
        balls, cluster_of = cluster_balls.build_cluster_balls(graph, loc_mass(graph))
        wrong = ("table", "rows", None, None)[case % 4]
        if wrong == "table":
            built[:, 1:] += 1
        elif wrong == "rows":  # too light within the table's depth only, where the guard
            balls[:, 1 : depth + 1] = balls[:, :1]  # sees it; still non-decreasing
        table.far = cluster_balls.ClusterBalls(balls, cluster_of, graph)
        sampler = FastSampler(mechanism, profiles=table)
        context = mechanism.stream_context(key)
        got = []
        try:
            for subject, code in zip(ids, codes):
                before = len(calls)
                node = graph.index_of(code)
                got.append(sampler.sample_group(context, node, [canonical_subject_id(subject)]))
        except RuntimeError as exc:
            assert wrong is not None and "disagree" in str(exc)
            last = calls[before:]
            if len(last) == 1 and last[0][1] in refused:  # refused by the one call alone
                refused[last[0][1]] += 1
            continue
        if wrong is None:
            assert [graph.label(g[0]) for g in got] == mechanism.perturb_reference(key, ids, codes)
            records += len(ids)
    drawn = [far for far, found in calls if found == 0]
    assert refused[1] > 3 and refused[2] > 3 and records > 1500, (refused, records)
    assert len(drawn) > records / 4 and sum(drawn) > 100, (len(drawn), sum(drawn))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("along_map", [False, True])
def test_the_floor_bounds_every_ball_and_its_z_low_bounds_z(seed, along_map):
    """``ShellSearch.ball_floor`` is exactly the largest table value it promises (a location z
    k hops away gives table[z, i] at k + i), never above the true ball, and ``_z_low`` from it
    lies between the core's lower bound and the exact Z at every depth, strictly above the
    core's where the floor knows more than the explored ball."""
    from postcode_privacy.engine.bounds import z_low_by_floor as _z_low
    from postcode_privacy.engine.search import ShellSearch, location_distances

    rng = random.Random(900 + seed)
    raised = checked = 0
    for _ in range(6):
        graph = planar_graph(
            rng, rng.randrange(3, 80), 100, rng.choice([1.0, 0.7]), 30, with_coordinates=True
        )
        mass = loc_mass(graph)
        depth = rng.choice([0, 1, 2, 4])
        table = engine_profiles.build_profiles(graph, mass, depth)
        mechanism = Mechanism(graph, rng.choice(["0.3", "0.8", "1.5"]))
        radius, powers, total = mechanism.radius, mechanism.powers, graph.total_prior
        layout = (map_layout if along_map else graph_layout)(graph, mass)
        search = ShellSearch(graph, radius, mass, layout)  # the table is read by location
        for node in rng.sample(range(len(graph)), 12):
            masses = reference_masses(graph, node, radius - 1)
            balls = np.cumsum(masses).tolist()
            z = sum(p * m for p, m in zip(powers, masses)) + powers[radius] * (total - balls[-1])
            search.start(node)
            hops = rng.randrange(0, radius)
            search.explore_to(hops + 1)
            hops = search.n_shells - 1
            floor = search.ball_floor(table, hops, radius).tolist()
            distance = location_distances(graph, int(graph.node_location[node]))
            expected = [0] * radius
            for z_loc in np.flatnonzero((distance >= 1) & (distance <= hops)).tolist():
                k = int(distance[z_loc])
                for i in range(min(depth + 1, radius - k)):
                    expected[k + i] = max(expected[k + i], int(table[z_loc, i]))
            assert floor == expected
            assert all(f <= b for f, b in zip(floor[1:], balls[1:]))
            for h in range(radius):
                cumulative = np.cumsum([p * m for p, m in zip(powers, masses[: h + 1])]).tolist()
                cumulative = [int(c) for c in cumulative]
                core = cumulative[h] + powers[radius] * (total - balls[h])
                low = _z_low(cumulative, balls[h], np.array(floor), powers, radius, total)
                assert core <= low <= z
                raised += low > core
                checked += 1
    assert checked > 100 and raised > 10, (checked, raised)


def _z_low_written_out(cumulative, explored, floor, powers, radius, total):
    """``_z_low``'s recursion one hop at a time: L_j = min(max(L_{j-1}, F[j]), Pi)."""
    h = len(cumulative) - 1
    z, known = cumulative[h], explored
    for j in range(h + 1, radius):
        value = min(max(known, int(floor[j])), total)
        z += powers[j] * (value - known)
        known = value
    return z + powers[radius] * (total - known)


def test_z_low_is_its_recursion_on_any_floor():
    """``_z_low`` finds the running maximum with numpy and multiplies only where it grows:
    the same integer as the recursion of its docstring, for floors rising, flat, wild, above
    the total prior or below the explored mass, and an explored mass past the total (which no
    valid table gives, but the arithmetic must not depend on it)."""
    from postcode_privacy.engine.bounds import z_low_by_floor as _z_low

    rng = random.Random(4242)
    for case in range(3000):
        radius = rng.randrange(1, 70)
        total = rng.randrange(0, 10 ** rng.randrange(1, 18))
        powers = tuple(
            sorted((rng.randrange(0, 2 ** rng.randrange(1, 240)) for _ in range(radius + 1)),
                   reverse=True)
        )  # fmt: skip
        h = rng.randrange(0, radius)
        cumulative = sorted(rng.randrange(0, 2**240) for _ in range(h + 1))
        explored = rng.randrange(0, total + 1) if case % 10 else total + rng.randrange(1, 99)
        shape = case % 3
        if shape == 0:
            floor = np.zeros(radius, dtype=np.int64)
        elif shape == 1:
            floor = np.sort(rng.choices(range(total + 2), k=radius)).astype(np.int64)
        else:
            floor = np.array(rng.choices(range(2 * total + 2), k=radius), dtype=np.int64)
        got = _z_low(cumulative, explored, floor, powers, radius, total)
        assert type(got) is int
        assert got == _z_low_written_out(cumulative, explored, floor, powers, radius, total)


def test_a_wrong_table_is_caught(monkeypatch):
    """Mutation checks.  A table whose far masses are wrong changes outputs (so the identity
    tests would see it); one whose near masses are wrong is refused by the engine's own check
    against the shells it explores."""
    rng = random.Random(23)
    differing = refused = 0
    for case in range(30):
        mechanism, key, ids, codes = random_case(rng)
        graph = mechanism.graph
        depth = min(12, mechanism.radius - 1)
        wrong = engine_profiles.build_profiles(graph, loc_mass(graph), 12)
        if case % 2:
            wrong[:, 1:] += 1  # every ball from 1 hop on holds one unit more: near masses wrong
        else:
            wrong[:, depth:] *= 3  # the deepest ball the engine reads: a far mass wrong
        table = engine_profiles.BallProfiles(wrong, graph)
        monkeypatch.setattr(engine_batch, "profiles_to_use", lambda *a, table=table, **k: table)
        try:
            got = perturb_many(mechanism, key, ids, codes, workers=1)
        except RuntimeError as exc:
            assert "disagree" in str(exc)
            refused += 1
            continue
        differing += got != mechanism.perturb_reference(key, ids, codes)
    assert differing > 0 and refused > 0, (differing, refused)


def test_a_floor_above_the_balls_explored_is_refused():
    """The floor reads the rows of the source's neighbours, which the check of the source's
    own shells does not see: with every other location's row too heavy, the balls explored
    for the draw are found lighter than the floor and the engine stops; with the right table
    it goes on."""
    rng = random.Random(31)
    graph = planar_graph(rng, 60, 70, 1.0, 8)
    mechanism = Mechanism(graph, "0.3")
    right = engine_profiles.build_profiles(graph, loc_mass(graph), 2)
    node = rng.randrange(len(graph))
    wrong = right.copy()
    wrong[np.arange(graph.n_locations) != graph.node_location[node]] += 1000
    for table, refused in ((right, False), (wrong, True)):
        sampler = FastSampler(mechanism, profiles=engine_profiles.BallProfiles(table, graph))
        sampler.search.start(node)
        assert sampler.sources.ball_floor() is not None
        sampler.search.explore_to(mechanism.radius)
        if refused:
            with pytest.raises(RuntimeError, match="disagree"):
                sampler.sources.check_explored()
        else:
            sampler.sources.check_explored()


def test_the_guard_names_the_table_before_the_rows():
    """``search.ball_disagreement``: the explored balls checked against a table row (equal), a
    floor (no lighter) and a far-mass row (no heavier), each as far as it reaches.  A wrong
    table or floor is named whatever the depth, even past a shallower failure of the row, as
    the message tells the user which cache to delete (found by a review)."""
    rng = random.Random(37)
    graph = planar_graph(rng, 60, 70, 1.0, 8)
    mechanism = Mechanism(graph, "0.3")
    table = engine_profiles.build_profiles(graph, loc_mass(graph), 6)
    search = FastSampler(mechanism).search
    node = rng.randrange(len(graph))
    search.start(node)
    search.explore_to(6)
    balls = np.cumsum(search.masses[: search.n_shells])
    row = table[graph.node_location[node]]
    none = np.zeros(0, dtype=np.int64)

    def disagreement(table_row, floor, far_row):
        return ball_disagreement(search.masses, search.n_shells, table_row, floor, far_row)

    assert disagreement(row, balls, balls + 1) == 0  # equal, at the floor, under the row
    assert disagreement(none, none, none) == 0
    deep_wrong = row.copy()
    deep_wrong[5] += 1
    shallow_low = balls.copy()
    shallow_low[1:] -= 1  # the row too small from one hop on
    assert disagreement(none, none, shallow_low) == 2
    assert disagreement(deep_wrong, none, none) == 1
    assert disagreement(deep_wrong, none, shallow_low) == 1  # the table named first
    floor_high = balls.copy()
    floor_high[4] += 1
    assert disagreement(none, floor_high, shallow_low) == 1
    assert disagreement(row[:1], none, none) == 0  # B_0 is the node, not its location


def test_which_table_a_batch_uses(cache, monkeypatch):
    """The default policy: a custom graph uses none unless asked; the embedded graph uses a
    cached one and builds one on first use only for a batch of many distinct postcodes;
    "cached" never builds."""
    graph = planar_graph(random.Random(31), 50, 60, 1.0, 3)
    mass = loc_mass(graph)
    use = engine_profiles.profiles_to_use
    assert use(graph, mass, 10**6, None, 1) is None  # not the embedded graph
    assert use(graph, mass, 10**6, "cached", 1) is None  # nothing cached, nothing built
    for wrong in ("yes", 0, 1, 0.0):
        with pytest.raises(InvalidParameterError):
            use(graph, mass, 10, wrong, 1)
    monkeypatch.setattr(engine_profiles, "DEFAULT_GRAPH_SHA256", graph.sha256)
    monkeypatch.setattr(engine_profiles, "BUILD_MIN_SOURCES", 40)
    assert use(graph, mass, 39, None, 1) is None  # too few to justify a build
    assert not list(cache.iterdir())
    built = use(graph, mass, 40, None, 1)
    assert built is not None and list(cache.iterdir())
    assert use(graph, mass, 1, None, 1) is built and use(graph, mass, 1, "cached", 1) is built
    assert use(graph, mass, 1, False, 1) is None
    other = planar_graph(random.Random(32), 50, 60, 1.0, 3)
    assert use(other, loc_mass(other), 1, True, 1) is not None  # asked for: built for any graph


def test_a_first_use_build_runs_on_the_callers_processes(monkeypatch):
    """The build uses the workers the call would use (one where forking is unavailable, as in
    a daemon process), never more."""
    seen = []
    monkeypatch.setattr(engine_batch, "profiles_to_use", lambda *a, **k: seen.append(a[4]) or None)
    graph = planar_graph(random.Random(2), 30, 30, 1.0, 3)
    mechanism, key = Mechanism(graph, "1"), Key.from_bytes(bytes(range(1, 33)))
    nodes = np.arange(3000) % len(graph)
    ids = [str(i) for i in range(3000)]
    perturb_nodes(mechanism, key, ids, nodes, workers=1)
    perturb_nodes(mechanism, key, ids, nodes, workers=2)
    monkeypatch.setattr(engine_batch, "_fork_available", lambda: False)
    perturb_nodes(mechanism, key, ids, nodes, workers=2)
    assert seen == [1, 2, 1]


def test_outputs_do_not_depend_on_the_table(monkeypatch):
    """Table on, off, shallow or deep, many workers or one: the same outputs."""
    _, mechanism, key, ids, nodes = random_batch(random.Random(41), 220, 260, "0.8", 4000)
    base = perturb_nodes(mechanism, key, ids, nodes, workers=1, profiles=False)
    for depth in (2, 8, 40):
        monkeypatch.setattr(engine_profiles, "DEPTH", depth)
        for workers in (1, 2):
            got = perturb_nodes(mechanism, key, ids, nodes, workers=workers, profiles=True)
            assert np.array_equal(got, base), (depth, workers)


def test_colocated_postcodes_have_their_own_shell_zero():
    """Shell 0 is the postcode alone; its co-located postcodes belong to shell 1."""
    graph = colocated([3, 5, 7, 1, 2, 9, 4, 8, 6])
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, loc_mass(graph), 4), graph
    )
    for node in range(len(graph)):
        location = int(graph.node_location[node])
        got = table.shell_masses(location, int(graph.prior[node]), 4)
        assert got == reference_masses(graph, node, 4)


# -- the national graph ------------------------------------------------------------------------


def _partial_table(graph, locations, depth):
    """A table holding true rows for the sweep groups containing ``locations`` (zeros
    elsewhere, which the engine would refuse if it read them): the builder's own kernel on the
    national graph, without the full build's minutes."""
    net = ball_sweeps.Sweeps(graph, loc_mass(graph))
    rank = np.empty(net.order.size, dtype=np.int64)
    rank[net.order] = np.arange(net.order.size)
    groups = np.unique(np.searchsorted(net.sweep_ptr, rank[locations], side="right") - 1)
    out = np.zeros((graph.n_locations, depth + 1), dtype=np.int64)
    for g in groups.tolist():
        ball_sweeps._sweep_range(net, range(g, g + 1), depth, out, net.order)
    return engine_profiles.BallProfiles(out, graph)


def test_national_profiles_and_draws_equal_the_reference(national_graph, monkeypatch):
    """On the national graph: table rows equal the reference shells, and draws with the table
    equal the reference sampler's at epsilon 2, 1, 0.5 and 0.25, one record at a time and as
    records alone drawn together (engine/alone.py, most of them on the compiled path)."""
    monkeypatch.setattr(fast_module, "ALONE_MIN", 1)
    compiled: list[int] = []
    real = FastSampler._sample_alone

    def spy(self, *args):
        drawn = real(self, *args)
        compiled.extend(out for out in drawn if out >= 0)
        return drawn

    monkeypatch.setattr(FastSampler, "_sample_alone", spy)
    graph = national_graph
    rng = np.random.default_rng(2026)
    key = Key.from_bytes(bytes(range(64, 96)))
    cases = (("2", 60), ("1", 30), ("0.5", 4), ("0.25", 2))
    nodes = rng.choice(len(graph), sum(c for _, c in cases), replace=False)
    locations = graph.node_location[nodes].astype(np.int64)
    depth = engine_profiles.DEPTH
    table = _partial_table(graph, locations, depth)
    for node in nodes[:12].tolist():
        location = int(graph.node_location[node])
        got = table.shell_masses(location, int(graph.prior[node]), depth)
        assert got == reference_masses(graph, node, depth)
    start = 0
    hits = 0
    for eps, count in cases:
        mechanism = Mechanism(graph, eps)
        picked = nodes[start : start + count].tolist()
        start += count
        codes = [graph.label(v) for v in picked]
        ids = [f"subject-{i}" for i in range(count)]
        expected = mechanism.perturb_reference(key, ids, codes)
        context = mechanism.stream_context(key)
        for landmarks in (False, True):
            sampler = FastSampler(mechanism, profiles=table, landmarks=landmarks)
            got = [
                graph.label(sampler.sample_group(context, v, [s])[0]) for v, s in zip(picked, ids)
            ]
            assert got == expected, (eps, landmarks)
            hits += sampler.stats["profile_hits"]
        groups = [(v, [canonical_subject_id(s)]) for v, s in zip(picked, ids)]
        sampler = FastSampler(mechanism, profiles=table)
        got = [graph.label(out[0]) for out in sampler.sample_each(context, groups)]
        assert got == expected, eps
    assert hits > 60 and len(compiled) > 80


_REAL_BUILD_TASK = ball_sweeps._build_task


def _build_task_then_die(sweeps):
    """A build worker's task that kills its worker, but for the first task; module-level, as the
    pool pickles it by name."""
    if sweeps[0] > 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return _REAL_BUILD_TASK(sweeps)


@pytest.mark.slow  # a build on two workers, one killed (about 1.5 s)
def test_a_build_worker_killed_mid_task_stops_the_build_with_an_error(cache, monkeypatch):
    """A build worker killed while it sweeps (the out-of-memory killer's SIGKILL) took its task
    with it, and the build waited for ever; it now stops with ``WorkerLostError``, and no
    table is left in the cache."""
    graph = planar_graph(random.Random(8), 150, 170, 0.9, 30)
    monkeypatch.setattr(ball_sweeps, "_build_task", _build_task_then_die)
    with pytest.raises(WorkerLostError, match="killed by signal 9"):
        engine_profiles.profiles_for(graph, loc_mass(graph), workers=2)
    assert not list(cache.iterdir())
    assert multiprocessing.active_children() == []
