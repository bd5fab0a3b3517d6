"""Shared sweeps (engine/shared_shells.py, ``FastSampler.sample_groups``) give exactly the
outputs of one search per postcode, and so the reference sampler's.

Checked at three levels: the compiled sweep's shell masses and picks against ``ShellSearch``
for random sets of sources (co-located postcodes, repeated sources, shell 0 and 1 draws, a draw
outside its shell); ``sample_groups`` against ``sample_group`` and the reference on generated
graphs, with the deciding sweep forced on small graphs; and the batch engine, whose dense tasks
take this path, against the reference, on generated graphs and on the national graph.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from graphs import colocated
from test_fast_path import planar_graph

from postcode_privacy import Key, Mechanism
from postcode_privacy.engine import (
    FastSampler,
    bound_sources,
    cluster_balls,
    perturb_nodes,
    shared_draws,
)
from postcode_privacy.engine import batch as engine_batch
from postcode_privacy.engine import profiles as engine_profiles
from postcode_privacy.engine.landmarks import graph_tables
from postcode_privacy.engine.layout import graph_layout, map_layout
from postcode_privacy.engine.search import ShellSearch
from postcode_privacy.engine.shared_shells import WORD, SharedShells
from postcode_privacy.mechanism.subject import canonical_subject_id


def _loc_mass(graph) -> np.ndarray:
    return graph_tables(graph).loc_mass


def _requests(rng, search_masses, n_shells):
    """Random requests of one source: (shell, draw) with the draw below the shell's mass."""
    out = []
    for _ in range(rng.randrange(0, 5)):
        h = rng.randrange(n_shells)
        if search_masses[h] > 0:
            out.append((h, rng.randrange(int(search_masses[h]))))
    return sorted(out)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("along_map", [False, True])
def test_a_shared_sweep_gives_each_sources_shells_and_picks(seed, along_map):
    """In either layout of the sweep (engine/layout.py), against a search in the graph's own
    numbering: the layout renumbers locations only, never a node, a shell or a pick."""
    rng = random.Random(seed)
    graph = (
        colocated()
        if seed == 0
        else planar_graph(rng, 60, 90, rng.choice([1.0, 0.6]), 12, with_coordinates=along_map)
    )
    search = ShellSearch(graph, 40)
    layout = (map_layout if along_map else graph_layout)(graph, _loc_mass(graph))
    if along_map and seed:
        assert layout.original.tolist() != list(range(graph.n_locations))  # renumbered
    shared = SharedShells(graph, _loc_mass(graph), layout)
    for _ in range(8):
        count = rng.randrange(1, WORD + 1)
        sources = [rng.randrange(len(graph)) for _ in range(count)]  # repeats allowed
        n_shells, expected_masses, requests, expected = [], [], [], []
        for source in sources:
            depth = rng.randrange(1, 12)
            search.start(source)
            search.explore_to(depth)
            n_shells.append(depth)
            expected_masses.append(search.masses[:depth].tolist())
            mine = _requests(rng, search.masses, search.n_shells)
            requests.append(mine)
            if mine:
                shells = np.array([h for h, _ in mine], dtype=np.int64)
                draws = np.array([d for _, d in mine], dtype=np.int64)
                expected += search.pick(shells, draws).tolist()
        req_ptr = np.cumsum([0] + [len(r) for r in requests]).astype(np.int64)
        flat = [q for r in requests for q in r]
        out, masses, bad = shared.pick(
            np.array(sources, dtype=np.int64),
            np.array(n_shells, dtype=np.int64),
            req_ptr,
            np.array([h for h, _ in flat], dtype=np.int64),
            np.array([d for _, d in flat], dtype=np.int64),
        )
        assert bad == -1
        assert out.tolist() == expected
        for b, depth in enumerate(n_shells):
            assert masses[b, :depth].tolist() == expected_masses[b]
            assert not masses[b, depth:].any()


def test_a_draw_outside_its_shell_is_reported_and_leaves_the_buffers_clean():
    rng = random.Random(5)
    graph = planar_graph(rng, 50, 70, 1.0, 6)
    shared = SharedShells(graph, _loc_mass(graph))
    search = ShellSearch(graph, 20)
    search.start(3)
    search.explore_to(6)
    mass = int(search.masses[4])
    sources = np.array([3, 7], dtype=np.int64)
    depths = np.array([6, 6], dtype=np.int64)
    ptr = np.array([0, 2, 2], dtype=np.int64)
    shells = np.array([4, 4], dtype=np.int64)
    _, _, bad = shared.pick(sources, depths, ptr, shells, np.array([0, mass], dtype=np.int64))
    assert bad == 1  # the second request's draw equals its shell's mass
    own = int(graph.prior[3])
    _, _, bad = shared.pick(sources, depths, ptr, np.array([0, 0]), np.array([0, own]))
    assert bad == 1  # shell 0 holds the source's own prior only
    assert not shared._state.any()  # left as found, so the next sweep is right
    out, _, bad = shared.pick(sources, depths, ptr, shells, np.array([0, mass - 1]))
    assert bad == -1
    assert out.tolist() == search.pick(shells, np.array([0, mass - 1])).tolist()


def _dense_groups(rng, graph, mean):
    """Every postcode in node order with a few records each (some none, one a long group)."""
    groups = []
    for node in range(len(graph)):
        k = rng.choice([0, 1, 1, 2, 3, mean, 2 * mean])
        if node == len(graph) // 2:
            k = 40
        if k:
            groups.append((node, [canonical_subject_id(f"{node}-{r}") for r in range(k)]))
    return groups


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("along_map", [False, True])
def test_sample_groups_equal_one_search_per_postcode_and_the_reference(
    seed, along_map, monkeypatch
):
    """With a shallow table the bounds leave many records undecided, so both shared sweeps
    (deciding and drawing) do real work on these small graphs; with ``along_map`` the
    sampler's search and sweeps read the graph renumbered along the map."""
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 2)
    monkeypatch.setattr(bound_sources, "FLOOR_HOPS", 2)
    # (other seeds with coordinates: a graph built with them draws other groups)
    rng = random.Random((200 if along_map else 100) + seed)
    graph = planar_graph(
        rng, 120, 150, rng.choice([1.0, 0.8]), rng.choice([1, 10]), with_coordinates=along_map
    )
    eps = rng.choice(["0.25", "0.5", "1", "2"])
    mechanism = Mechanism(graph, eps, radius=rng.choice([None, 12]))
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, _loc_mass(graph), rng.choice([2, 3, 5])), graph
    )
    if seed % 2:
        table.far = cluster_balls.cluster_balls_for(graph, _loc_mass(graph), cache=False)
    key = Key.from_bytes(rng.randbytes(32))
    context = mechanism.stream_context(key)
    groups = _dense_groups(rng, graph, 5)
    alone = FastSampler(mechanism, profiles=table)
    expected = [alone.sample_group(context, node, ids) for node, ids in groups]
    for together in (False, True):
        sampler = FastSampler(mechanism, profiles=table, along_map=along_map)
        assert sampler.sample_groups(context, groups, decide_together=together) == expected
        assert sampler.stats["shared_groups"] > 0
        if together and sampler.shared.deciding_depth() is not None:
            assert sampler.stats["decided_by_sweep"] > 0
        # the sweeps read the graph numbered as the search reads it (the speed is the point),
        # and along the map that numbering is not the graph's own
        if along_map:
            assert sampler.search.layout.original.tolist() != list(range(graph.n_locations))
        arrays = sampler.shared.sweeps()._graph_arrays
        assert arrays[0] is sampler.search._arrays.indptr
        assert arrays[5] is sampler.search._arrays.node_location
    picked = rng.sample(range(len(groups)), 12)
    codes = [graph.label(groups[i][0]) for i in picked]
    ids = [groups[i][1][0] for i in picked]
    assert [graph.label(expected[i][0]) for i in picked] == mechanism.perturb_reference(
        key, ids, codes
    )


@pytest.mark.parametrize("together", [False, True])
def test_a_wrong_table_is_caught_on_the_shared_path(together, monkeypatch):
    """Near masses one unit too heavy: each shared sweep's guard refuses them, as the
    one-search path does, before any output is returned."""
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 2)
    monkeypatch.setattr(bound_sources, "FLOOR_HOPS", 2)
    rng = random.Random(8)
    graph = planar_graph(rng, 120, 150, 1.0, 4)
    mechanism = Mechanism(graph, "0.5", radius=12)
    wrong = engine_profiles.build_profiles(graph, _loc_mass(graph), 3)
    wrong[:, 1:] += 1
    table = engine_profiles.BallProfiles(wrong, graph)
    context = mechanism.stream_context(Key.from_bytes(bytes(range(1, 33))))
    sampler = FastSampler(mechanism, profiles=table)
    with pytest.raises(RuntimeError, match="profiles disagree with the graph"):
        sampler.sample_groups(context, _dense_groups(rng, graph, 4), decide_together=together)


def test_dense_batches_share_sweeps_with_any_workers(monkeypatch):
    """The batch engine takes the shared path for dense tasks, and its outputs are the
    reference's and the same for one and two workers."""
    calls = []
    original = FastSampler.sample_groups

    def counted(self, context, groups, decide_together=False):
        calls.append(decide_together)
        return original(self, context, groups, decide_together)

    monkeypatch.setattr(FastSampler, "sample_groups", counted)
    monkeypatch.setattr(engine_batch, "TASK_RECORDS", 200)
    monkeypatch.setattr(engine_batch, "PARALLEL_MIN", 10)
    monkeypatch.setattr(engine_batch, "SHARED_MIN_GROUPS", 16)
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 2)
    monkeypatch.setattr(bound_sources, "FLOOR_HOPS", 2)
    rng = random.Random(44)
    graph = planar_graph(rng, 200, 240, 1.0, 6)
    mechanism = Mechanism(graph, "0.5", radius=14)
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, _loc_mass(graph), 3), graph
    )
    monkeypatch.setattr(engine_batch, "profiles_to_use", lambda *a, **k: table)
    key = Key.from_bytes(rng.randbytes(32))
    nodes = np.array([rng.randrange(len(graph)) for _ in range(1500)])
    ids = [f"r{i}" for i in range(nodes.size)]
    one = perturb_nodes(mechanism, key, ids, nodes, workers=1)
    assert True in calls  # dense enough to decide together too
    assert (perturb_nodes(mechanism, key, ids, nodes, workers=2) == one).all()
    sample = rng.sample(range(nodes.size), 30)
    codes = [graph.label(int(nodes[i])) for i in sample]
    expected = mechanism.perturb_reference(key, [ids[i] for i in sample], codes)
    assert [graph.label(int(one[i])) for i in sample] == expected


def test_a_sparse_batch_searches_each_postcode_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(FastSampler, "sample_groups", lambda *a, **k: calls.append(1))
    monkeypatch.setattr(engine_batch, "PARALLEL_MIN", 10**9)
    rng = random.Random(3)
    graph = planar_graph(rng, 400, 400, 1.0, 4)
    mechanism = Mechanism(graph, "1")
    nodes = np.arange(0, 400, 4)  # a quarter of the postcodes: too sparse to share
    perturb_nodes(mechanism, Key.from_bytes(bytes(range(1, 33))), [str(v) for v in nodes], nodes)
    assert calls == []


def test_a_dense_national_batch_equals_the_reference(national_graph):
    """Every postcode of a stretch of the national graph, a few records each, at epsilon 0.5
    (both shared sweeps, the national table and rows) and 1: the same outputs as one search
    per postcode, and a sample of them the reference sampler's.

    The table and the rows are the builder's own, for the stretches' locations only (the full
    build takes minutes, and a clean machine has no cached one): a source's own row and its
    cluster's are true, other locations' table rows are zeros, which only weaken the floor."""
    from test_cluster_balls import _partial_rows
    from test_profiles import _partial_table

    graph = national_graph
    stretches = (("0.5", 812_345, 3), ("1", 1_234_567, 12))
    nodes = np.concatenate([np.arange(start, start + 400) for _, start, _ in stretches])
    locations = np.unique(graph.node_location[nodes]).astype(np.int64)
    table = _partial_table(graph, locations, engine_profiles.DEPTH)
    table.far = _partial_rows(graph, locations)
    rng = random.Random(2027)
    key = Key.from_bytes(bytes(range(96, 128)))
    for eps, start, checked in stretches:
        mechanism = Mechanism(graph, eps)
        context = mechanism.stream_context(key)
        groups = [
            (node, [f"{eps}-{node}-{r}" for r in range(rng.choice([1, 2, 6, 9]))])
            for node in range(start, start + 400)
        ]
        alone = FastSampler(mechanism, profiles=table)
        expected = [alone.sample_group(context, node, ids) for node, ids in groups]
        shared = FastSampler(mechanism, profiles=table)
        assert shared.sample_groups(context, groups, decide_together=True) == expected
        assert shared.stats["shared_groups"] > 100
        if eps == "0.5":
            assert shared.stats["decided_by_sweep"] > 0
        picked = rng.sample(range(len(groups)), checked)
        codes = [graph.label(groups[i][0]) for i in picked]
        ids = [groups[i][1][0] for i in picked]
        reference = mechanism.perturb_reference(key, ids, codes)
        assert [graph.label(expected[i][0]) for i in picked] == reference


def test_far_mass_rows_too_light_are_caught_on_the_shared_path(monkeypatch):
    """Rows that stop growing past the table understate the far balls, so a decision could
    use a z_high below Z: the shared path refuses them, as one search per postcode does (the
    deciding sweep's guard checks every ball it explored; the drawing's guard and the
    exploring of groups still undecided see them too)."""
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 3)
    monkeypatch.setattr(bound_sources, "FLOOR_HOPS", 3)
    rng = random.Random(12)
    graph = planar_graph(rng, 150, 180, 1.0, 4)
    mechanism = Mechanism(graph, "0.5", radius=16)
    depth = 2
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, _loc_mass(graph), depth), graph
    )
    far = cluster_balls.cluster_balls_for(graph, _loc_mass(graph), cache=False)
    far.balls = far.balls.copy()
    far.balls[:, depth + 1 :] = far.balls[:, depth : depth + 1]  # flat past the table
    table.far = far
    context = mechanism.stream_context(Key.from_bytes(bytes(range(1, 33))))
    groups = _dense_groups(rng, graph, 4)
    with pytest.raises(RuntimeError, match="far-mass rows disagree"):
        FastSampler(mechanism, profiles=table).sample_groups(context, groups, True)


def test_the_deciding_sweep_reaches_at_least_the_floors_hops_past_the_table(monkeypatch):
    """So its guard sees every ball the floor's exploration saw and every depth the floor
    reaches: a review found that a shallower sweep let far-mass rows too light past it change
    an output where one search per postcode refused them."""
    rng = random.Random(9)
    graph = planar_graph(rng, 150, 160, 1.0, 4)
    mechanism = Mechanism(graph, "0.5", radius=40)
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, _loc_mass(graph), 3), graph
    )
    sampler = FastSampler(mechanism, profiles=table)
    monkeypatch.setattr(bound_sources, "FLOOR_HOPS", 6)
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 2)
    assert sampler.shared.deciding_depth() == 3 + 6
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 8)
    assert sampler.shared.deciding_depth() == 3 + 8
    monkeypatch.setattr(shared_draws, "DECIDING_HOPS", 40)  # past R - 1: explore alone
    assert sampler.shared.deciding_depth() is None


def test_a_task_straddling_two_dense_stretches_shares_sweeps_in_each(monkeypatch):
    """A regional file's postcodes are dense in stretches; a task over two of them is judged
    stretch by stretch, and the outputs are those of one search per postcode."""
    assert engine_batch._runs([3, 4, 6, 9, 10]) == [(0, 3), (3, 5)]
    assert engine_batch._runs([7]) == [(0, 1)]
    calls = []
    original = FastSampler.sample_groups

    def counted(self, context, groups, decide_together=False):
        calls.append((groups[0][0], groups[-1][0]))
        return original(self, context, groups, decide_together)

    monkeypatch.setattr(FastSampler, "sample_groups", counted)
    monkeypatch.setattr(engine_batch, "PARALLEL_MIN", 10**9)  # one process, one task
    monkeypatch.setattr(engine_batch, "TASK_RECORDS", 10**6)
    rng = random.Random(6)
    graph = planar_graph(rng, 500, 600, 1.0, 4)
    mechanism = Mechanism(graph, "1")
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, _loc_mass(graph), 4), graph
    )
    monkeypatch.setattr(engine_batch, "profiles_to_use", lambda *a, **k: table)
    nodes = np.array([v for v in [*range(0, 150), *range(400, 550)] for _ in range(3)])
    ids = [f"r{i}" for i in range(nodes.size)]
    key = Key.from_bytes(rng.randbytes(32))
    got = perturb_nodes(mechanism, key, ids, nodes)
    assert [first for first, _ in calls] == [1, 400]  # node 0 is the first task, run alone
    context = mechanism.stream_context(key)
    alone = FastSampler(mechanism, profiles=table)
    expected = [
        alone.sample_group(context, int(v), [canonical_subject_id(i)])[0]
        for v, i in zip(nodes, ids)
    ]
    assert got.tolist() == expected


def test_a_batch_along_the_map_groups_neighbours_and_keeps_every_output(monkeypatch):
    """Where the search reads the graph laid out along the map, the batch sorts its records
    along the map too (``_places``): a postcode's records stay together, co-located
    postcodes sit side by side, the dense stretches found along the map share their sweeps,
    and every output is the one the batch gives in node order, with one or two workers."""
    rng = random.Random(91)
    graph = planar_graph(rng, 300, 420, 1.0, 6, with_coordinates=True)
    mechanism = Mechanism(graph, "0.5", radius=14)
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, _loc_mass(graph), 3), graph
    )
    monkeypatch.setattr(engine_batch, "profiles_to_use", lambda *a, **k: table)
    monkeypatch.setattr(engine_batch, "PARALLEL_MIN", 10)
    monkeypatch.setattr(engine_batch, "TASK_RECORDS", 300)
    monkeypatch.setattr(engine_batch, "SHARED_MIN_GROUPS", 16)
    key = Key.from_bytes(rng.randbytes(32))
    nodes = np.array([v for v in range(len(graph)) for _ in range(rng.choice([1, 2, 5]))])
    rng.shuffle(nodes)
    ids = [f"m{i}" for i in range(nodes.size)]
    in_node_order = perturb_nodes(mechanism, key, ids, nodes, workers=1)

    monkeypatch.setattr(engine_batch, "ALONG_MAP_RADIUS", 0)
    monkeypatch.setattr(engine_batch, "ALONG_MAP_SOURCES", 0)
    tables = graph_tables(graph)
    places = engine_batch._places(tables)
    assert np.array_equal(np.sort(places), np.arange(len(graph)))  # a place for every node
    order = np.argsort(places[nodes], kind="stable")
    sorted_nodes = nodes[order]
    # each postcode's records are consecutive, and not in node order: the map's order
    assert np.unique(sorted_nodes[np.r_[True, sorted_nodes[1:] != sorted_nodes[:-1]]]).size == (
        np.unique(nodes).size
    )
    assert not np.all(np.diff(sorted_nodes) >= 0)
    layout = tables.search_layout(True)
    locations = layout.node_location[sorted_nodes]
    assert np.all(np.diff(locations) >= 0)  # co-located postcodes side by side, along the map
    calls = []
    original = FastSampler.sample_groups

    def counted(self, context, groups, decide_together=False):
        calls.append(len(groups))
        return original(self, context, groups, decide_together)

    monkeypatch.setattr(FastSampler, "sample_groups", counted)
    used = []  # the order the engine itself sorted the records in
    cut = engine_batch._tasks
    monkeypatch.setattr(
        engine_batch, "_tasks", lambda sorted_nodes: used.append(sorted_nodes) or cut(sorted_nodes)
    )
    for workers in (1, 2):
        got = perturb_nodes(mechanism, key, ids, nodes, workers=workers)
        assert np.array_equal(got, in_node_order)
    assert len(used) == 2 and all(np.array_equal(u, sorted_nodes) for u in used)
    assert calls and max(calls) >= 16  # dense along the map: the shared path was taken
    sample = rng.sample(range(nodes.size), 25)
    expected = mechanism.perturb_reference(
        key, [ids[i] for i in sample], [graph.label(int(nodes[i])) for i in sample]
    )
    assert [graph.label(int(in_node_order[i])) for i in sample] == expected


def test_bit_index_finds_every_one_of_the_64_bits():
    """The de Bruijn lookup against the plain answer, for every bit an int64 can hold (bit 63
    is a negative number), compiled as the gathers call it."""
    from postcode_privacy.engine.shared_shells import _bit_index

    for b in range(64):
        low = np.int64(np.uint64(1) << np.uint64(b))
        assert _bit_index(low) == b
